//! `soul-cloud-gce`: orca's gce driver as a CloudDriver plugin on stdin and stdout.

fn main() {
    orca_plugin::run_kind("gce")
}
