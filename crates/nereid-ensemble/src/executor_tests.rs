//! The executor over a fake composer: steps are answered by closures.

use std::sync::Arc;

use bytes::Bytes;
use nereid_core::{DataType, Error, InferRequest, InferResponse, InputTensor, RequestedOutput};
use nereid_core::{Parameters, Tensor};
use parking_lot::Mutex;

use super::{Composer, Pipeline, StepFuture, StepStream};

/// Answers each step with `OUT = IN0 ++ IN1 ++ model name` (bytes), or
/// fails the model named `broken`; records the order of the calls.
#[derive(Default)]
struct Fake {
    calls: Arc<Mutex<Vec<String>>>,
}

impl Composer for Fake {
    /// A model named `stream*` is decoupled: it answers three times, with
    /// `OUT` = its input and the response's number (the second answer an
    /// error when the model is `stream_failing`).
    fn is_decoupled(&self, model: &str, _version: &nereid_core::ModelVersion) -> bool {
        model.starts_with("stream")
    }

    fn infer_stream(&self, request: InferRequest) -> StepStream {
        self.calls.lock().push(request.model_name.clone());
        let input = request.inputs[0].data.clone();
        let failing = request.model_name == "stream_failing";
        let responses = (0..3u8).map(move |n| {
            if failing && n == 1 {
                return Err(Error::internal("midway"));
            }
            let mut data = input.to_vec();
            data.push(b'0' + n);
            Ok(InferResponse {
                model_name: request.model_name.clone(),
                model_version: 1,
                id: request.id.clone(),
                outputs: vec![Tensor {
                    name: "OUT".into(),
                    datatype: DataType::Uint8,
                    shape: vec![data.len() as i64],
                    data: Bytes::from(data),
                }],
                parameters: Parameters::new(),
                in_shared_memory: Vec::new(),
            })
        });
        Box::pin(futures::stream::iter(responses.collect::<Vec<_>>()))
    }

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

/// x -> first -> y -> a -> out (first decoupled when named `stream*`).
fn chain(first: &str) -> Pipeline {
    let config = nereid_repository::parse_config_text(&format!(
        r#"
        name: "e" platform: "ensemble" max_batch_size: 0
        input [ {{ name: "x" data_type: TYPE_UINT8 dims: [ -1 ] }} ]
        output [ {{ name: "out" data_type: TYPE_UINT8 dims: [ -1 ] }} ]
        ensemble_scheduling {{ step [
          {{ model_name: "{first}" model_version: -1
             input_map {{ key: "IN0" value: "x" }} output_map {{ key: "OUT" value: "y" }} }},
          {{ model_name: "a" model_version: -1
             input_map {{ key: "IN0" value: "y" }} output_map {{ key: "OUT" value: "out" }} }}
        ] }}"#
    ))
    .unwrap();
    Pipeline::new(&config, 3)
}

fn streamed(pipeline: &Pipeline, fake: &Fake) -> Vec<Result<Vec<u8>, String>> {
    let mut answers = Vec::new();
    let mut lasts = Vec::new();
    let mut emit = |answer: Result<InferResponse, Error>, last: bool| {
        answers.push(
            answer
                .map(|r| r.outputs[0].data.to_vec())
                .map_err(|e| e.message().to_owned()),
        );
        lasts.push(last);
    };
    futures::executor::block_on(pipeline.run_stream(request(&[]), fake, &mut emit)).unwrap();
    // The fake's streams end with their last response, so it is marked.
    let mut expected = vec![false; lasts.len()];
    if let Some(last) = expected.last_mut() {
        *last = true;
    }
    assert_eq!(lasts, expected);
    answers
}

#[test]
fn each_response_of_a_decoupled_step_runs_the_steps_after_it() {
    let fake = Fake::default();
    let answers = streamed(&chain("stream"), &fake);
    assert_eq!(
        answers,
        [
            Ok(b"x0a".to_vec()),
            Ok(b"x1a".to_vec()),
            Ok(b"x2a".to_vec())
        ]
    );
    assert_eq!(*fake.calls.lock(), ["stream", "a", "a", "a"]);
}

#[test]
fn a_failed_response_of_a_decoupled_step_is_sent_and_the_rest_go_on() {
    let answers = streamed(&chain("stream_failing"), &Fake::default());
    assert_eq!(answers[0], Ok(b"x0a".to_vec()));
    let error = answers[1].as_ref().unwrap_err();
    assert!(
        error.contains("step model 'stream_failing' failed: midway"),
        "{error}"
    );
    assert_eq!(answers[2], Ok(b"x2a".to_vec()));
}

#[test]
fn an_ensemble_without_a_decoupled_step_streams_its_one_answer() {
    let answers = streamed(&chain("plain"), &Fake::default());
    assert_eq!(answers, [Ok(b"xplaina".to_vec())]);
}
