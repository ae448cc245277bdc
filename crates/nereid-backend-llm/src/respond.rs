//! The model's face to clients: the inputs and outputs of Triton's vLLM
//! backend (what autocomplete declares), and the response tensors.

use bytes::Bytes;
use nereid_core::model_config::{
    DataType as ConfigType, ModelConfig, ModelInput, ModelOutput, ModelTransactionPolicy,
};
use nereid_core::tensor::push_bytes_element;
use nereid_core::{DataType, IoSpec, ModelIo, Tensor};

pub const TEXT_INPUT: &str = "text_input";
pub const STREAM: &str = "stream";
pub const SAMPLING_PARAMETERS: &str = "sampling_parameters";
pub const EXCLUDE_INPUT: &str = "exclude_input_in_output";
pub const RETURN_FINISH_REASON: &str = "return_finish_reason";
pub const RETURN_INPUT_TOKENS: &str = "return_num_input_tokens";
pub const RETURN_OUTPUT_TOKENS: &str = "return_num_output_tokens";
pub const RETURN_LOGPROBS: &str = "return_logprobs";
pub const RETURN_CUMULATIVE_LOGPROB: &str = "return_cumulative_logprob";

pub const TEXT_OUTPUT: &str = "text_output";
pub const FINISH_REASON: &str = "finish_reason";
pub const INPUT_TOKENS: &str = "num_input_tokens";
pub const OUTPUT_TOKENS: &str = "num_output_tokens";

/// Inputs: the prompt, then optional flags and parameters.
const INPUTS: [(&str, DataType); 9] = [
    (TEXT_INPUT, DataType::Bytes),
    (STREAM, DataType::Bool),
    (SAMPLING_PARAMETERS, DataType::Bytes),
    (EXCLUDE_INPUT, DataType::Bool),
    (RETURN_FINISH_REASON, DataType::Bool),
    (RETURN_INPUT_TOKENS, DataType::Bool),
    (RETURN_OUTPUT_TOKENS, DataType::Bool),
    (RETURN_LOGPROBS, DataType::Bool),
    (RETURN_CUMULATIVE_LOGPROB, DataType::Bool),
];

const OUTPUTS: [(&str, DataType, i64); 4] = [
    (TEXT_OUTPUT, DataType::Bytes, -1),
    (FINISH_REASON, DataType::Bytes, -1),
    (INPUT_TOKENS, DataType::Uint32, -1),
    (OUTPUT_TOKENS, DataType::Uint32, -1),
];

/// What a GGUF model declares.
pub fn model_io() -> ModelIo {
    ModelIo {
        inputs: INPUTS
            .iter()
            .map(|(name, datatype)| IoSpec::new(*name, *datatype, vec![1]))
            .collect(),
        outputs: OUTPUTS
            .iter()
            .map(|(name, datatype, dim)| IoSpec::new(*name, *datatype, vec![*dim]))
            .collect(),
    }
}

fn config_type(datatype: DataType) -> ConfigType {
    match datatype {
        DataType::Bool => ConfigType::TypeBool,
        DataType::Uint32 => ConfigType::TypeUint32,
        _ => ConfigType::TypeString,
    }
}

/// `config` completed as Triton's vLLM backend completes its own: no
/// batch dimension, decoupled, and the vLLM inputs and outputs when the
/// config declares none.
pub fn complete(config: &ModelConfig) -> ModelConfig {
    let mut config = config.clone();
    if config.model_transaction_policy.is_none() {
        config.model_transaction_policy = Some(ModelTransactionPolicy { decoupled: true });
    }
    if config.input.is_empty() {
        config.input = INPUTS
            .iter()
            .map(|(name, datatype)| {
                let mut input = ModelInput {
                    name: (*name).into(),
                    dims: vec![1],
                    optional: *name != TEXT_INPUT,
                    ..ModelInput::default()
                };
                input.set_data_type(config_type(*datatype));
                input
            })
            .collect();
    }
    if config.output.is_empty() {
        config.output = OUTPUTS
            .iter()
            .map(|(name, datatype, dim)| {
                let mut output = ModelOutput {
                    name: (*name).into(),
                    dims: vec![*dim],
                    ..ModelOutput::default()
                };
                output.set_data_type(config_type(*datatype));
                output
            })
            .collect();
    }
    config
}

/// One string as a `BYTES` tensor of shape [1].
pub fn text(name: &str, value: &str) -> Tensor {
    let mut data = Vec::with_capacity(value.len() + 4);
    push_bytes_element(&mut data, value.as_bytes());
    Tensor {
        name: name.to_owned(),
        datatype: DataType::Bytes,
        shape: vec![1],
        data: Bytes::from(data),
    }
}

/// One count as a `UINT32` tensor of shape [1].
pub fn count(name: &str, value: usize) -> Tensor {
    let value = u32::try_from(value).unwrap_or(u32::MAX);
    Tensor {
        name: name.to_owned(),
        datatype: DataType::Uint32,
        shape: vec![1],
        data: Bytes::copy_from_slice(&value.to_le_bytes()),
    }
}
