//! Golden files: parsed and resolved configs as JSON (protobuf field names,
//! default fields left out), the shape `/v2/models/<m>/config` is built from.

mod common;

use common::{FakeBackend, corpus_root, triton_qa_io, write_tree};
use nereid_core::model_config::{FILE_DESCRIPTOR_SET, MODEL_CONFIG_MESSAGE, ModelConfig};
use nereid_repository::{ModelEntry, Repository, parse_config_text};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};

/// `config` as JSON. serde_json's map is sorted, so map fields (parameters)
/// come out in a stable order.
fn to_json(config: &ModelConfig) -> serde_json::Value {
    let pool = DescriptorPool::decode(FILE_DESCRIPTOR_SET).expect("descriptor set");
    let descriptor = pool
        .get_message_by_name(MODEL_CONFIG_MESSAGE)
        .expect("ModelConfig");
    let message = DynamicMessage::decode(descriptor, config.encode_to_vec().as_slice())
        .expect("re-encoded config decodes");
    let options = SerializeOptions::new().use_proto_field_name(true);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .expect("config serializes to JSON")
}

fn parse_corpus_file(rel: &str) -> ModelConfig {
    let text = std::fs::read_to_string(corpus_root().join(rel)).expect("corpus file");
    parse_config_text(&text).expect("corpus file parses")
}

#[test]
fn parsed_sequence_config() {
    let config = parse_corpus_file(
        "qa/L0_model_config/noautofill_platform/control_tensor_no_value/config.pbtxt",
    );
    insta::assert_json_snapshot!(to_json(&config));
}

#[test]
fn parsed_dynamic_batching_with_queue_policy() {
    let config =
        parse_corpus_file("qa/L0_model_config/noautofill_platform/preserve_ordering0/config.pbtxt");
    insta::assert_json_snapshot!(to_json(&config));
}

#[test]
fn parsed_ensemble() {
    let config = parse_corpus_file("qa/L0_config_json/ensemble_config.pbtxt");
    insta::assert_json_snapshot!(to_json(&config));
}

#[test]
fn resolved_from_an_empty_folder() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), &[("simple/1/model.onnx", "")]);
    let repo = Repository::new(vec![dir.path().into()], false);
    let entry = ModelEntry {
        name: "simple".into(),
        path: dir.path().join("simple"),
        duplicates: vec![],
    };
    let model = repo
        .resolve(&entry, &[FakeBackend::onnx(triton_qa_io())])
        .unwrap();
    insta::assert_json_snapshot!(to_json(&model.config));
}

#[test]
fn resolved_with_parameters_and_groups() {
    let config = r#"
        name: "tuned"
        backend: "onnxruntime"
        max_batch_size: 16
        input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_INT8 dims: [ 16 ] } ]
        instance_group [ { count: 3 kind: KIND_CPU }, { kind: KIND_AUTO } ]
        dynamic_batching { max_queue_delay_microseconds: 100 }
        parameters [
          { key: "intra_op_thread_count" value: { string_value: "2" } },
          { key: "execution_mode" value: { string_value: "0" } }
        ]
    "#;
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[("tuned/config.pbtxt", config), ("tuned/1/model.onnx", "")],
    );
    let repo = Repository::new(vec![dir.path().into()], true);
    let entry = ModelEntry {
        name: "tuned".into(),
        path: dir.path().join("tuned"),
        duplicates: vec![],
    };
    let model = repo
        .resolve(&entry, &[FakeBackend::onnx(triton_qa_io())])
        .unwrap();
    insta::assert_json_snapshot!(to_json(&model.config));
}
