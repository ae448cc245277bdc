//! Compiles `src/shim.cpp`, the libtorch calls `tch` does not expose,
//! against the libtorch torch-sys found (it passes the library folder as
//! DEP_TCH_LIBTORCH_LIB; the headers sit beside it). Test binaries and
//! examples get an rpath to that folder, so they run without
//! LD_LIBRARY_PATH.

use std::path::PathBuf;

use anyhow::Context;

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-changed=src/shim.cpp");
    let lib = PathBuf::from(
        std::env::var("DEP_TCH_LIBTORCH_LIB")
            .context("torch-sys did not say where libtorch is (DEP_TCH_LIBTORCH_LIB)")?,
    );
    let root = lib
        .parent()
        .context("libtorch's lib folder has no parent")?;
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned());
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(root.join("include"))
        .include(root.join("include/torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .file("src/shim.cpp")
        .compile("nereid_torch_shim");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    // Re-exported for the `nereid` binary's build script (DEP_NEREID_TORCH_LIBTORCH_LIB).
    println!("cargo:libtorch_lib={}", lib.display());
    Ok(())
}
