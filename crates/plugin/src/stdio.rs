//! gRPC on one byte stream: the plugin's stdin and stdout (or any duplex stream, in tests).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;
use tonic::service::Routes;
use tonic::transport::server::Connected;

/// A byte stream whose writes are gathered until a flush, and whose flush first lets the tasks that
/// are ready run once: HTTP/2 flushes a call's headers before the call's body task has put its data
/// in, and written apart, each would wake the peer (a second wake-up for every call, and a reply's
/// trailers a third). Gathered, a call or a reply crosses in one write.
pub(crate) struct Coalesced<T> {
    io: T,
    buf: Vec<u8>,
    /// How much of `buf` is written.
    sent: usize,
    /// Whether this flush let the other ready tasks run already.
    yielded: bool,
    /// Dropped with the stream: tells [`serve_on`] that the server let its one connection go (on
    /// its end or the peer's).
    closed: Option<oneshot::Sender<()>>,
}

impl<T> Connected for Coalesced<T> {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl<T> Coalesced<T> {
    pub(crate) fn new(io: T) -> Self {
        Coalesced {
            io,
            buf: Vec::new(),
            sent: 0,
            yielded: false,
            closed: None,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.buf.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut n = 0;
        for b in bufs {
            self.buf.extend_from_slice(b);
            n += b.len();
        }
        Poll::Ready(Ok(n))
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.sent < this.buf.len() && !this.yielded {
            this.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        while this.sent < this.buf.len() {
            let n =
                std::task::ready!(Pin::new(&mut this.io).poll_write(cx, &this.buf[this.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            this.sent += n;
        }
        this.buf.clear();
        this.sent = 0;
        this.yielded = false;
        Pin::new(&mut this.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Serves `routes` on the single stream `io` until the peer closes it (or the stream fails).
pub async fn serve_on<T>(routes: Routes, io: T) -> io::Result<()>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (closed_tx, closed_rx) = oneshot::channel();
    let mut conn = Coalesced::new(io);
    conn.closed = Some(closed_tx);
    let incoming = futures::stream::once(async move { Ok::<_, io::Error>(conn) });
    // The server stops accepting once its one connection is in; that connection runs in its own
    // task until the stream is let go, which is when this plugin's work is done.
    tonic::transport::Server::builder()
        .initial_stream_window_size(crate::WINDOW)
        .initial_connection_window_size(crate::WINDOW)
        .max_frame_size(crate::MAX_FRAME)
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
