//! `soul-cloud-hetzner`: orca's hetzner driver as a CloudDriver plugin on stdin and stdout.

fn main() {
    orca_plugin::run_kind("hetzner")
}
