//! `cargo test --workspace --features nereid-server/torch` links libtorch
//! into this crate's tests through nereid-server; they get an rpath to it,
//! as nereid-server's own tests do, so they run without LD_LIBRARY_PATH.
//! libtorch's folder comes from LIBTORCH here: the DEP_ variable the
//! TorchScript backend passes on reaches only its direct dependents.

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Some(root) = std::env::var_os("LIBTORCH") {
        let lib = std::path::Path::new(&root).join("lib");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
}
