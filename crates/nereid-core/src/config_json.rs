//! A model config rendered as JSON the way Triton renders it: proto field
//! names, enums by name, every scalar, list and map field even when it holds
//! the default, unset messages left out, 64-bit integers as numbers; and a
//! config read back from JSON (the repository API's `config` override).
//! The REST frontend answers `/config` with it, and backends that hand a
//! config to a model (the Python backend's `args["model_config"]`) use it.

use std::sync::LazyLock;

use crate::Error;
use crate::model_config::{FILE_DESCRIPTOR_SET, MODEL_CONFIG_MESSAGE, ModelConfig};
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

/// Reads a model config from JSON in protobuf's JSON mapping, as Triton
/// reads a load request's `config` parameter: field names as in the proto
/// or in lowerCamelCase, enums by name, 64-bit integers as numbers or
/// strings. Unknown fields are an error, so a misspelt field is not lost.
pub fn model_config_from_json(text: &str) -> Result<ModelConfig, Error> {
    let descriptor = MODEL_CONFIG
        .as_ref()
        .map_err(|e| Error::internal(e.clone()))?;
    let invalid = |e: &dyn std::fmt::Display| Error::invalid_argument(e.to_string());
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let message = DynamicMessage::deserialize(descriptor.clone(), &mut deserializer)
        .map_err(|e| invalid(&e))?;
    deserializer.end().map_err(|e| invalid(&e))?;
    message
        .transcode_to::<ModelConfig>()
        .map_err(|e| invalid(&e))
}

#[cfg(test)]
mod tests {
    use crate::model_config::{DataType, ModelInput};

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

    #[test]
    fn reads_a_config_back_from_json() {
        let text = r#"{"name": "simple", "max_batch_size": 8, "backend": "onnxruntime",
            "version_policy": {"all": {}},
            "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]}],
            "instance_group": [{"kind": "KIND_CPU", "count": "2"}]}"#;
        let config = model_config_from_json(text).unwrap();
        assert_eq!(config.name, "simple");
        assert_eq!(config.max_batch_size, 8);
        assert_eq!(config.input[0].data_type(), DataType::TypeInt32);
        assert_eq!(config.input[0].dims, [16]);
        assert_eq!(config.instance_group[0].count, 2);
        assert!(config.version_policy.is_some());
        let rendered = model_config_json(&config).unwrap();
        let again = model_config_from_json(std::str::from_utf8(&rendered).unwrap()).unwrap();
        assert_eq!(again, config, "round trip");
    }

    #[test]
    fn bad_config_json_says_why() {
        for (text, fragment) in [
            ("{not json", "key must be a string"),
            (r#"{"max_batch_size": "eight"}"#, "column 26"),
            (r#"{"nmae": "x"}"#, "nmae"),
            (r#"{"name": "x"} trailing"#, "trailing"),
        ] {
            let err = model_config_from_json(text).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
            assert!(err.message().contains(fragment), "{text}: {err}");
        }
    }
}
