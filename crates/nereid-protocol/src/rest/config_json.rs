//! A model config rendered as JSON the way Triton renders it: proto field
//! names, enums by name, every scalar, list and map field even when it holds
//! the default, unset messages left out, 64-bit integers as numbers.

use std::sync::LazyLock;

use nereid_core::Error;
use nereid_core::model_config::{FILE_DESCRIPTOR_SET, MODEL_CONFIG_MESSAGE, ModelConfig};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};

static MODEL_CONFIG: LazyLock<Result<MessageDescriptor, String>> = LazyLock::new(|| {
    let pool = DescriptorPool::decode(FILE_DESCRIPTOR_SET).map_err(|e| e.to_string())?;
    pool.get_message_by_name(MODEL_CONFIG_MESSAGE)
        .ok_or_else(|| format!("{MODEL_CONFIG_MESSAGE} is missing from the descriptor set"))
});

/// Renders `config` as Triton's `GET /v2/models/{m}/config` body.
pub fn model_config_json(config: &ModelConfig) -> Result<Vec<u8>, Error> {
    let descriptor = MODEL_CONFIG
        .as_ref()
        .map_err(|e| Error::internal(e.clone()))?;
    let message = DynamicMessage::decode(descriptor.clone(), config.encode_to_vec().as_slice())
        .map_err(|e| Error::internal(format!("cannot reflect the model config: {e}")))?;
    let options = SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(false)
        .stringify_64_bit_integers(false);
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::new(&mut out);
    message
        .serialize_with_options(&mut serializer, &options)
        .map_err(|e| Error::internal(format!("cannot render the model config: {e}")))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::{DataType, ModelInput};

    use super::*;

    #[test]
    fn renders_like_triton() {
        let config = ModelConfig {
            name: "simple".into(),
            max_batch_size: 8,
            input: vec![ModelInput {
                name: "INPUT0".into(),
                data_type: DataType::TypeInt32 as i32,
                dims: vec![16],
                ..Default::default()
            }],
            ..Default::default()
        };
        let json: serde_json::Value =
            serde_json::from_slice(&model_config_json(&config).unwrap()).unwrap();
        assert_eq!(json["name"], "simple");
        assert_eq!(json["max_batch_size"], 8);
        assert_eq!(json["input"][0]["data_type"], "TYPE_INT32");
        assert_eq!(json["input"][0]["dims"], serde_json::json!([16]));
        assert_eq!(json["input"][0]["optional"], false);
        assert_eq!(json["output"], serde_json::json!([]));
        assert!(json.get("dynamic_batching").is_none(), "{json}");
        assert!(
            json.get("version_policy").is_none(),
            "unset messages are left out: {json}"
        );
    }
}
