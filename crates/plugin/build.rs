//! Compiles the CloudDriver protocol with protox (pure Rust): a fresh machine needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/orca/cloud/v1/cloud_driver.proto",
        "proto/orca/cloud/fake/v1/fake_control.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        // A spec's user data may hold secrets: its Debug is written by hand, without them.
        .skip_debug([".orca.cloud.v1.MachineSpec"])
        // Labels are a `BTreeMap` in the contract: decoded as one, they need no second map.
        .btree_map(".")
        .compile_fds(fds)?;
    Ok(())
}
