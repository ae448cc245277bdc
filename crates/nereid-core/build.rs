//! Compiles `proto/model_config.proto` into Rust types (prost) and writes the
//! encoded descriptor set beside them, which the repository crate uses to read
//! `config.pbtxt` (text format) and the protocol crate to render JSON.

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    // Read when the script runs, not when it was compiled: worktrees of
    // this workspace share one compiled build script.
    let proto_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let file = proto_dir.join("model_config.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([&file], [&proto_dir])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("model_config.fds"),
        prost::Message::encode_to_vec(&fds),
    )?;
    prost_build::Config::new().bytes(["."]).compile_fds(fds)?;
    Ok(())
}
