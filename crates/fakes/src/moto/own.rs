//! A moto of a test's own, for the tests that make many instances: moto's DescribeInstances takes
//! longer with every instance it holds (terminated ones included), so a test run on the moto that
//! `scripts/with-moto` started for the whole run pays for every instance the test binaries before it
//! made.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::seed::moto;

/// The variable `scripts/with-moto` sets to its `moto_server`, so that a test can start one of its
/// own.
pub const MOTO_SERVER_ENV: &str = "ORCA_MOTO_SERVER";
/// The variable `scripts/with-moto` sets to the images file it started moto with.
pub const MOTO_AMIS_ENV: &str = "ORCA_MOTO_AMIS";

/// How long a moto of a test's own may take to answer its first EC2 call (the shared one is given
/// as long by `scripts/with-moto`).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A moto that [`own_moto`] started, stopped when dropped; or the shared one.
#[derive(Debug)]
pub struct OwnMoto {
    /// Its address.
    pub url: String,
    /// The process and its log file, when the test started it.
    child: Option<(Child, PathBuf)>,
}

impl Drop for OwnMoto {
    fn drop(&mut self) {
        if let Some((child, log)) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(log);
        }
    }
}

/// A moto for `test` alone, on a free port of 127.0.0.1, with the images of the shared one; `None`
/// (skipped, or a failure under CI) exactly when [`moto`] is. When `scripts/with-moto` did not say
/// where its `moto_server` is (moto started by hand), the shared moto.
pub async fn own_moto(test: &str) -> Option<OwnMoto> {
    let shared = moto(test)?;
    let server = std::env::var_os(MOTO_SERVER_ENV).filter(|v| !v.is_empty());
    let amis = std::env::var_os(MOTO_AMIS_ENV).filter(|v| !v.is_empty());
    let (Some(server), Some(amis)) = (server, amis) else {
        return Some(OwnMoto {
            url: shared,
            child: None,
        });
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| panic!("{test}: no free port on 127.0.0.1: {e}"))
        .port();
    let log = std::env::temp_dir().join(format!("orca-own-moto-{}-{port}.log", std::process::id()));
    let out = std::fs::File::create(&log)
        .unwrap_or_else(|e| panic!("{test}: cannot write {}: {e}", log.display()));
    let err = out
        .try_clone()
        .unwrap_or_else(|e| panic!("{test}: {}: {e}", log.display()));
    let child = Command::new(&server)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .env("MOTO_AMIS_PATH", &amis)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("{test}: cannot start {}: {e}", server.to_string_lossy()));
    let mut own = OwnMoto {
        url: format!("http://127.0.0.1:{port}"),
        child: Some((child, log.clone())),
    };
    let started = Instant::now();
    while !ready(&own.url).await {
        let exited = own
            .child
            .as_mut()
            .is_some_and(|(c, _)| c.try_wait().ok().flatten().is_some());
        if exited || started.elapsed() > READY_WITHIN {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            panic!(
                "{test}: its own moto ({}) did not answer an EC2 call within {READY_WITHIN:?}; its log:\n{text}",
                own.url
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Some(own)
}

/// Whether moto at `url` answers an EC2 call with the images it was given (Canonical's 24.04).
async fn ready(url: &str) -> bool {
    let answer = reqwest::Client::new()
        .post(format!("{url}/"))
        .header(
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=AKIDORCATEST/20250101/us-east-1/ec2/aws4_request, \
             SignedHeaders=host, Signature=0",
        )
        .form(&[
            ("Action", "DescribeImages"),
            ("Version", "2016-11-15"),
            ("Owner.1", "099720109477"),
        ])
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    match answer {
        Ok(r) if r.status().is_success() => r
            .text()
            .await
            .is_ok_and(|body| body.contains("ubuntu-noble-24.04")),
        _ => false,
    }
}
