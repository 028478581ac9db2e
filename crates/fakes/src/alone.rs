//! One test of a test binary run alone, in a child process of that binary: for a test that changes
//! what is process-wide (environment variables, say) inside a binary whose other tests run at the
//! same time in threads of one process and must not see the change.
//!
//! The test that needs it is `#[ignore]`d and starts with [`assert_alone`]; a test of the binary's
//! default run calls [`run_alone`] with its name, and fails when it fails.

use std::process::Command;

/// Set in the child to the name of the one test it runs.
pub const ALONE_ENV: &str = "ORCA_TEST_ALONE";

/// The name the test harness gives the test `name` of the module `module` (its `module_path!()`):
/// the module's path without the crate's name.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}

/// Runs the ignored test `name` of `module` alone in a child process of this test binary, with `env`
/// added to its environment and `unset` removed from it, and answers what it printed. Panics when
/// the test failed or when the child ran no test of that name.
pub fn run_alone(module: &str, name: &str, env: &[(&str, &str)], unset: &[&str]) -> String {
    let full = test_name(module, name);
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new(exe);
    child
        .args([
            "--exact",
            &full,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ALONE_ENV, &full)
        .envs(env.iter().copied());
    for k in unset {
        child.env_remove(k);
    }
    let out = child.output().expect("the test binary runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{full}, run alone, failed:\n{said}");
    assert!(
        said.contains("1 passed"),
        "{full}, run alone, did not run:\n{said}"
    );
    said
}

/// Panics unless this process is the child [`run_alone`] started for the test `name` of `module`:
/// the first line of a test that changes what is process-wide.
pub fn assert_alone(module: &str, name: &str) {
    let full = test_name(module, name);
    assert_eq!(
        std::env::var(ALONE_ENV).ok().as_deref(),
        Some(full.as_str()),
        "{full} changes process-wide state: it runs alone, started by orca_fakes::alone::run_alone"
    );
}
