//! Connections: accepting them, bounding how long their headers may take,
//! and closing them so that the client reads the last answer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

use crate::http::app::{router, AppState};

/// Serve the API on an already-bound listener until `shutdown` completes;
/// then stop accepting and wait for the connections to finish.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut http = http1::Builder::new();
    // Without a header timeout a client that sends half its headers holds
    // the connection for ever.
    http.timer(TokioTimer::new())
        .header_read_timeout(state.header_timeout)
        // Header names as HTTP/1.1 clients usually write them (`Location`,
        // `Content-Type`), not hyper's lowercase: QGIS 3.40 looks for
        // `Location` case-sensitively after a POST, and without it reports
        // the committed feature as failed.
        .title_case_headers(true);
    let service = TowerToHyperService::new(router(state));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let connection = http.serve_connection(TokioIo::new(Linger::new(stream)), service.clone());
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Longest a closing connection reads (and discards) what its client still
/// sends, and longest it waits for the next bytes of it.
const LINGER_TIME: Duration = Duration::from_secs(10);
const LINGER_IDLE: Duration = Duration::from_secs(2);
/// Most bytes a closing connection reads and discards.
const LINGER_BYTES: u64 = 1 << 30;

/// A TCP stream that closes as nginx's lingering close does. An answer
/// given before the request body was read (a 413, a 401) ends the
/// connection; closing a socket with unread bytes makes the kernel reset
/// it, and a client still sending its body (Python's urllib and requests
/// send it all before reading) then sees "broken pipe", not the answer.
/// So shutting down sends FIN, then reads and discards until the client
/// closes too, for at most [`LINGER_TIME`] and [`LINGER_BYTES`].
pub struct Linger {
    stream: TcpStream,
    draining: Option<Draining>,
}

struct Draining {
    end: Instant,
    timer: Pin<Box<Sleep>>,
    left: u64,
}

impl Linger {
    /// Wrap an accepted connection.
    pub fn new(stream: TcpStream) -> Self {
        Linger {
            stream,
            draining: None,
        }
    }
}

impl AsyncRead for Linger {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Linger {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.draining.is_none() {
            ready!(Pin::new(&mut this.stream).poll_shutdown(cx))?;
            let now = Instant::now();
            this.draining = Some(Draining {
                end: now + LINGER_TIME,
                timer: Box::pin(tokio::time::sleep_until(now + LINGER_IDLE)),
                left: LINGER_BYTES,
            });
        }
        let draining = this.draining.as_mut().expect("set above");
        let mut scratch = [0u8; 8192];
        loop {
            if draining.left == 0 || draining.timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match ready!(Pin::new(&mut this.stream).poll_read(cx, &mut buf)) {
                // The client closed its side, or the connection is gone: done.
                Ok(()) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Err(_) => return Poll::Ready(Ok(())),
                Ok(()) => {
                    draining.left = draining.left.saturating_sub(buf.filled().len() as u64);
                    let next = (Instant::now() + LINGER_IDLE).min(draining.end);
                    draining.timer.as_mut().reset(next);
                }
            }
        }
    }
}
