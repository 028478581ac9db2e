//! "The agent answered a probe": the [`Probe`] trait, the probe the server ships for transport `ssh`
//! ([`SshBannerProbe`]: opens the VM's SSH port and reads its banner, with a timeout) and the one for
//! transport `local` ([`LocalProbe`]: every agent answers, a test driver).
//!
//! The in-VM agent, host-key pinning and SSH login are not part of this example (see the README): the
//! outcomes [`ProbeOutcome::NoPin`], [`ProbeOutcome::HostKeyMismatch`] and
//! [`ProbeOutcome::Incompatible`] come only from other probes (tests use an in-process one).

use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncReadExt as _;

/// The VM a probe is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTarget {
    /// The shed's ID.
    pub shed_id: String,
    /// The VM's name.
    pub vm_name: String,
    /// The VM's public address (empty while it has none).
    pub address: String,
}

/// What a probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The agent answered: the shed is running.
    Answered,
    /// The VM answered but has no pinned host key yet (reason `no_pin`).
    NoPin,
    /// The VM's SSH port could not be reached (reason `unreachable`), with why.
    Unreachable(String),
    /// The host key the VM presented did not match the pinned key (reason `host_key`).
    HostKeyMismatch,
    /// The agent or guest layout is not compatible with this server (reason `layout`), with why.
    Incompatible(String),
}

/// Asks a VM's agent whether it is there.
#[async_trait]
pub trait Probe: Send + Sync + std::fmt::Debug {
    /// One probe of `target`; bounded in time.
    async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome;
}

/// Opens the VM's SSH port and reads its banner (`SSH-2.0-...`), with a timeout: an answer is a
/// banner; anything else is `unreachable`.
#[derive(Debug, Clone)]
pub struct SshBannerProbe {
    port: u16,
    timeout: Duration,
}

impl Default for SshBannerProbe {
    fn default() -> Self {
        SshBannerProbe {
            port: 22,
            timeout: Duration::from_secs(5),
        }
    }
}

impl SshBannerProbe {
    /// Port 22, 5 s to connect and read the banner.
    pub fn new() -> Self {
        Self::default()
    }

    async fn banner(&self, address: &str) -> Result<String, String> {
        let ip: std::net::IpAddr = address
            .parse()
            .map_err(|_| "the VM has no public address yet".to_string())?;
        let mut stream = tokio::net::TcpStream::connect((ip, self.port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut buf = Vec::with_capacity(256);
        let mut chunk = [0u8; 256];
        loop {
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("the connection closed before a banner".into());
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = buf.iter().position(|b| *b == b'\n') {
                return Ok(String::from_utf8_lossy(&buf[..end]).trim_end().to_string());
            }
            if buf.len() > 255 {
                return Err("no line within 255 bytes".into());
            }
        }
    }
}

#[async_trait]
impl Probe for SshBannerProbe {
    async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome {
        match tokio::time::timeout(self.timeout, self.banner(&target.address)).await {
            Err(_) => ProbeOutcome::Unreachable(format!(
                "no SSH banner within {} s",
                self.timeout.as_secs_f32()
            )),
            Ok(Err(e)) => ProbeOutcome::Unreachable(e),
            Ok(Ok(line)) if line.starts_with("SSH-") => ProbeOutcome::Answered,
            Ok(Ok(_)) => {
                ProbeOutcome::Unreachable("the port answered without an SSH banner".into())
            }
        }
    }
}

/// Transport `local`: every VM's agent answers at once (only with `allow_test_drivers`).
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalProbe;

#[async_trait]
impl Probe for LocalProbe {
    async fn probe(&self, _target: &ProbeTarget) -> ProbeOutcome {
        ProbeOutcome::Answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    fn target(address: &str) -> ProbeTarget {
        ProbeTarget {
            shed_id: "a".into(),
            vm_name: "shed-t-a".into(),
            address: address.into(),
        }
    }

    async fn server(reply: &'static [u8], close: bool) -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(reply).await;
                if !close {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                }
            }
        });
        port
    }

    #[tokio::test]
    async fn a_banner_is_an_answer_and_anything_else_is_unreachable() {
        let ok = server(b"SSH-2.0-OpenSSH_9.6\r\n", false).await;
        let p = SshBannerProbe {
            port: ok,
            timeout: Duration::from_secs(2),
        };
        assert_eq!(p.probe(&target("127.0.0.1")).await, ProbeOutcome::Answered);

        let http = server(b"HTTP/1.1 400 Bad Request\r\n", true).await;
        let p = SshBannerProbe {
            port: http,
            ..SshBannerProbe::new()
        };
        assert!(matches!(
            p.probe(&target("127.0.0.1")).await,
            ProbeOutcome::Unreachable(_)
        ));

        let silent = server(b"", false).await;
        let p = SshBannerProbe {
            port: silent,
            timeout: Duration::from_millis(200),
        };
        match p.probe(&target("127.0.0.1")).await {
            ProbeOutcome::Unreachable(why) => assert!(why.contains("no SSH banner"), "{why}"),
            other => panic!("{other:?}"),
        }

        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let p = SshBannerProbe {
            port: closed,
            ..SshBannerProbe::new()
        };
        assert!(matches!(
            p.probe(&target("127.0.0.1")).await,
            ProbeOutcome::Unreachable(_)
        ));
        assert!(matches!(
            p.probe(&target("")).await,
            ProbeOutcome::Unreachable(_)
        ));
    }
}
