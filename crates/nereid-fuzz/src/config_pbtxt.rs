//! `config.pbtxt` text: the pre-pass that adds the colons Triton's dialect
//! leaves out, the protobuf text parser, Triton's defaults and validation,
//! and the JSON rendering `GET /v2/models/{m}/config` answers with.

use nereid_core::config_json::{model_config_from_json, model_config_json};
use nereid_core::model_config::ModelConfig;
use nereid_repository::{insert_list_colons, normalize_and_validate, parse_config_text};

/// The input is the file's text; bytes that are not UTF-8 are skipped (the
/// repository refuses them when it reads the file).
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let once = insert_list_colons(text);
    assert_eq!(
        insert_list_colons(&once),
        once,
        "the pre-pass is idempotent"
    );
    assert_eq!(once.replace(':', ""), text.replace(':', ""), "only colons");
    let Ok(config) = parse_config_text(text) else {
        return;
    };
    round_trip(&config);
    for gpus in [&[][..], &[0, 1]] {
        let mut config = config.clone();
        if normalize_and_validate(&mut config, gpus, true).is_ok() {
            round_trip(&config);
        }
    }
}

/// The config renders as JSON, and that JSON reads back as the same config.
fn round_trip(config: &ModelConfig) {
    let json = model_config_json(config).expect("every config renders");
    let text = std::str::from_utf8(&json).expect("JSON is UTF-8");
    let again = model_config_from_json(text).expect("a rendered config reads back");
    assert!(
        again == *config,
        "the JSON round trip changed the config: {text}"
    );
}
