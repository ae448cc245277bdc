//! A missing ONNX Runtime library is an error naming the path, not a panic.
//! Its own test binary, so no other test has loaded the real library first.

use nereid_backend_onnx::OnnxBackend;
use nereid_core::BackendError;

#[test]
fn missing_library_is_a_runtime_error_naming_the_path() {
    let path = "/nonexistent/nereid/libonnxruntime.so.1.99";
    let err = OnnxBackend::new(Some(path.into())).unwrap_err();
    assert!(
        matches!(&err, BackendError::Runtime(m) if m.contains(path)),
        "{err:?}"
    );
    eprintln!("{err}");
    // A failed load leaves nothing behind: the same call fails the same way.
    let again = OnnxBackend::new(Some(path.into())).unwrap_err();
    assert_eq!(err, again);
}
