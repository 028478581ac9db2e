//! gRPC on one byte stream: the plugin's stdin and stdout (or any duplex stream, in tests).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;
use tonic::service::Routes;
use tonic::transport::server::Connected;

/// One connection's stream, telling when the server lets it go (on its end or the peer's).
struct Conn<T> {
    io: T,
    _closed: oneshot::Sender<()>,
}

impl<T> Connected for Conn<T> {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl<T: AsyncRead + Unpin> AsyncRead for Conn<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Conn<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Serves `routes` on the single stream `io` until the peer closes it (or the stream fails).
pub async fn serve_on<T>(routes: Routes, io: T) -> io::Result<()>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (closed_tx, closed_rx) = oneshot::channel();
    let conn = Conn {
        io,
        _closed: closed_tx,
    };
    let incoming = futures::stream::once(async move { Ok::<_, io::Error>(conn) });
    // The server stops accepting once its one connection is in; that connection runs in its own
    // task until the stream is let go, which is when this plugin's work is done.
    tonic::transport::Server::builder()
        .initial_stream_window_size(crate::WINDOW)
        .initial_connection_window_size(crate::WINDOW)
        .add_routes(routes)
        .serve_with_incoming(incoming)
        .await
        .map_err(io::Error::other)?;
    let _ = closed_rx.await;
    Ok(())
}

/// Serves `routes` on this process's stdin and stdout until the host closes them.
pub async fn serve_stdio(routes: Routes) -> io::Result<()> {
    #[cfg(unix)]
    if let Some((read, write)) = stdio_pipes() {
        return serve_on(routes, tokio::io::join(read, write)).await;
    }
    serve_on(
        routes,
        tokio::io::join(tokio::io::stdin(), tokio::io::stdout()),
    )
    .await
}

/// Stdin and stdout as the pipes a host gives them, driven by the reactor: tokio's own stdin and
/// stdout go through a blocking thread per read and write, which costs a large reply many hand-offs.
/// `None` when either is not a pipe (a terminal, a file), served the general way.
#[cfg(unix)]
fn stdio_pipes() -> Option<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;
    let read = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let write = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    Some((
        pipe::Receiver::from_owned_fd(read).ok()?,
        pipe::Sender::from_owned_fd(write).ok()?,
    ))
}
