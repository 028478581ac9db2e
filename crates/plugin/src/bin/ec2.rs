//! `soul-cloud-ec2`: orca's ec2 driver as a CloudDriver plugin on stdin and stdout.

fn main() {
    orca_plugin::run_kind("ec2")
}
