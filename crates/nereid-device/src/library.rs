//! Whether a runtime library (libnvinfer) can be loaded, asked without
//! keeping it loaded.

/// The names the TensorRT runtime goes by, newest first (TensorRT 10, 8,
/// and the development link).
pub const LIBNVINFER: [&str; 3] = ["libnvinfer.so.10", "libnvinfer.so.8", "libnvinfer.so"];

/// The first of `names` the dynamic loader opens (in its usual search path
/// and `LD_LIBRARY_PATH`); else the names tried and the loader's reason for
/// the last one.
pub fn find_library(names: &[&'static str]) -> Result<&'static str, String> {
    let mut last_error = String::new();
    for name in names {
        match open(name) {
            Ok(()) => return Ok(name),
            Err(e) => last_error = nereid_core::error::with_causes(&e),
        }
    }
    Err(format!("tried {}: {last_error}", names.join(", ")))
}

#[expect(
    unsafe_code,
    reason = "loading a library runs its initializers; the libraries probed are NVIDIA runtimes meant to be loaded by any process"
)]
fn open(name: &str) -> Result<(), libloading::Error> {
    // SAFETY: nothing is called in the library; it is closed again at once.
    unsafe { libloading::Library::new(name) }.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_exists_and_says_why_not() {
        let err = find_library(&["libnereid-does-not-exist.so.1"]).unwrap_err();
        assert!(
            err.starts_with("tried libnereid-does-not-exist.so.1: "),
            "{err}"
        );
        assert!(err.contains("cannot open shared object file"), "{err}");
        assert_eq!(
            find_library(&["libnereid-does-not-exist.so", "libc.so.6"]),
            Ok("libc.so.6")
        );
    }
}
