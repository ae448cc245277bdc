//! With the `torch` feature, gives the binary and the tests an rpath to the
//! libtorch they were linked against, so `nereid` runs without
//! LD_LIBRARY_PATH. The TorchScript backend's build script passes the
//! folder on (DEP_NEREID_TORCH_LIBTORCH_LIB).

fn main() {
    if std::env::var_os("CARGO_FEATURE_TORCH").is_some()
        && let Some(lib) = std::env::var_os("DEP_NEREID_TORCH_LIBTORCH_LIB")
    {
        println!(
            "cargo:rustc-link-arg=-Wl,-rpath,{}",
            std::path::Path::new(&lib).display()
        );
    }
}
