//! The executor over a fake composer: steps are answered by closures.

use std::sync::Arc;

use bytes::Bytes;
use nereid_core::{DataType, Error, InferRequest, InferResponse, InputTensor, RequestedOutput};
use nereid_core::{Parameters, Tensor};
use parking_lot::Mutex;

use super::{Composer, Pipeline, StepFuture};

/// Answers each step with `OUT = IN0 ++ IN1 ++ model name` (bytes), or
/// fails the model named `broken`; records the order of the calls.
#[derive(Default)]
struct Fake {
    calls: Arc<Mutex<Vec<String>>>,
}

impl Composer for Fake {
    fn infer(&self, request: InferRequest) -> StepFuture {
        self.calls.lock().push(request.model_name.clone());
        Box::pin(async move {
            if request.model_name == "broken" {
                return Err(Error::invalid_argument("bad input"));
            }
            let mut data = Vec::new();
            for name in ["IN0", "IN1"] {
                if let Some(input) = request.inputs.iter().find(|i| i.name == name) {
                    data.extend_from_slice(&input.data);
                }
            }
            data.extend_from_slice(request.model_name.as_bytes());
            let n = i64::try_from(data.len()).unwrap_or(0);
            Ok(InferResponse {
                model_name: request.model_name,
                model_version: 1,
                id: request.id,
                outputs: vec![Tensor {
                    name: "OUT".into(),
                    datatype: DataType::Uint8,
                    shape: vec![n],
                    data: Bytes::from(data),
                }],
                parameters: Parameters::new(),
                in_shared_memory: Vec::new(),
            })
        })
    }
}

/// x -> a -> y ; x -> b -> z ; (y, z) -> join -> out ; y is also output.
fn diamond(second: &str) -> Pipeline {
    let config = nereid_repository::parse_config_text(&format!(
        r#"
        name: "e" platform: "ensemble" max_batch_size: 0
        input [ {{ name: "x" data_type: TYPE_UINT8 dims: [ -1 ] }} ]
        output [ {{ name: "out" data_type: TYPE_UINT8 dims: [ -1 ] }},
                 {{ name: "y" data_type: TYPE_UINT8 dims: [ -1 ] }} ]
        ensemble_scheduling {{ step [
          {{ model_name: "join" model_version: -1
             input_map {{ key: "IN0" value: "y" }} input_map {{ key: "IN1" value: "z" }}
             output_map {{ key: "OUT" value: "out" }} }},
          {{ model_name: "a" model_version: -1
             input_map {{ key: "IN0" value: "x" }} output_map {{ key: "OUT" value: "y" }} }},
          {{ model_name: "{second}" model_version: 2
             input_map {{ key: "IN0" value: "x" }} output_map {{ key: "OUT" value: "z" }} }}
        ] }}"#
    ))
    .unwrap();
    Pipeline::new(&config, 3)
}

fn request(outputs: &[&str]) -> InferRequest {
    InferRequest {
        model_name: "e".into(),
        id: "r1".into(),
        inputs: vec![InputTensor {
            name: "x".into(),
            datatype: DataType::Uint8,
            shape: vec![1],
            data: Bytes::from_static(b"x"),
            parameters: Parameters::new(),
        }],
        outputs: outputs
            .iter()
            .map(|name| RequestedOutput {
                name: (*name).into(),
                parameters: Parameters::new(),
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn steps_run_when_their_inputs_exist_and_outputs_flow_through() {
    let fake = Fake::default();
    let pipeline = diamond("b");
    let response = futures::executor::block_on(pipeline.run(request(&[]), &fake)).unwrap();
    let outputs: Vec<(&str, &[u8])> = response
        .outputs
        .iter()
        .map(|t| (t.name.as_str(), t.data.as_ref()))
        .collect();
    assert_eq!(outputs, [("out", &b"xaxbjoin"[..]), ("y", &b"xa"[..])]);
    assert_eq!((response.model_version, response.id.as_str()), (3, "r1"));
    // The join waits for both branches, which start together.
    assert_eq!(*fake.calls.lock(), ["a", "b", "join"]);
}

#[test]
fn only_requested_outputs_are_answered_each_once() {
    let response =
        futures::executor::block_on(diamond("b").run(request(&["y", "y"]), &Fake::default()))
            .unwrap();
    let names: Vec<&str> = response.outputs.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["y"]);
}

#[test]
fn a_failing_step_fails_the_request_naming_its_model() {
    let fake = Fake::default();
    let error =
        futures::executor::block_on(diamond("broken").run(request(&[]), &fake)).unwrap_err();
    assert_eq!(error.kind(), nereid_core::ErrorKind::InvalidArgument);
    assert!(error.message().contains("'broken'"), "{error}");
    assert!(error.message().contains("ensemble 'e'"), "{error}");
    // The join never ran.
    assert!(!fake.calls.lock().contains(&"join".to_string()));
}
