//! The relay: the client's and the upstream's upgraded transports in;
//! their bytes copied both ways, unchanged, out. Each direction holds one
//! bounded buffer and reads again only once the last read is written
//! (backpressure both ways); every read is stamped and every written
//! slice handed to a [`Tap`] (metering), after the write, so the forward
//! never waits on it. On shutdown it ends each direction on a frame
//! boundary with a close frame 1001, or just closes it.

use std::future::{Future, poll_fn};
use std::io;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

use super::boundary::{Boundary, going_away};

/// One direction's buffer: the most read from one side before it is
/// written to the other.
pub const BUFFER_BYTES: usize = 16 * 1024;

/// A direction of the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dir {
    /// Client to upstream.
    Up,
    /// Upstream to client.
    Down,
}

/// A side of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Client,
    Upstream,
}

/// Sees the relayed bytes (metering). Called on the relay's task: keep it
/// cheap and never block.
pub(super) trait Tap {
    /// A read in `dir` just returned bytes (before they are written on).
    fn read(&mut self, dir: Dir);
    /// `bytes` were written on in `dir` (in order, each byte once).
    fn relayed(&mut self, dir: Dir, bytes: &[u8]);
}

/// How a WebSocket session's relay ended.
#[derive(Debug)]
pub(super) enum End {
    /// Both sides closed their streams; `first` closed first.
    Closed { first: Side },
    /// Reading from or writing to `side` failed (reset, broken pipe).
    Failed { side: Side, error: io::Error },
    /// No byte either way for the idle timeout.
    Idle,
    /// tokentap shut down.
    Shutdown,
}

/// One direction's copy state.
struct Half {
    dir: Dir,
    buf: Box<[u8]>,
    /// Bytes `pos..end` of `buf` are read and not yet written.
    pos: usize,
    end: usize,
    /// The reading side has closed its stream.
    eof: bool,
    /// Written bytes not yet flushed.
    unflushed: bool,
    /// Write side shut down: this direction is over.
    done: bool,
    /// Stop reading, finish the pending write, end the direction.
    stopping: bool,
    /// Our own close frame is in the buffer (not relayed bytes).
    closing: bool,
    boundary: Boundary,
}

impl Half {
    /// A direction whose first bytes (read past the handshake by hyper)
    /// are `prefix`.
    fn new(dir: Dir, prefix: &[u8]) -> Half {
        let mut buf = vec![0; BUFFER_BYTES.max(prefix.len())].into_boxed_slice();
        buf[..prefix.len()].copy_from_slice(prefix);
        Half {
            dir,
            buf,
            pos: 0,
            end: prefix.len(),
            eof: false,
            unflushed: false,
            done: false,
            stopping: false,
            closing: false,
            boundary: Boundary::default(),
        }
    }

    /// The side this direction reads from and the one it writes to.
    fn sides(&self) -> (Side, Side) {
        match self.dir {
            Dir::Up => (Side::Client, Side::Upstream),
            Dir::Down => (Side::Upstream, Side::Client),
        }
    }

    /// Copy until the reader has nothing ready or the writer is full.
    /// Sets `*read` when a read returned bytes. Ready once this direction
    /// is over (or failed).
    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        r: &mut R,
        w: &mut W,
        tap: &mut dyn Tap,
        read: &mut bool,
    ) -> Poll<Result<(), (Side, io::Error)>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let (from, to) = self.sides();
        let failed = |side| move |e| (side, e);
        while !self.done {
            if self.pos < self.end {
                let n = ready!(Pin::new(&mut *w).poll_write(cx, &self.buf[self.pos..self.end]))
                    .map_err(failed(to))?;
                if n == 0 {
                    return Poll::Ready(Err((to, io::ErrorKind::WriteZero.into())));
                }
                if !self.closing {
                    let written = &self.buf[self.pos..self.pos + n];
                    self.boundary.feed(written);
                    tap.relayed(self.dir, written);
                }
                self.pos += n;
                self.unflushed = true;
                continue;
            }
            if self.unflushed {
                ready!(Pin::new(&mut *w).poll_flush(cx)).map_err(failed(to))?;
                self.unflushed = false;
            }
            if self.stopping && !self.closing && !self.eof {
                self.closing = true;
                if self.boundary.at_boundary() {
                    let frame = going_away(self.mask());
                    self.buf[..frame.len()].copy_from_slice(&frame);
                    (self.pos, self.end) = (0, frame.len());
                    continue;
                }
            }
            if self.eof || self.stopping {
                // A peer already gone makes the shutdown fail: nothing to do.
                let _ = ready!(Pin::new(&mut *w).poll_shutdown(cx));
                self.done = true;
                break;
            }
            let mut rb = ReadBuf::new(&mut self.buf);
            ready!(Pin::new(&mut *r).poll_read(cx, &mut rb)).map_err(failed(from))?;
            let n = rb.filled().len();
            if n == 0 {
                self.eof = true;
                continue;
            }
            tap.read(self.dir);
            *read = true;
            (self.pos, self.end) = (0, n);
        }
        Poll::Ready(Ok(()))
    }

    /// Frames towards the upstream are masked (RFC 6455 §5.3).
    fn mask(&self) -> Option<[u8; 4]> {
        (self.dir == Dir::Up).then(mask_key)
    }
}

/// Four unpredictable bytes for a masking key (std's per-process random
/// hash keys, so no extra dependency).
fn mask_key() -> [u8; 4] {
    use std::hash::{BuildHasher, RandomState};
    let v = RandomState::new().hash_one(std::time::SystemTime::now());
    let b = v.to_le_bytes();
    [b[0], b[1], b[2], b[3]]
}

/// Relay between `client` and `upstream` until both sides have closed,
/// one fails, nothing moves for `idle`, or `stop` turns true. `client_prefix`
/// and `upstream_prefix` are bytes hyper read past the handshake.
#[allow(
    clippy::disallowed_methods,
    reason = "idle timeout timer of the relay, not a measurement"
)]
pub(super) async fn relay<C, U, T>(
    mut client: C,
    client_prefix: Bytes,
    mut upstream: U,
    upstream_prefix: Bytes,
    idle: Option<Duration>,
    mut stop: watch::Receiver<bool>,
    tap: &mut T,
) -> End
where
    T: Tap,
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut up = Half::new(Dir::Up, &client_prefix);
    let mut down = Half::new(Dir::Down, &upstream_prefix);
    for (half, prefix) in [(&up, &client_prefix), (&down, &upstream_prefix)] {
        if !prefix.is_empty() {
            tap.read(half.dir);
        }
    }
    drop((client_prefix, upstream_prefix));
    let mut stopped = pin!(stop.wait_for(|s| *s));
    let mut idle = idle.map(|d| (d, Box::pin(tokio::time::sleep(d))));
    let mut why: Option<End> = None;
    let mut first: Option<Side> = None;
    let result = poll_fn(|cx| {
        if why.is_none() {
            if stopped.as_mut().poll(cx).is_ready() {
                why = Some(End::Shutdown);
            } else if let Some((_, sleep)) = &mut idle
                && sleep.as_mut().poll(cx).is_ready()
            {
                why = Some(End::Idle);
            }
            if why.is_some() {
                (up.stopping, down.stopping) = (true, true);
            }
        }
        let mut read = false;
        let a = up.poll_copy(cx, &mut client, &mut upstream, tap, &mut read);
        let b = down.poll_copy(cx, &mut upstream, &mut client, tap, &mut read);
        for (half, side) in [(&up, Side::Client), (&down, Side::Upstream)] {
            if half.eof && first.is_none() {
                first = Some(side);
            }
        }
        if let Some(error) = [a, b].into_iter().find_map(|r| match r {
            Poll::Ready(Err(e)) => Some(e),
            _ => None,
        }) {
            return Poll::Ready(Err(error));
        }
        if read && let Some((d, sleep)) = &mut idle {
            sleep.as_mut().reset(tokio::time::Instant::now() + *d);
            // A reset timer must be polled again to be woken.
            let _ = sleep.as_mut().poll(cx);
        }
        if up.done && down.done {
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    })
    .await;
    match (why, result) {
        (Some(why), _) => why,
        (None, Err((side, error))) => End::Failed { side, error },
        (None, Ok(())) => End::Closed {
            first: first.unwrap_or(Side::Client),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    #[derive(Default)]
    struct Seen {
        up: Vec<u8>,
        down: Vec<u8>,
        reads: usize,
    }

    impl Tap for Seen {
        fn read(&mut self, _: Dir) {
            self.reads += 1;
        }
        fn relayed(&mut self, dir: Dir, bytes: &[u8]) {
            match dir {
                Dir::Up => self.up.extend_from_slice(bytes),
                Dir::Down => self.down.extend_from_slice(bytes),
            }
        }
    }

    #[tokio::test]
    async fn bytes_pass_both_ways_unchanged_with_prefixes_first() {
        let (client, mut client_peer) = duplex(64);
        let (upstream, mut upstream_peer) = duplex(64);
        let (_tx, stop) = watch::channel(false);
        let relay = tokio::spawn(async move {
            let mut seen = Seen::default();
            let end = relay(
                client,
                Bytes::from_static(b"c0"),
                upstream,
                Bytes::from_static(b"u0"),
                None,
                stop,
                &mut seen,
            )
            .await;
            (end, seen)
        });
        let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let sent = big.clone();
        let writer = tokio::spawn(async move {
            client_peer.write_all(&sent).await.expect("test step");
            client_peer.shutdown().await.expect("test step");
            let mut back = Vec::new();
            client_peer.read_to_end(&mut back).await.expect("test step");
            back
        });
        let mut got = Vec::new();
        upstream_peer.write_all(b"hello").await.expect("test step");
        upstream_peer.shutdown().await.expect("test step");
        upstream_peer
            .read_to_end(&mut got)
            .await
            .expect("test step");
        let back = writer.await.expect("test step");
        let (end, seen) = relay.await.expect("test step");
        assert_eq!(&got[..2], b"c0", "client prefix first");
        assert_eq!(got[2..], big[..], "client bytes unchanged");
        assert_eq!(back, b"u0hello", "upstream prefix then bytes");
        assert_eq!(seen.up, got, "tap saw exactly what was relayed up");
        assert_eq!(seen.down, back);
        assert!(matches!(end, End::Closed { .. }), "{end:?}");
    }

    #[tokio::test]
    async fn shutdown_sends_going_away_at_a_frame_boundary() {
        let (client, mut client_peer) = duplex(1024);
        let (upstream, mut upstream_peer) = duplex(1024);
        let (tx, stop) = watch::channel(false);
        let relay = tokio::spawn(async move {
            let mut seen = Seen::default();
            relay(
                client,
                Bytes::new(),
                upstream,
                Bytes::new(),
                None,
                stop,
                &mut seen,
            )
            .await
        });
        // One whole unmasked text frame down, half a frame up.
        upstream_peer
            .write_all(&[0x81, 2, b'h', b'i'])
            .await
            .expect("test step");
        client_peer
            .write_all(&[0x81, 0x85, 1, 2])
            .await
            .expect("test step");
        let mut frame = [0; 4];
        client_peer.read_exact(&mut frame).await.expect("test step");
        let mut half = [0; 4];
        upstream_peer
            .read_exact(&mut half)
            .await
            .expect("test step");
        tx.send(true).expect("test step");
        let end = relay.await.expect("test step");
        assert!(matches!(end, End::Shutdown), "{end:?}");
        let mut rest = Vec::new();
        client_peer.read_to_end(&mut rest).await.expect("test step");
        assert_eq!(
            rest,
            [0x88, 2, 0x03, 0xe9],
            "client gets 1001 (at a boundary)"
        );
        let mut rest = Vec::new();
        upstream_peer
            .read_to_end(&mut rest)
            .await
            .expect("test step");
        assert!(
            rest.is_empty(),
            "mid-frame upstream gets no frame: {rest:?}"
        );
    }
}
