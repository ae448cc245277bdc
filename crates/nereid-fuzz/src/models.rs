//! The model configs that decoded requests are validated against, so that
//! the fuzzer reaches the engine's shape, byte-size, `BYTES` and reshape
//! checks, and raw requests (one input) are decoded for. The seeds in
//! `fuzz/seeds/` use their input names.

use std::sync::LazyLock;

use bytes::Bytes;
use nereid_core::InferRequest;
use nereid_core::model_config::{
    DataType as ConfigType, ModelConfig, ModelInput, ModelOutput, ModelTensorReshape,
};
use nereid_core::tensor::{count_bytes_elements, element_count};
use nereid_protocol::rest::decode_raw_infer_request;

use crate::assert_clear;

fn input(name: &str, data_type: ConfigType, dims: &[i64], optional: bool) -> ModelInput {
    ModelInput {
        name: name.into(),
        data_type: data_type as i32,
        dims: dims.to_vec(),
        optional,
        ..Default::default()
    }
}

fn output(name: &str, data_type: ConfigType, dims: &[i64]) -> ModelOutput {
    ModelOutput {
        name: name.into(),
        data_type: data_type as i32,
        dims: dims.to_vec(),
        ..Default::default()
    }
}

fn reshaped(mut input: ModelInput, shape: &[i64]) -> ModelInput {
    input.reshape = Some(ModelTensorReshape {
        shape: shape.to_vec(),
    });
    input
}

/// `batched` (max_batch_size 4) and `plain` (no batching), and the one-input
/// models a raw request can go to.
static MODELS: LazyLock<[ModelConfig; 4]> = LazyLock::new(|| {
    let batched = ModelConfig {
        name: "batched".into(),
        max_batch_size: 4,
        input: vec![
            input("IN0", ConfigType::TypeInt32, &[-1, 3], false),
            input("IN1", ConfigType::TypeString, &[-1], true),
            reshaped(input("IN2", ConfigType::TypeFp16, &[2], true), &[1, 2]),
        ],
        output: vec![output("OUT0", ConfigType::TypeInt32, &[-1, 3])],
        ..Default::default()
    };
    let plain = ModelConfig {
        name: "plain".into(),
        input: vec![
            reshaped(input("X", ConfigType::TypeFp32, &[4], false), &[2, 2]),
            input("S", ConfigType::TypeString, &[2], true),
            input("B", ConfigType::TypeBool, &[-1], true),
            input("U", ConfigType::TypeUint64, &[-1, -1], true),
        ],
        output: vec![output("Y", ConfigType::TypeFp32, &[2, 2])],
        ..Default::default()
    };
    let raw_numbers = ModelConfig {
        name: "raw_numbers".into(),
        max_batch_size: 2,
        input: vec![input("R", ConfigType::TypeInt16, &[3, -1], false)],
        output: vec![output("R_OUT", ConfigType::TypeInt16, &[3, -1])],
        ..Default::default()
    };
    let raw_text = ModelConfig {
        name: "raw_text".into(),
        input: vec![input("T", ConfigType::TypeString, &[1], false)],
        output: vec![output("T_OUT", ConfigType::TypeString, &[1])],
        ..Default::default()
    };
    [batched, plain, raw_numbers, raw_text]
});

/// Decodes `body` as a raw request to each model (only the one-input models
/// take it), checking what is decoded with `check`.
pub(crate) fn raw_against_models(body: Bytes, check: impl Fn(&InferRequest)) {
    for config in MODELS.iter() {
        match decode_raw_infer_request(
            &config.name,
            nereid_core::ModelVersion::Latest,
            body.clone(),
            config,
        ) {
            Ok(decoded) => check(&decoded.request),
            Err(e) => assert_clear(&e),
        }
    }
}

/// Validates `request` against both models: a client error or a request
/// whose every input holds exactly the data its (reshaped) shape needs.
pub(crate) fn validate_against_models(request: &InferRequest) {
    for config in MODELS.iter() {
        match nereid_engine::validate(config, request.clone()) {
            Ok(valid) => {
                for input in &valid.request.inputs {
                    let count = element_count(&input.shape).expect("a validated shape");
                    match input.datatype.element_size() {
                        Some(size) => assert_eq!(
                            count.checked_mul(size as u64),
                            Some(input.data.len() as u64),
                            "input '{}' of shape {:?}",
                            input.name,
                            input.shape
                        ),
                        None => assert_eq!(
                            count_bytes_elements(&input.data).map(|n| n as u64),
                            Ok(count),
                            "input '{}'",
                            input.name
                        ),
                    }
                }
                assert!(valid.batch_size >= 1);
            }
            Err(e) => assert_clear(&e),
        }
    }
}
