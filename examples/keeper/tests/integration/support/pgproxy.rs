//! A TCP proxy between keeper and PostgreSQL that loses one COMMIT's answer. Armed on a connection
//! by a statement whose text holds a marker, it cuts that connection at its next `COMMIT`: after
//! forwarding it ([`Cut::After`]: the server commits, and the client never hears so), or in its
//! place ([`Cut::Before`]: the server never sees it, and aborts). Every other byte is passed on as
//! it is; one cut per proxy.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// Where a connection is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Once the `COMMIT` is forwarded.
    After,
    /// In place of forwarding the `COMMIT`.
    Before,
}

pub struct PgProxy {
    addr: SocketAddr,
    cuts: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

/// Protocol codes of the untyped requests a client may send before its startup message (TLS and
/// GSS encryption), each answered by one byte.
const ENCRYPTION_REQUESTS: [u32; 2] = [80_877_103, 80_877_104];

impl PgProxy {
    /// A proxy on 127.0.0.1 in front of the server of `db_url`.
    pub async fn start(db_url: &str, marker: &'static str, cut: Cut) -> PgProxy {
        let url = url::Url::parse(db_url).expect("a postgres:// URL");
        let upstream = format!(
            "{}:{}",
            url.host_str().expect("a host"),
            url.port().unwrap_or(5432)
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cuts = Arc::new(AtomicUsize::new(0));
        let used = Arc::new(AtomicBool::new(false));
        let counted = cuts.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let relay = Relay {
                    marker,
                    cut,
                    cuts: counted.clone(),
                    used: used.clone(),
                };
                tokio::spawn(relay.run(client, server));
            }
        });
        PgProxy { addr, cuts, task }
    }

    /// `db_url` through this proxy.
    pub fn url(&self, db_url: &str) -> String {
        let mut url = url::Url::parse(db_url).unwrap();
        url.set_host(Some("127.0.0.1")).unwrap();
        url.set_port(Some(self.addr.port())).unwrap();
        url.to_string()
    }

    /// How many connections were cut (0 or 1).
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for PgProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Relay {
    marker: &'static str,
    cut: Cut,
    cuts: Arc<AtomicUsize>,
    used: Arc<AtomicBool>,
}

impl Relay {
    async fn run(self, client: TcpStream, server: TcpStream) {
        let (mut from_client, mut to_client) = client.into_split();
        let (mut from_server, mut to_server) = server.into_split();
        let back = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
        });
        let _ = self.forward(&mut from_client, &mut to_server).await;
        // Both connections end here: the client's read half and the server's write half go now,
        // the rest with the task that copies the server's answers.
        back.abort();
    }

    /// Forwards the client's messages until it closes or the cut comes.
    async fn forward(
        &self,
        from: &mut OwnedReadHalf,
        to: &mut OwnedWriteHalf,
    ) -> std::io::Result<()> {
        // The untyped messages first: encryption requests, then the startup message.
        loop {
            let body = untyped(from).await?;
            to.write_all(&body).await?;
            let code = u32::from_be_bytes(body[4..8].try_into().unwrap());
            if !ENCRYPTION_REQUESTS.contains(&code) {
                break;
            }
        }
        let mut armed = false;
        loop {
            let mut head = [0u8; 5];
            from.read_exact(&mut head).await?;
            let len = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
            let mut body = vec![0u8; len.saturating_sub(4)];
            from.read_exact(&mut body).await?;
            let text = String::from_utf8_lossy(&body);
            if head[0] == b'P' && text.contains(self.marker) {
                armed = true;
            }
            let commit = armed && head[0] == b'Q' && text.trim_start().starts_with("COMMIT");
            let cutting = commit && !self.used.swap(true, Ordering::SeqCst);
            if cutting && self.cut == Cut::Before {
                self.cuts.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
            to.write_all(&head).await?;
            to.write_all(&body).await?;
            if cutting {
                to.flush().await?;
                self.cuts.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
        }
    }
}

/// One untyped message (its length, then the rest), whole.
async fn untyped(from: &mut OwnedReadHalf) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len).await?;
    let n = u32::from_be_bytes(len) as usize;
    if n < 8 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "an untyped message shorter than its code",
        ));
    }
    let mut body = vec![0u8; n];
    body[..4].copy_from_slice(&len);
    from.read_exact(&mut body[4..]).await?;
    Ok(body)
}
