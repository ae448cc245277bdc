//! The repository API's load parameters: `config` (a model config as JSON)
//! and `file:<version>/<path>` (file contents, base64 over HTTP, bytes over
//! gRPC), up to the checks made before anything is written to disk.

use std::path::{Component, Path};

use nereid_engine::check_load_request;
use nereid_repository::normalize_and_validate;
use nereid_server::model_control::{Param, load_params_from_json, load_request};
use serde_json::Value;

use crate::assert_clear;

/// The input is the model name (as in the URL) up to the first newline,
/// then an HTTP load body (`{"parameters": {...}}`).
pub fn check(data: &[u8]) {
    let Some(end) = data.iter().position(|&b| b == b'\n') else {
        return;
    };
    let model = String::from_utf8_lossy(&data[..end]);
    let Ok(Value::Object(mut body)) = serde_json::from_slice(&data[end + 1..]) else {
        return;
    };
    let Some(Value::Object(parameters)) = body.remove("parameters") else {
        return;
    };
    let params = match load_params_from_json(&model, parameters) {
        Ok(params) => params,
        Err(e) => return assert_clear(&e),
    };
    check_params(&model, params);
}

/// Checks a load of `model` with `params` as either frontend decoded them.
pub fn check_params(model: &str, params: Vec<(String, Param)>) {
    let request = match load_request(model, params) {
        Ok(request) => request,
        Err(e) => return assert_clear(&e),
    };
    if let Some(config) = &request.config {
        // Whatever the config says, validation answers.
        let _ = normalize_and_validate(&mut config.clone(), &[], false);
    }
    match check_load_request(model, &request) {
        Ok(()) if !request.files.is_empty() => {
            assert!(stays_inside(model), "model name {model:?}");
            assert!(
                !model.contains('\0') && model.len() <= 255,
                "model name {model:?}"
            );
            for (path, _) in &request.files {
                assert!(stays_inside(path), "file path {path:?}");
                // Paths that cannot be written are refused, not failed later.
                assert!(!path.contains('\0') && !path.ends_with('/'), "{path:?}");
                assert!(path.split('/').all(|part| part.len() <= 255), "{path:?}");
            }
        }
        Ok(()) => {}
        Err(e) => assert_clear(&e),
    }
}

/// Whether `path` joined to a folder names something below that folder.
fn stays_inside(path: &str) -> bool {
    let mut depth = 0usize;
    for component in Path::new(path).components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                let Some(up) = depth.checked_sub(1) else {
                    return false;
                };
                depth = up;
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    depth > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_means_below() {
        assert!(stays_inside("1/model.onnx"));
        assert!(stays_inside("a/../b"));
        for path in ["", ".", "..", "/etc/passwd", "a/../..", "a/.."] {
            assert!(!stays_inside(path), "{path}");
        }
    }
}
