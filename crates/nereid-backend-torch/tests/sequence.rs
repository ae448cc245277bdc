//! A TorchScript sequence model with controls and implicit state, as the
//! engine runs it: the control and state tensors are forward() arguments
//! and the state output a returned value, by Triton's `<name>__<index>`
//! convention. The module is traced here with libtorch (an accumulator:
//! `(state * (1 - start) + input) * ready`); a traced module returns one
//! value, so the output and the state output both read value 0.

#![expect(clippy::unwrap_used, reason = "test helpers may panic")]

use std::path::Path;
use std::sync::Arc;

use nereid_backend_torch::TorchBackend;
use nereid_core::{Backend, Batch, DataType, Device, ModelSource, Tensor};
use nereid_repository::Repository;

const CONFIG: &str = r#"
name: "acc_torch"
platform: "pytorch_libtorch"
max_batch_size: 4
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  control_input [
    { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY__2" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ {
    input_name: "STATE__3"
    output_name: "STATE_OUT__0"
    data_type: TYPE_INT32
    dims: [ 1 ]
    initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }
  } ]
}
"#;

fn write_model(root: &Path) {
    let version = root.join("acc_torch/1");
    std::fs::create_dir_all(&version).unwrap();
    std::fs::write(root.join("acc_torch/config.pbtxt"), CONFIG).unwrap();
    let example = || tch::Tensor::zeros([1, 1], (tch::Kind::Int, tch::Device::Cpu));
    let inputs = [example(), example(), example(), example()];
    let mut forward = |args: &[tch::Tensor]| {
        let (input, start, ready, state) = (&args[0], &args[1], &args[2], &args[3]);
        let keep = start.ones_like() - start;
        let acc = (state * keep + input) * ready;
        vec![acc]
    };
    let module =
        tch::CModule::create_by_tracing("Accumulator", "forward", &inputs, &mut forward).unwrap();
    module.save(version.join("model.pt")).unwrap();
}

fn ints(name: &str, values: &[i32]) -> Tensor {
    Tensor {
        name: name.into(),
        datatype: DataType::Int32,
        shape: vec![values.len() as i64, 1],
        data: values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
    }
}

fn as_ints(t: &Tensor) -> Vec<i32> {
    t.data
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn controls_and_state_reach_forward_and_the_state_comes_back() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path());
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(TorchBackend::new())];
    let repo = Repository::new(vec![root.path().to_path_buf()], false);
    let entry = repo.scan().unwrap().into_iter().next().unwrap();
    let model = repo.resolve(&entry, &backends).unwrap();
    let source = ModelSource {
        model_name: model.name.clone(),
        version: 1,
        model_path: model.versions[0].model_path.clone(),
        config: model.config.clone(),
        device: Device::Cpu,
        instance_index: 0,
        instance_name: "acc_torch_0_0".into(),
    };
    let mut instance = model.backend.clone().unwrap().load(&source).unwrap();
    let outputs = vec!["OUTPUT__0".to_string(), "STATE_OUT__0".to_string()];
    // Two sequences start: 5 and 7 from a zero state.
    let first = instance
        .execute(&Batch {
            inputs: vec![
                ints("INPUT__0", &[5, 7]),
                ints("START__1", &[1, 1]),
                ints("READY__2", &[1, 1]),
                ints("STATE__3", &[0, 0]),
            ],
            outputs: outputs.clone(),
        })
        .unwrap();
    let by_name = |ts: &[Tensor], n: &str| as_ints(ts.iter().find(|t| t.name == n).unwrap());
    assert_eq!(by_name(&first, "OUTPUT__0"), [5, 7]);
    assert_eq!(by_name(&first, "STATE_OUT__0"), [5, 7]);
    // Their next steps, fed the state back; the second row is not ready.
    let second = instance
        .execute(&Batch {
            inputs: vec![
                ints("INPUT__0", &[1, 2]),
                ints("START__1", &[0, 0]),
                ints("READY__2", &[1, 0]),
                ints("STATE__3", &[5, 7]),
            ],
            outputs,
        })
        .unwrap();
    assert_eq!(by_name(&second, "OUTPUT__0"), [6, 0]);
}
