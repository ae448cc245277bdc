//! Checks a request against its model's config before anything is queued:
//! input names, datatypes, shapes (with `-1` wildcards and the batch
//! dimension), byte sizes and `BYTES` framing, requested outputs. Messages
//! follow Triton's wording, prefixed with the request id as Triton does.

use std::collections::HashSet;

use nereid_core::model_config::{ModelConfig, ModelInput};
use nereid_core::tensor::{count_bytes_elements, element_count, fixed_byte_size};
use nereid_core::{DataType, Error, InferRequest, InputTensor};

/// A request that fits its model: what the scheduler and workers need.
#[derive(Debug, Clone)]
pub struct ValidatedRequest {
    pub request: InferRequest,
    /// Inferences this request counts for: its batch dimension, or 1 for a
    /// model without batching.
    pub batch_size: u64,
    /// Outputs to return, in the order the client asked (every output of
    /// the model when it asked for none).
    pub outputs: Vec<String>,
}

/// Validates `request` against `config`, applying input `reshape`s.
pub fn validate(
    config: &ModelConfig,
    mut request: InferRequest,
) -> Result<ValidatedRequest, Error> {
    let ctx = Ctx {
        id: request_id(&request.id),
        model: &config.name,
    };
    check_input_names(&ctx, config, &request.inputs)?;
    let batching = config.max_batch_size > 0;
    let mut batch_size = None;
    for input in &mut request.inputs {
        let Some(spec) = config.input.iter().find(|i| i.name == input.name) else {
            return Err(ctx.invalid(format!(
                "unexpected inference input '{}' for model '{}'",
                input.name, ctx.model
            )));
        };
        check_datatype(&ctx, spec, input)?;
        if batching {
            let n = check_batch_dim(&ctx, config, input)?;
            if *batch_size.get_or_insert(n) != n {
                return Err(ctx.invalid(format!(
                    "input '{}' has batch size {n}, other inputs of the request have batch size {}",
                    input.name,
                    batch_size.unwrap_or(n)
                )));
            }
        }
        check_dims(&ctx, spec, input, batching)?;
        check_byte_size(&ctx, input)?;
        apply_reshape(spec, input, batching);
    }
    let outputs = requested_outputs(&ctx, config, &request)?;
    Ok(ValidatedRequest {
        request,
        batch_size: batch_size.unwrap_or(1),
        outputs,
    })
}

fn request_id(id: &str) -> &str {
    if id.is_empty() { "<id_unknown>" } else { id }
}

struct Ctx<'a> {
    id: &'a str,
    model: &'a str,
}

impl Ctx<'_> {
    fn invalid(&self, message: String) -> Error {
        Error::invalid_argument(format!("[request id: {}] {message}", self.id))
    }
}

fn check_input_names(
    ctx: &Ctx<'_>,
    config: &ModelConfig,
    inputs: &[InputTensor],
) -> Result<(), Error> {
    let mut seen = HashSet::new();
    for input in inputs {
        if !seen.insert(input.name.as_str()) {
            return Err(ctx.invalid(format!("input '{}' already exists in request", input.name)));
        }
    }
    let missing: Vec<&str> = config
        .input
        .iter()
        .filter(|spec| !spec.optional && !seen.contains(spec.name.as_str()))
        .map(|spec| spec.name.as_str())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let got: Vec<String> = inputs.iter().map(|i| format!("'{}'", i.name)).collect();
    let missing: Vec<String> = missing.iter().map(|n| format!("'{n}'")).collect();
    Err(ctx.invalid(format!(
        "{} but got {} inputs for model '{}'. Got input(s) [{}], but missing required input(s) [{}]. Please provide all required input(s).",
        expected_inputs(config),
        inputs.len(),
        ctx.model,
        got.join(","),
        missing.join(",")
    )))
}

/// How many inputs `config` takes, in Triton's words: an exact count when
/// none is optional, else a range.
fn expected_inputs(config: &ModelConfig) -> String {
    let all = config.input.len();
    let required = config.input.iter().filter(|s| !s.optional).count();
    if required == all {
        format!("expected {all} inputs")
    } else {
        format!("expected number of inputs between {required} and {all}")
    }
}

fn check_datatype(ctx: &Ctx<'_>, spec: &ModelInput, input: &InputTensor) -> Result<(), Error> {
    let expected = DataType::from_config(spec.data_type());
    if expected == Some(input.datatype) {
        return Ok(());
    }
    let expected = expected.map_or("INVALID", DataType::wire_name);
    Err(ctx.invalid(format!(
        "inference input '{}' data-type is '{}', but model '{}' expects '{expected}'",
        input.name, input.datatype, ctx.model
    )))
}

/// The request's batch size from the first dimension of `input`.
fn check_batch_dim(ctx: &Ctx<'_>, config: &ModelConfig, input: &InputTensor) -> Result<u64, Error> {
    let Some(&n) = input.shape.first() else {
        return Err(ctx.invalid(format!(
            "input '{}' has no batch dimension but model '{}' has max_batch_size {}",
            input.name, ctx.model, config.max_batch_size
        )));
    };
    if n < 1 || n > i64::from(config.max_batch_size) {
        return Err(ctx.invalid(format!(
            "inference request batch-size must be <= {} for '{}'",
            config.max_batch_size, ctx.model
        )));
    }
    Ok(n as u64)
}

fn check_dims(
    ctx: &Ctx<'_>,
    spec: &ModelInput,
    input: &InputTensor,
    batching: bool,
) -> Result<(), Error> {
    let dims = if batching {
        &input.shape[1..]
    } else {
        &input.shape[..]
    };
    let fits = dims.len() == spec.dims.len()
        && dims
            .iter()
            .zip(&spec.dims)
            .all(|(&got, &want)| got >= 0 && (want == -1 || got == want));
    if fits {
        return Ok(());
    }
    let expected: Vec<String> = batching
        .then_some(-1)
        .into_iter()
        .chain(spec.dims.iter().copied())
        .map(|d| d.to_string())
        .collect();
    let got: Vec<String> = input.shape.iter().map(i64::to_string).collect();
    Err(ctx.invalid(format!(
        "unexpected shape for input '{}' for model '{}'. Expected [{}], got [{}]. ",
        input.name,
        ctx.model,
        expected.join(","),
        got.join(",")
    )))
}

fn check_byte_size(ctx: &Ctx<'_>, input: &InputTensor) -> Result<(), Error> {
    let actual = input.data.len();
    if input.datatype == DataType::Bytes {
        let expected = element_count(&input.shape).unwrap_or(u64::MAX);
        let count = count_bytes_elements(&input.data).map_err(|e| {
            ctx.invalid(format!(
                "invalid BYTES data for input '{}': {e}",
                input.name
            ))
        })?;
        if count as u64 != expected {
            return Err(ctx.invalid(format!(
                "expected {expected} string elements for inference input '{}', got {count}",
                input.name
            )));
        }
        return Ok(());
    }
    match fixed_byte_size(input.datatype, &input.shape) {
        Some(expected) if expected == actual => Ok(()),
        expected => Err(ctx.invalid(format!(
            "input byte size mismatch for input '{}' for model '{}'. Expected {}, got {actual}",
            input.name,
            ctx.model,
            expected.map_or_else(|| "more than addressable".to_string(), |e| e.to_string())
        ))),
    }
}

fn apply_reshape(spec: &ModelInput, input: &mut InputTensor, batching: bool) {
    let Some(reshape) = &spec.reshape else { return };
    let batch = if batching {
        input.shape.first().copied()
    } else {
        None
    };
    let mut shape: Vec<i64> = batch
        .into_iter()
        .chain(reshape.shape.iter().copied())
        .collect();
    // A `-1` in a reshape takes whatever the request's dims leave over.
    if let Some(pos) = shape.iter().position(|&d| d == -1) {
        let total = element_count(&input.shape).unwrap_or(0);
        let known: u64 = shape
            .iter()
            .filter(|&&d| d != -1)
            .map(|&d| d as u64)
            .product();
        shape[pos] = total.checked_div(known).unwrap_or(0) as i64;
    }
    input.shape = shape;
}

fn requested_outputs(
    ctx: &Ctx<'_>,
    config: &ModelConfig,
    request: &InferRequest,
) -> Result<Vec<String>, Error> {
    if request.outputs.is_empty() {
        return Ok(config.output.iter().map(|o| o.name.clone()).collect());
    }
    let mut names = Vec::with_capacity(request.outputs.len());
    for output in &request.outputs {
        if !config.output.iter().any(|o| o.name == output.name) {
            return Err(Error::invalid_argument(format!(
                "unexpected inference output '{}' for model '{}'",
                output.name, ctx.model
            )));
        }
        // Triton answers an output asked for twice once.
        if !names.contains(&output.name) {
            names.push(output.name.clone());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use nereid_core::model_config::{
        DataType as CfgType, ModelInput, ModelOutput, ModelTensorReshape,
    };
    use nereid_core::{ErrorKind, Parameters, RequestedOutput};

    use super::*;

    fn config() -> ModelConfig {
        let input = |name: &str| ModelInput {
            name: name.into(),
            data_type: CfgType::TypeInt32 as i32,
            dims: vec![-1, 4],
            ..Default::default()
        };
        ModelConfig {
            name: "m".into(),
            max_batch_size: 8,
            input: vec![input("A"), input("B")],
            output: vec![ModelOutput {
                name: "Y".into(),
                data_type: CfgType::TypeInt32 as i32,
                dims: vec![-1, 4],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn tensor(name: &str, shape: &[i64]) -> InputTensor {
        let n = element_count(shape).unwrap() as usize;
        InputTensor {
            name: name.into(),
            datatype: DataType::Int32,
            shape: shape.to_vec(),
            data: Bytes::from(vec![0u8; n * 4]),
            parameters: Parameters::new(),
        }
    }

    fn request(inputs: Vec<InputTensor>) -> InferRequest {
        InferRequest {
            model_name: "m".into(),
            inputs,
            ..Default::default()
        }
    }

    fn error(inputs: Vec<InputTensor>) -> String {
        let e = validate(&config(), request(inputs)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        e.message().to_string()
    }

    #[test]
    fn accepts_a_fitting_request() {
        let v = validate(
            &config(),
            request(vec![tensor("A", &[3, 2, 4]), tensor("B", &[3, 5, 4])]),
        )
        .unwrap();
        assert_eq!(v.batch_size, 3);
        assert_eq!(v.outputs, ["Y"]);
    }

    #[test]
    fn names_what_is_wrong() {
        assert!(error(vec![tensor("A", &[1, 1, 4])]).contains("missing required input(s) ['B']"));
        assert!(
            error(vec![tensor("A", &[1, 1, 4]), tensor("A", &[1, 1, 4])])
                .contains("input 'A' already exists")
        );
        assert!(
            error(vec![
                tensor("A", &[1, 1, 4]),
                tensor("B", &[1, 1, 4]),
                tensor("C", &[1])
            ])
            .contains("unexpected inference input 'C'")
        );
        assert!(
            error(vec![tensor("A", &[1, 1, 3]), tensor("B", &[1, 1, 4])])
                .contains("Expected [-1,-1,4], got [1,1,3]")
        );
        assert!(
            error(vec![tensor("A", &[9, 1, 4]), tensor("B", &[9, 1, 4])])
                .contains("batch-size must be <= 8")
        );
        assert!(
            error(vec![tensor("A", &[2, 1, 4]), tensor("B", &[1, 1, 4])]).contains("batch size")
        );
        let mut short = tensor("A", &[1, 1, 4]);
        short.data = short.data.slice(0..12);
        assert!(error(vec![short, tensor("B", &[1, 1, 4])]).contains("Expected 16, got 12"));
        let mut float = tensor("A", &[1, 1, 4]);
        float.datatype = DataType::Fp32;
        assert!(
            error(vec![float, tensor("B", &[1, 1, 4])])
                .contains("data-type is 'FP32', but model 'm' expects 'INT32'")
        );
    }

    #[test]
    fn missing_inputs_are_counted_as_triton_counts_them() {
        assert_eq!(
            error(vec![]),
            "[request id: <id_unknown>] expected 2 inputs but got 0 inputs for model 'm'. Got input(s) [], but missing required input(s) ['A','B']. Please provide all required input(s)."
        );
        let mut cfg = config();
        cfg.input[1].optional = true;
        let e = validate(&cfg, request(vec![])).unwrap_err();
        assert_eq!(
            e.message(),
            "[request id: <id_unknown>] expected number of inputs between 1 and 2 but got 0 inputs for model 'm'. Got input(s) [], but missing required input(s) ['A']. Please provide all required input(s)."
        );
    }

    #[test]
    fn messages_carry_the_request_id() {
        let mut r = request(vec![tensor("A", &[1, 1, 4])]);
        r.id = "abc".into();
        let e = validate(&config(), r).unwrap_err();
        assert!(e.message().starts_with("[request id: abc] "), "{e}");
    }

    #[test]
    fn unknown_and_repeated_outputs() {
        let mut r = request(vec![tensor("A", &[1, 1, 4]), tensor("B", &[1, 1, 4])]);
        let out = |n: &str| RequestedOutput {
            name: n.into(),
            parameters: Parameters::new(),
        };
        r.outputs = vec![out("Y"), out("Y")];
        assert_eq!(validate(&config(), r.clone()).unwrap().outputs, ["Y"]);
        r.outputs = vec![out("Z")];
        assert!(
            validate(&config(), r)
                .unwrap_err()
                .message()
                .contains("unexpected inference output 'Z'")
        );
    }

    #[test]
    fn bytes_framing_and_count_are_checked() {
        let mut cfg = config();
        cfg.input.truncate(1);
        cfg.input[0].data_type = CfgType::TypeString as i32;
        cfg.input[0].dims = vec![-1];
        let mut t = tensor("A", &[1, 2]);
        t.datatype = DataType::Bytes;
        t.data = Bytes::from_static(&[1, 0, 0, 0, b'x', 5, 0, 0, 0, b'y']);
        let e = validate(&cfg, request(vec![t.clone()])).unwrap_err();
        assert!(e.message().contains("invalid BYTES data"), "{e}");
        t.data = Bytes::from_static(&[1, 0, 0, 0, b'x']);
        let e = validate(&cfg, request(vec![t])).unwrap_err();
        assert!(e.message().contains("expected 2 string elements"), "{e}");
    }

    #[test]
    fn reshape_is_applied_after_checking_dims() {
        let mut cfg = config();
        cfg.input.truncate(1);
        cfg.input[0].dims = vec![4];
        cfg.input[0].reshape = Some(ModelTensorReshape { shape: vec![2, 2] });
        let v = validate(&cfg, request(vec![tensor("A", &[3, 4])])).unwrap();
        assert_eq!(v.request.inputs[0].shape, [3, 2, 2]);
    }
}
