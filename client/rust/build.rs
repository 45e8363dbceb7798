// Generates the gRPC client from the project's proto/ at build time, with the protoc on PATH
// (Debian's protobuf-compiler) or the one $PROTOC names.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure()
        .build_server(false)
        // Entry data as bytes::Bytes: a retried append resends its entries without copying them.
        .bytes(".")
        .compile_protos(&["../../proto/wal/v1/wal.proto"], &["../../proto"])?;
    println!("cargo:rerun-if-changed=../../proto");
    Ok(())
}
