//! gRPC `ModelInferRequest` messages, with raw or typed tensor contents,
//! converted to the engine's request.

use nereid_core::shared_memory::REGION;
use nereid_protocol::grpc::decode_infer_request;
use nereid_protocol::inference::ModelInferRequest;
use prost::Message;

use crate::assert_clear;
use crate::models::validate_against_models;

/// The input is the protobuf encoding of a `ModelInferRequest`, as tonic
/// hands it to the service; bytes that are not one are skipped, as tonic
/// refuses them before Nereid's code runs.
pub fn check(data: &[u8]) {
    let Ok(message) = ModelInferRequest::decode(data) else {
        return;
    };
    let inputs = message.inputs.len();
    let raw = message.raw_input_contents.clone();
    match decode_infer_request(message) {
        Ok(request) => {
            assert_eq!(request.inputs.len(), inputs);
            for input in &request.inputs {
                assert!(input.shape.iter().all(|&d| d >= 0), "{:?}", input.shape);
            }
            // Raw contents go, unchanged and in order, to the inputs that
            // are not in shared memory.
            if !raw.is_empty() {
                let from_raw = request
                    .inputs
                    .iter()
                    .filter(|i| !i.parameters.contains_key(REGION));
                for (input, contents) in from_raw.zip(&raw) {
                    assert_eq!(&input.data, contents, "input '{}'", input.name);
                }
            }
            validate_against_models(&request);
        }
        Err(e) => assert_clear(&e),
    }
}
