//! Whether a runtime library (libnvinfer, libcudart) can be loaded, asked
//! without keeping it loaded.

/// The first of `names` the dynamic loader finds (in its usual search
/// path and `LD_LIBRARY_PATH`), or `None`.
pub fn find_library(names: &[&str]) -> Option<String> {
    names.iter().find(|name| loads(name)).map(|n| n.to_string())
}

fn loads(name: &str) -> bool {
    #[expect(
        unsafe_code,
        reason = "loading a library runs its initializers; the libraries probed are NVIDIA runtimes meant to be loaded by any process"
    )]
    let library = unsafe { libloading::Library::new(name) };
    library.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_exists_and_not_what_does_not() {
        assert_eq!(find_library(&["libnereid-does-not-exist.so.1"]), None);
        assert_eq!(
            find_library(&["libnereid-does-not-exist.so", "libc.so.6"]).as_deref(),
            Some("libc.so.6")
        );
    }
}
