//! `config.pbtxt` -> `ModelConfig`: the pre-pass, then prost-reflect's text
//! format parser over the descriptor of `model_config.proto`, then a
//! transcode into the generated struct.

use std::path::Path;
use std::sync::OnceLock;

use miette::Diagnostic;
use nereid_core::model_config::{FILE_DESCRIPTOR_SET, MODEL_CONFIG_MESSAGE, ModelConfig};
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};

use crate::error::ConfigParseError;
use crate::prepass;

/// Parses the text of a `config.pbtxt` (Triton's dialect of the protobuf
/// text format) into a `ModelConfig`. Nothing is defaulted or validated.
pub fn parse_config_text(text: &str) -> Result<ModelConfig, ConfigParseError> {
    parse(text, None)
}

/// Like [`parse_config_text`], naming `path` in errors.
pub(crate) fn parse_config_file(path: &Path, text: &str) -> Result<ModelConfig, ConfigParseError> {
    parse(text, Some(path))
}

fn parse(text: &str, path: Option<&Path>) -> Result<ModelConfig, ConfigParseError> {
    let descriptor = model_config_descriptor()?;
    let (rewritten, insertions) = prepass::rewrite(text);
    let message = DynamicMessage::parse_text_format(descriptor, &rewritten).map_err(|err| {
        let offset = err
            .labels()
            .and_then(|mut labels| labels.next())
            .map_or(rewritten.len(), |label| label.offset());
        let (line, column) = line_column(text, insertions.original_offset(offset));
        ConfigParseError::Syntax {
            path: path.map(Path::to_path_buf),
            line,
            column,
            message: err.to_string(),
        }
    })?;
    message
        .transcode_to::<ModelConfig>()
        .map_err(|err| ConfigParseError::Schema(err.to_string()))
}

/// The `ModelConfig` message descriptor, decoded once.
pub(crate) fn model_config_descriptor() -> Result<MessageDescriptor, ConfigParseError> {
    static DESCRIPTOR: OnceLock<Result<MessageDescriptor, String>> = OnceLock::new();
    DESCRIPTOR
        .get_or_init(|| {
            let pool = DescriptorPool::decode(FILE_DESCRIPTOR_SET).map_err(|e| e.to_string())?;
            pool.get_message_by_name(MODEL_CONFIG_MESSAGE)
                .ok_or_else(|| format!("message {MODEL_CONFIG_MESSAGE} is missing"))
        })
        .clone()
        .map_err(ConfigParseError::Schema)
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |n| n + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::{DataType, model_config::SchedulingChoice};

    use super::*;

    #[test]
    fn parses_triton_dialect() {
        let text = r#"
            name: "m"  # a comment with input [ inside
            platform: "onnxruntime_onnx"
            max_batch_size: 8
            input [
              { name: "IN" data_type: TYPE_FP32 dims: [ 3, -1 ] reshape { shape: [ ] } }
            ]
            output [ { name: "OUT", data_type: TYPE_INT64, dims: [ 1 ] } ]
            dynamic_batching { preferred_batch_size: [ 4, 8 ] }
            parameters { key: "k" value: { string_value: "v" } }
        "#;
        let config = parse_config_text(text).unwrap();
        assert_eq!(config.name, "m");
        assert_eq!(config.max_batch_size, 8);
        assert_eq!(config.input[0].dims, vec![3, -1]);
        assert_eq!(config.input[0].data_type(), DataType::TypeFp32);
        assert_eq!(
            config.input[0].reshape.as_ref().map(|r| r.shape.len()),
            Some(0)
        );
        assert_eq!(config.output[0].data_type(), DataType::TypeInt64);
        assert!(matches!(
            config.scheduling_choice,
            Some(SchedulingChoice::DynamicBatching(_))
        ));
        assert_eq!(config.parameters["k"].string_value, "v");
    }

    #[test]
    fn prost_reflect_needs_the_prepass() {
        let descriptor = model_config_descriptor().unwrap();
        assert!(DynamicMessage::parse_text_format(descriptor.clone(), "input [ { } ]").is_err());
        assert!(DynamicMessage::parse_text_format(descriptor, "input: [ { } ]").is_ok());
        assert_eq!(parse_config_text("input [ { } ]").unwrap().input.len(), 1);
    }

    #[test]
    fn empty_text_is_an_empty_config() {
        assert_eq!(parse_config_text("").unwrap(), ModelConfig::default());
    }

    #[test]
    fn syntax_error_has_original_position() {
        // The pre-pass inserts a colon on line 1; the column on line 2 is unaffected.
        let err = parse_config_text("input [ { name: \"a\" } ]\nmax_batch_size: x").unwrap_err();
        let ConfigParseError::Syntax {
            line,
            column,
            message,
            ..
        } = &err
        else {
            panic!("unexpected {err:?}");
        };
        assert_eq!((*line, *column), (2, 17), "{message}");
        assert!(message.contains("integer"), "{message}");
    }

    #[test]
    fn syntax_error_column_maps_back_across_insertions() {
        let err = parse_config_text("a_list [ ] input [ { bogus: 1 } ]").unwrap_err();
        let ConfigParseError::Syntax { line, column, .. } = &err else {
            panic!("unexpected {err:?}");
        };
        // `a_list` is the unknown field; it starts at column 1.
        assert_eq!((*line, *column), (1, 1), "{err}");
        let err = parse_config_text("input [ { bogus: 1 } ]").unwrap_err();
        assert!(err.to_string().starts_with("1:11: "), "{err}");
    }

    #[test]
    fn unknown_enum_value_is_an_error() {
        let err = parse_config_text("input [ { data_type: TYPE_NOPE } ]").unwrap_err();
        assert!(err.to_string().contains("TYPE_NOPE"), "{err}");
    }

    #[test]
    fn error_names_the_file() {
        let err = parse_config_file(Path::new("m/config.pbtxt"), "name: 3").unwrap_err();
        assert!(err.to_string().starts_with("m/config.pbtxt:1:7: "), "{err}");
    }

    #[test]
    fn line_column_counts_chars() {
        assert_eq!(line_column("ab\ncé d", 7), (2, 4));
        assert_eq!(line_column("", 5), (1, 1));
    }
}
