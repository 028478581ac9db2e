//! `soul-cloud-fake`: the in-memory cloud as a CloudDriver plugin on stdin and stdout.

fn main() {
    orca_plugin::fake::run()
}
