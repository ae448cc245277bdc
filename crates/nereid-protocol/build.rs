//! Generates the KServe v2 / Triton gRPC types and service traits from
//! `proto/grpc_service.proto` and `proto/health.proto`, without a system
//! protoc. `ModelConfig` is generated once, in nereid-core, and referred to
//! from here.

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    // Read when the script runs, not when it was compiled: worktrees of
    // this workspace share one compiled build script.
    let proto_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files = ["grpc_service.proto", "health.proto"].map(|f| proto_dir.join(f));
    for f in files.iter().chain([&proto_dir.join("model_config.proto")]) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = protox::compile(&files, [&proto_dir])?;
    let mut builder = tonic_prost_build::configure()
        .build_client(false)
        .bytes(".");
    // model_config.proto's types are generated once, in nereid-core.
    for file in fds.file.iter().filter(|f| f.name() == "model_config.proto") {
        let names = file
            .message_type
            .iter()
            .map(|m| m.name())
            .chain(file.enum_type.iter().map(|e| e.name()));
        for name in names {
            builder = builder.extern_path(
                format!(".inference.{name}"),
                format!("::nereid_core::model_config::{name}"),
            );
        }
    }
    builder.compile_fds(fds)?;
    Ok(())
}
