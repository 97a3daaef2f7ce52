//! A TCP proxy for the PostgreSQL protocol that adds latency and counts round trips.
//!
//! Tests put it between the service and the database to prove round-trip
//! bounds; benchmarks use it to add a realistic network delay. Each chunk is
//! delivered `one_way` after it was read, in order, without waiting for the
//! previous chunk's delay (scheduled delivery, not serialised sleeps).
//!
//! A round trip is counted when the client sends a request while it has
//! received the answer to everything it asked (every Sync or Query answered by
//! ReadyForQuery), or after the server prompted it (CopyInResponse): that is
//! when a client has been waiting. Pipelined messages sent while answers are
//! outstanding are free, and so is housekeeping sent on its own (Close of a
//! dropped statement, Terminate), which no client waits for.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

/// Counters shared by all connections through one proxy.
#[derive(Debug, Default)]
pub struct ProxyStats {
    round_trips: AtomicU64,
    connections: AtomicU64,
}

/// Every task of a proxy, so that it can be cut off at once.
type Tasks = Arc<Mutex<Vec<AbortHandle>>>;

fn track(tasks: &Tasks, handle: AbortHandle) {
    tasks.lock().expect("no panics while locked").push(handle);
}

/// A running proxy; stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    stats: Arc<ProxyStats>,
    tasks: Tasks,
    cut_after_commit: Arc<AtomicBool>,
}

/// A simple-protocol `COMMIT` as tokio-postgres sends it: Query, length 11.
const COMMIT_QUERY: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";

impl Proxy {
    /// Listen on a free loopback port and forward to `upstream`, delaying each direction by `one_way`.
    pub async fn start(upstream: SocketAddr, one_way: Duration) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(ProxyStats::default());
        let tasks = Tasks::default();
        let cut_after_commit = Arc::new(AtomicBool::new(false));
        let (accept_stats, accept_tasks, accept_cut) =
            (stats.clone(), tasks.clone(), cut_after_commit.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if let Ok(server) = TcpStream::connect(upstream).await {
                    accept_stats.connections.fetch_add(1, Ordering::Relaxed);
                    let relay_io = Relay {
                        one_way,
                        stats: accept_stats.clone(),
                        tasks: accept_tasks.clone(),
                        cut_after_commit: accept_cut.clone(),
                    };
                    relay_io.start(client, server);
                }
            }
        });
        track(&tasks, accept.abort_handle());
        Ok(Proxy {
            addr,
            stats,
            tasks,
            cut_after_commit,
        })
    }

    /// Cut the next connection that sends `COMMIT` right after forwarding
    /// it: the server gets the COMMIT, the client never gets its answer.
    pub fn cut_after_next_commit(&self) {
        self.cut_after_commit.store(true, Ordering::SeqCst);
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Round trips counted so far, over all connections.
    pub fn round_trips(&self) -> u64 {
        self.stats.round_trips.load(Ordering::Relaxed)
    }

    /// Connections opened so far.
    pub fn connections(&self) -> u64 {
        self.stats.connections.load(Ordering::Relaxed)
    }
}

impl Proxy {
    /// Simulate the database going away: close every connection and refuse new ones.
    pub fn sever(&self) {
        for task in self.tasks.lock().expect("no panics while locked").drain(..) {
            task.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.sever();
    }
}

/// What every relayed connection shares with its proxy.
struct Relay {
    one_way: Duration,
    stats: Arc<ProxyStats>,
    tasks: Tasks,
    cut_after_commit: Arc<AtomicBool>,
}

impl Relay {
    fn start(self, client: TcpStream, server: TcpStream) {
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let state = Arc::new(Mutex::new(Conversation::default()));
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        // This connection's own tasks, to cut it alone.
        let own = Tasks::default();
        let (s, stats, cut) = (state.clone(), self.stats, self.cut_after_commit);
        let (cut_own, mut seen) = (own.clone(), Vec::new());
        let upstream = pump(
            client_read,
            server_write,
            self.one_way,
            move |data| {
                s.lock()
                    .expect("no panics while locked")
                    .client_sent(data, &stats)
            },
            move |data| {
                // The message may straddle chunks: keep the last few bytes.
                seen.extend_from_slice(data);
                let has_commit = seen.windows(COMMIT_QUERY.len()).any(|w| w == COMMIT_QUERY);
                let keep = seen.len().saturating_sub(COMMIT_QUERY.len() - 1);
                seen.drain(..keep);
                has_commit && cut.swap(false, Ordering::SeqCst)
            },
            cut_own,
        );
        let downstream = pump(
            server_read,
            client_write,
            self.one_way,
            |_| {},
            move |data| {
                state
                    .lock()
                    .expect("no panics while locked")
                    .client_received(data);
                false
            },
            own.clone(),
        );
        // Cutting stops the client's side only: the server's goes on being
        // read (and its answers dropped) until it closes, so that it runs
        // what it was sent rather than failing to answer.
        let [client_reader, _] = &upstream;
        let [_, client_writer] = &downstream;
        track(&own, client_reader.clone());
        track(&own, client_writer.clone());
        for handle in upstream.into_iter().chain(downstream) {
            track(&self.tasks, handle);
        }
    }
}

/// Copy `from` → `to`, calling `on_read` when a chunk is read and
/// `on_delivered` as it is written; when that says so, the tasks in `cut`
/// are stopped and `to` is closed right after the chunk is written.
fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    delay: Duration,
    mut on_read: impl FnMut(&[u8]) + Send + 'static,
    mut on_delivered: impl FnMut(&[u8]) -> bool + Send + 'static,
    cut: Tasks,
) -> [AbortHandle; 2] {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 {
                break;
            }
            on_read(&buf[..n]);
            // Nobody to deliver to (the other side is gone or was cut): keep
            // reading until this side closes too.
            let _ = tx.send((Instant::now() + delay, buf[..n].to_vec()));
        }
    });
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            // Record the delivery before the client can react to it.
            let cutting = on_delivered(&chunk);
            if to.write_all(&chunk).await.is_err() {
                return;
            }
            if cutting {
                for task in cut.lock().expect("no panics while locked").drain(..) {
                    task.abort();
                }
                break;
            }
        }
        let _ = to.shutdown().await;
    });
    [reader.abort_handle(), writer.abort_handle()]
}

/// What the client has asked and been answered on one connection.
struct Conversation {
    frontend: Framer,
    backend: Framer,
    /// Syncs and Queries sent that have no ReadyForQuery yet, oldest first.
    pending: VecDeque<Pending>,
    /// Messages since the last Sync asked for something.
    segment_asks: bool,
    /// The server asked the client for something (COPY data).
    prompted: bool,
    /// In COPY IN mode: the client streams rows until CopyDone or CopyFail.
    copying: bool,
    /// COPY data sent before the server's CopyInResponse (a pipelined
    /// COPY): the client did not wait for it.
    data_ahead: bool,
    /// Whole COPYs (data and CopyDone or CopyFail) sent before their
    /// CopyInResponse arrived.
    copies_ahead: u32,
    /// The last message sent was an Execute: a Sync now is one the server
    /// ignores if that Execute starts a COPY.
    after_execute: bool,
    /// TLS or GSS encryption was accepted: messages are no longer readable.
    opaque: bool,
}

impl Conversation {
    fn client_sent(&mut self, data: &[u8], stats: &ProxyStats) {
        if self.opaque {
            return;
        }
        let mut messages = Vec::new();
        self.frontend.feed(data, &mut messages);
        // A request still being sent (no Sync yet) is not answered either.
        let answered = !self.segment_asks && !self.pending.iter().any(|p| p.asks) && !self.copying;
        let waited = answered || self.prompted;
        let asks = messages.iter().any(Message::asks);
        if waited && asks {
            stats.round_trips.fetch_add(1, Ordering::Relaxed);
            self.prompted = false;
        }
        for m in messages {
            let execute = m == Message::Typed(b'E');
            match m {
                Message::Typed(b'S') => {
                    self.pending.push_back(Pending {
                        asks: self.segment_asks,
                        sync: true,
                        after_execute: self.after_execute,
                    });
                    self.segment_asks = false;
                }
                Message::Typed(b'Q') => self.pending.push_back(Pending {
                    asks: true,
                    sync: false,
                    after_execute: false,
                }),
                Message::Typed(b'd') if !self.copying => self.data_ahead = true,
                Message::Typed(b'c' | b'f') if !self.copying => {
                    self.copies_ahead += 1;
                    self.data_ahead = false;
                }
                Message::Typed(b'c' | b'f') => self.copying = false,
                Message::Untyped(SSL_REQUEST | GSSENC_REQUEST) => self.backend.raw_byte = true,
                Message::Untyped(CANCEL_REQUEST) => {}
                Message::Untyped(_) => self.frontend.typed = true,
                Message::Typed(_) if m.asks() => self.segment_asks = true,
                _ => {}
            }
            self.after_execute = execute;
        }
    }

    fn client_received(&mut self, data: &[u8]) {
        if self.opaque {
            return;
        }
        let mut messages = Vec::new();
        self.backend.feed(data, &mut messages);
        for m in messages {
            match m {
                Message::Typed(b'Z') => {
                    self.pending.pop_front();
                }
                // An error is the answer: the client may act on it before ReadyForQuery arrives.
                Message::Typed(b'E') => {
                    if let Some(front) = self.pending.front_mut() {
                        front.asks = false;
                    }
                }
                Message::Typed(b'G') => {
                    // A COPY started by Bind/Execute/Sync: the server ignores
                    // that Sync in COPY mode and answers only the one after
                    // CopyDone. (Everything sent before it has been answered.)
                    if self
                        .pending
                        .front()
                        .is_some_and(|p| p.sync && p.after_execute)
                    {
                        self.pending.pop_front();
                    }
                    if self.copies_ahead > 0 {
                        // Its rows and its end were sent with the statement.
                        self.copies_ahead -= 1;
                    } else if self.data_ahead {
                        // Its rows are on their way, unprompted.
                        self.data_ahead = false;
                        self.copying = true;
                    } else {
                        // The client waits for this to send its rows.
                        self.prompted = true;
                        self.copying = true;
                    }
                }
                Message::Raw(b'S' | b'G') => self.opaque = true,
                _ => {}
            }
        }
    }
}

/// A Sync or Query waiting for its ReadyForQuery.
struct Pending {
    /// It asked for something (not only housekeeping).
    asks: bool,
    /// A Sync (extended protocol) rather than a simple Query.
    sync: bool,
    /// Sent right after an Execute.
    after_execute: bool,
}

impl Message {
    /// Whether a frontend message asks for something; closing statements,
    /// syncing and terminating are housekeeping nobody waits for.
    fn asks(&self) -> bool {
        !matches!(self, Message::Typed(b'C' | b'S' | b'X'))
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Message {
    /// A regular message: its type byte.
    Typed(u8),
    /// A start-up phase message (no type byte): its request code.
    Untyped(u32),
    /// The one-byte answer to an SSL or GSS encryption request.
    Raw(u8),
}

/// Splits a byte stream into protocol messages, across chunk boundaries.
/// The default is the frontend's: untyped start-up messages first.
#[derive(Default)]
struct Framer {
    typed: bool,
    raw_byte: bool,
    head: [u8; 8],
    head_len: usize,
    skip: usize,
}

impl Framer {
    fn backend() -> Self {
        Framer {
            typed: true,
            ..Framer::default()
        }
    }

    fn feed(&mut self, mut data: &[u8], out: &mut Vec<Message>) {
        while !data.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
                continue;
            }
            if self.raw_byte {
                out.push(Message::Raw(data[0]));
                self.raw_byte = false;
                data = &data[1..];
                continue;
            }
            let head_size = if self.typed { 5 } else { 8 };
            let n = (head_size - self.head_len).min(data.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&data[..n]);
            self.head_len += n;
            data = &data[n..];
            if self.head_len < head_size {
                continue;
            }
            self.head_len = 0;
            let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
            if self.typed {
                out.push(Message::Typed(self.head[0]));
                self.skip = be(&self.head[1..5]).saturating_sub(4);
            } else {
                out.push(Message::Untyped(be(&self.head[4..8]) as u32));
                self.skip = be(&self.head[0..4]).saturating_sub(8);
            }
        }
    }
}

impl Default for Conversation {
    fn default() -> Self {
        Conversation {
            frontend: Framer::default(),
            backend: Framer::backend(),
            pending: VecDeque::new(),
            segment_asks: false,
            prompted: false,
            copying: false,
            data_ahead: false,
            copies_ahead: 0,
            after_execute: false,
            opaque: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(t: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![t];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn framer_handles_split_messages() {
        let mut f = Framer::backend();
        let mut stream = typed(b'C', b"INSERT 0 1\0");
        stream.extend(typed(b'Z', b"I"));
        let mut out = Vec::new();
        for byte in &stream {
            f.feed(std::slice::from_ref(byte), &mut out);
        }
        assert_eq!(out, vec![Message::Typed(b'C'), Message::Typed(b'Z')]);
    }

    #[test]
    fn pipelined_messages_count_once() {
        let stats = ProxyStats::default();
        let mut c = Conversation::default();
        c.frontend.typed = true;
        // Three statements each with a Sync, sent in two chunks before any answer.
        let mut first = typed(b'B', b"");
        first.extend(typed(b'E', b""));
        first.extend(typed(b'S', b""));
        c.client_sent(&first, &stats);
        let mut rest = typed(b'B', b"");
        rest.extend(typed(b'S', b""));
        c.client_sent(&rest, &stats);
        assert_eq!(stats.round_trips.load(Ordering::Relaxed), 1);
        c.client_received(&typed(b'Z', b"I"));
        c.client_sent(&typed(b'S', b""), &stats); // one answer still outstanding
        assert_eq!(stats.round_trips.load(Ordering::Relaxed), 1);
        c.client_received(&[typed(b'Z', b"I"), typed(b'Z', b"I")].concat());
        c.client_sent(&typed(b'Q', b"COMMIT\0"), &stats);
        assert_eq!(stats.round_trips.load(Ordering::Relaxed), 2);
        c.client_received(&typed(b'Z', b"I"));
        // Closing a dropped statement is not waited for.
        c.client_sent(&[typed(b'C', b"S_1\0"), typed(b'S', b"")].concat(), &stats);
        assert_eq!(stats.round_trips.load(Ordering::Relaxed), 2);
    }

    /// A client's chunk of `messages`, each with an empty body.
    fn sent(messages: &[u8]) -> Vec<u8> {
        messages.iter().flat_map(|&t| typed(t, b"")).collect()
    }

    #[test]
    fn a_copy_that_waits_for_copy_in_response_costs_two_round_trips() {
        let stats = ProxyStats::default();
        let mut c = Conversation::default();
        c.frontend.typed = true;
        c.client_sent(&sent(b"BES"), &stats);
        c.client_received(&sent(b"2G"));
        c.client_sent(&sent(b"dd"), &stats);
        c.client_sent(&sent(b"dcS"), &stats);
        assert_eq!(stats.round_trips.load(Ordering::Relaxed), 2);
        c.client_received(&sent(b"CZ"));
        c.client_sent(&typed(b'Q', b"COMMIT\0"), &stats);
        assert_eq!(stats.round_trips.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_copy_sent_with_its_rows_costs_one_round_trip() {
        let stats = ProxyStats::default();
        let mut c = Conversation::default();
        c.frontend.typed = true;
        // BEGIN, then the COPY's Bind and Execute and its first rows.
        c.client_sent(&[typed(b'Q', b"BEGIN\0"), sent(b"BEdd")].concat(), &stats);
        // Answers arrive while the rows still go out.
        c.client_received(&[sent(b"CZ"), sent(b"2G")].concat());
        c.client_sent(&sent(b"dd"), &stats);
        c.client_sent(
            &[sent(b"dcSBES"), typed(b'Q', b"COMMIT\0")].concat(),
            &stats,
        );
        assert_eq!(stats.round_trips.load(Ordering::Relaxed), 1);
        c.client_received(&sent(b"CZ2DCZCZ"));
        c.client_sent(&sent(b"BES"), &stats);
        assert_eq!(stats.round_trips.load(Ordering::Relaxed), 2);
        // A whole COPY sent before its CopyInResponse, then refused... or answered.
        c.client_received(&sent(b"2DCZ"));
        c.client_sent(&sent(b"BEddcS"), &stats);
        assert_eq!(stats.round_trips.load(Ordering::Relaxed), 3);
        c.client_received(&sent(b"2GCZ"));
        c.client_sent(&typed(b'Q', b"SELECT 1\0"), &stats);
        assert_eq!(stats.round_trips.load(Ordering::Relaxed), 4);
    }
}
