use nereid_core::model_config::{ModelInput, ModelOutput, ModelTensorReshape};

use super::*;

fn arg(name: &str, kind: ArgKind) -> Argument {
    let type_name = match kind {
        ArgKind::Tensor => "Tensor",
        ArgKind::StringList => "List[str]",
        ArgKind::Dict => "Dict(str, Tensor)",
        ArgKind::Other => "int",
    };
    Argument {
        name: name.into(),
        type_name: type_name.into(),
        kind,
    }
}

fn tensors(names: &[&str]) -> Vec<Argument> {
    names.iter().map(|n| arg(n, ArgKind::Tensor)).collect()
}

fn config(inputs: &[(&str, ConfigDataType)], outputs: &[(&str, ConfigDataType)]) -> ModelConfig {
    ModelConfig {
        name: "m".into(),
        max_batch_size: 4,
        input: inputs
            .iter()
            .map(|(n, t)| ModelInput {
                name: n.to_string(),
                data_type: *t as i32,
                dims: vec![-1],
                ..Default::default()
            })
            .collect(),
        output: outputs
            .iter()
            .map(|(n, t)| ModelOutput {
                name: n.to_string(),
                data_type: *t as i32,
                dims: vec![-1],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

const FP32: ConfigDataType = ConfigDataType::TypeFp32;

fn positions(plan: &InputPlan) -> Vec<(&str, usize)> {
    let InputPlan::Positional(bound) = plan else {
        panic!("expected positional binding, got {plan:?}")
    };
    bound
        .iter()
        .map(|b| (b.name.as_str(), b.position))
        .collect()
}

#[test]
fn named_index_digits_follow_the_first_double_underscore() {
    assert_eq!(named_index("INPUT__0"), Some(0));
    assert_eq!(named_index("IN__12"), Some(12));
    assert_eq!(named_index("a__b__1"), None);
    assert_eq!(
        named_index("x__"),
        Some(0),
        "Triton reads an empty index as 0"
    );
    assert_eq!(named_index("INPUT0"), None);
}

#[test]
fn forward_argument_names_win() {
    let c = config(&[("y", FP32), ("x", FP32)], &[("OUT", FP32)]);
    let plan = bind_inputs(&c, &tensors(&["x", "y"])).unwrap();
    assert_eq!(positions(&plan), [("y", 1), ("x", 0)]);
}

#[test]
fn named_index_then_config_order() {
    let c = config(&[("B__1", FP32), ("A__0", FP32)], &[("OUT", FP32)]);
    let plan = bind_inputs(&c, &tensors(&["p", "q"])).unwrap();
    assert_eq!(positions(&plan), [("B__1", 1), ("A__0", 0)]);
    let c = config(&[("second", FP32), ("first", FP32)], &[("OUT", FP32)]);
    let plan = bind_inputs(&c, &tensors(&["p", "q"])).unwrap();
    assert_eq!(positions(&plan), [("second", 0), ("first", 1)]);
}

#[test]
fn a_single_dict_argument_takes_every_input() {
    let c = config(&[("a", FP32), ("b", FP32)], &[("OUT", FP32)]);
    let plan = bind_inputs(&c, &[arg("inputs", ArgKind::Dict)]).unwrap();
    assert!(matches!(plan, InputPlan::Dict(ref b) if b.len() == 2));
}

#[test]
fn argument_count_and_kinds_are_checked() {
    let c = config(&[("x", FP32)], &[("OUT", FP32)]);
    let err = bind_inputs(&c, &tensors(&["x", "y"])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "model 'm': configuration expects 1 inputs, model provides 2"
    );
    let err = bind_inputs(&c, &[arg("n", ArgKind::Other)]).unwrap_err();
    assert!(
        err.to_string()
            .contains("An input of type 'int' was detected"),
        "{err}"
    );
    let c = config(&[("x__3", FP32)], &[("OUT", FP32)]);
    let err = bind_inputs(&c, &tensors(&["a"])).unwrap_err();
    assert!(
        err.to_string()
            .contains("refers to argument 3 of forward(), which takes 1"),
        "{err}"
    );
}

#[test]
fn bytes_inputs_must_meet_a_string_list() {
    let mut c = config(&[("x", ConfigDataType::TypeString)], &[("OUT", FP32)]);
    c.max_batch_size = 0;
    bind_inputs(&c, &[arg("x", ArgKind::StringList)]).unwrap();
    let err = bind_inputs(&c, &tensors(&["x"])).unwrap_err();
    assert!(
        err.to_string()
            .contains("input 'x' is BYTES but feeds forward()'s argument 'x' of type Tensor"),
        "{err}"
    );
    let c = config(&[("x", FP32)], &[("OUT", FP32)]);
    let err = bind_inputs(&c, &[arg("x", ArgKind::StringList)]).unwrap_err();
    assert!(
        err.to_string().contains("BYTES inputs must be List[str]"),
        "{err}"
    );
}

#[test]
fn strings_are_one_dimensional() {
    let mut c = config(&[("x", ConfigDataType::TypeString)], &[("OUT", FP32)]);
    c.input[0].dims = vec![2, 3];
    c.input[0].reshape = None;
    let err = bind_inputs(&c, &[arg("x", ArgKind::StringList)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "model 'm': Triton only supports 1 dimensional List of String as input for 'x'"
    );
    c.max_batch_size = 0;
    c.input[0].dims = vec![2, 3];
    c.input[0].reshape = Some(ModelTensorReshape { shape: vec![6] });
    bind_inputs(&c, &[arg("x", ArgKind::StringList)]).unwrap();
}

#[test]
fn unsigned_types_above_eight_bits_are_refused() {
    let c = config(&[("x", ConfigDataType::TypeUint32)], &[("OUT", FP32)]);
    let err = bind_inputs(&c, &tensors(&["x"])).unwrap_err();
    assert!(
        err.to_string()
            .contains("unsupported datatype TYPE_UINT32 for input 'x'"),
        "{err}"
    );
}

#[test]
fn outputs_by_index_or_order() {
    let c = config(&[("x", FP32)], &[("B__2", FP32), ("A__0", FP32)]);
    let indices: Vec<usize> = bind_outputs(&c).unwrap().iter().map(|o| o.index).collect();
    assert_eq!(indices, [2, 0]);
    let c = config(&[("x", FP32)], &[("B__2", FP32), ("plain", FP32)]);
    let indices: Vec<usize> = bind_outputs(&c).unwrap().iter().map(|o| o.index).collect();
    assert_eq!(indices, [0, 1]);
}

#[test]
fn empty_inputs_or_outputs_are_named() {
    let c = config(&[], &[("OUT", FP32)]);
    let err = bind_inputs(&c, &[]).unwrap_err();
    assert!(
        err.to_string().contains("must contain at least one input"),
        "{err}"
    );
    let c = config(&[("x", FP32)], &[]);
    let err = bind_outputs(&c).unwrap_err();
    assert!(
        err.to_string().contains("must contain at least one output"),
        "{err}"
    );
}

fn sequence_config(state: bool) -> ModelConfig {
    let text = format!(
        r#"
name: "seq"
max_batch_size: 4
input [ {{ name: "INPUT__0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
sequence_batching {{
  control_input [
    {{ name: "START__1" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY__2" control [ {{ kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] }} ] }}
  ]
  {}
}}
"#,
        if state {
            r#"state [ { input_name: "STATE_IN__3" output_name: "STATE_OUT__1" data_type: TYPE_INT32 dims: [ 1 ] } ]"#
        } else {
            ""
        }
    );
    nereid_repository::parse_config_text(&text).unwrap()
}

#[test]
fn sequence_controls_and_state_are_forward_arguments_and_outputs() {
    let c = with_sequence_tensors(&sequence_config(true)).unwrap();
    let plan = bind_inputs(&c, &tensors(&["x", "start", "ready", "state"])).unwrap();
    assert_eq!(
        positions(&plan),
        [
            ("INPUT__0", 0),
            ("START__1", 1),
            ("READY__2", 2),
            ("STATE_IN__3", 3)
        ]
    );
    let InputPlan::Positional(bound) = plan else {
        unreachable!()
    };
    assert_eq!(bound[2].datatype, DataType::Fp32);
    let outputs = bind_outputs(&c).unwrap();
    let indices: Vec<_> = outputs.iter().map(|o| (o.name.as_str(), o.index)).collect();
    assert_eq!(indices, [("OUTPUT__0", 0), ("STATE_OUT__1", 1)]);
}

#[test]
fn controls_count_as_inputs_as_in_triton() {
    let c = with_sequence_tensors(&sequence_config(false)).unwrap();
    let err = bind_inputs(&c, &tensors(&["x"])).unwrap_err();
    assert!(
        err.to_string()
            .contains("configuration expects 3 inputs, model provides 1"),
        "{err}"
    );
}

#[test]
fn state_needs_the_named_index_convention() {
    let mut c = sequence_config(true);
    if let Some(SchedulingChoice::SequenceBatching(sb)) = &mut c.scheduling_choice {
        sb.state[0].output_name = "STATE_OUT".into();
    }
    let err = with_sequence_tensors(&c).unwrap_err();
    assert!(
        err.to_string()
            .contains("state 'STATE_OUT' does not follow the <name>__<index> naming convention"),
        "{err}"
    );
}
