//! `soul-cloud-azure`: orca's azure driver as a CloudDriver plugin on stdin and stdout.

fn main() {
    orca_plugin::run_kind("azure")
}
