//! Generates the `openjobspec.v1` types from `proto/` with a pure-Rust protobuf compiler
//! (protox), so no system `protoc` is needed on a fresh machine or in `sam build`.

use std::path::PathBuf;

const FILES: [&str; 2] = ["openjobspec/v1/job.proto", "openjobspec/v1/batch.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest.join("../../proto");
    for file in FILES {
        println!("cargo:rerun-if-changed={}", root.join(file).display());
    }
    let descriptors = protox::compile(FILES, [&root])?;
    prost_build::Config::new()
        // Ordered maps make encoding deterministic: equal envelopes, equal bytes.
        .btree_map(["."])
        .compile_fds(descriptors)?;
    Ok(())
}
