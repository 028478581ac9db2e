//! The signals that stop a program: SIGINT (Ctrl-C) and, on Unix, SIGTERM (what a service manager
//! sends). [`StopSignals`] hears every one of them, in order, and names each; a program decides what
//! the first and any further one mean (a graceful stop, then an immediate one).

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// Every SIGINT and SIGTERM this process gets from the moment it is installed, in order. It is made
/// within a tokio runtime; from then on neither signal takes its default action (ending the process)
/// while the handler can be installed.
#[derive(Debug)]
pub struct StopSignals(UnboundedReceiver<&'static str>);

impl StopSignals {
    /// Handles both signals, or fails when the handler of either cannot be installed.
    pub fn install() -> std::io::Result<StopSignals> {
        Self::listen(true)
    }

    /// Handles each signal whose handler can be installed; another is left to its default action.
    pub fn install_each() -> StopSignals {
        Self::listen(false).unwrap_or_else(|_| unreachable!("install_each does not fail"))
    }

    fn listen(strict: bool) -> std::io::Result<StopSignals> {
        let (tx, rx) = unbounded_channel();
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            for (kind, name) in [
                (SignalKind::interrupt(), "SIGINT"),
                (SignalKind::terminate(), "SIGTERM"),
            ] {
                let mut stream = match signal(kind) {
                    Ok(stream) => stream,
                    Err(e) if strict => return Err(e),
                    Err(_) => continue,
                };
                let tx = tx.clone();
                tokio::spawn(async move {
                    while stream.recv().await.is_some() && tx.send(name).is_ok() {}
                });
            }
        }
        #[cfg(not(unix))]
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() && tx.send("SIGINT").is_ok() {}
        });
        Ok(StopSignals(rx))
    }

    /// Resolves on the next signal with its name (`SIGINT`, `SIGTERM`); never, when no handler
    /// could be installed.
    pub async fn next(&mut self) -> &'static str {
        match self.0.recv().await {
            Some(name) => name,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;

    /// One test sends both signals, so that no other test of this process hears them.
    #[tokio::test]
    async fn every_signal_is_heard_in_order_and_named() {
        let mut strict = StopSignals::install().expect("the handlers install");
        let mut each = StopSignals::install_each();
        for name in ["SIGTERM", "SIGINT", "SIGTERM"] {
            let sent = std::process::Command::new("kill")
                .args([&format!("-{}", &name[3..]), &std::process::id().to_string()])
                .status()
                .expect("kill runs");
            assert!(sent.success(), "kill -{name}");
            assert_eq!(strict.next().await, name);
            assert_eq!(each.next().await, name);
        }
        let none_yet =
            tokio::time::timeout(std::time::Duration::from_millis(50), strict.next()).await;
        assert!(none_yet.is_err(), "no signal came after the three");
    }
}
