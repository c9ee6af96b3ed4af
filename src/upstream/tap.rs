//! The decrypted bytes an HTTP/2 upstream connection reads, watched on
//! their way to hyper: the same bytes out, and the peer's
//! SETTINGS_MAX_CONCURRENT_STREAMS and GOAWAY into [`Peer`], which the
//! pool reads. hyper exposes neither on the handle requests are sent by.
//!
//! Only frame headers are parsed (nine bytes per frame); DATA payloads are
//! skipped by length, so the cost is a few comparisons per read.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;

use crate::read_tap::{Observe, ReadTap};

/// What the peer has told us about the connection so far.
#[derive(Debug)]
pub(super) struct Peer {
    /// SETTINGS_MAX_CONCURRENT_STREAMS; `u32::MAX` when the peer sets none
    /// (RFC 9113 §6.5.2: no limit).
    limit: AtomicU32,
    /// The server preface (its first SETTINGS frame) has arrived.
    settled: AtomicBool,
    /// A GOAWAY arrived: no new streams may go on this connection.
    goaway: AtomicBool,
    /// Woken on every change above (the host's waiters).
    changed: std::sync::Arc<Notify>,
    /// Woken when the preface arrives (the connection's opener alone, so
    /// it never takes a wake-up meant for a request waiting for a slot).
    preface: Notify,
}

impl Peer {
    /// A peer that has said nothing yet; `changed` is notified (all
    /// waiters) whenever it says something the pool cares about.
    pub(super) fn new(changed: std::sync::Arc<Notify>) -> Peer {
        Peer {
            limit: AtomicU32::new(u32::MAX),
            settled: AtomicBool::new(false),
            goaway: AtomicBool::new(false),
            changed,
            preface: Notify::new(),
        }
    }

    /// The peer's current stream limit.
    pub(super) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Acquire)
    }

    /// The server preface has arrived, so `limit` is the peer's.
    pub(super) fn settled(&self) -> bool {
        self.settled.load(Ordering::Acquire)
    }

    /// Wait until the server preface has arrived (cancel-safe; bound it
    /// with a timeout).
    pub(super) async fn wait_settled(&self) {
        loop {
            let mut notified = std::pin::pin!(self.preface.notified());
            notified.as_mut().enable();
            if self.settled() {
                return;
            }
            notified.await;
        }
    }

    /// The peer sent GOAWAY (or the pool retired the connection): no new
    /// streams go on it.
    pub(super) fn gone_away(&self) -> bool {
        self.goaway.load(Ordering::Acquire)
    }

    /// Take no new streams on this connection, as after a GOAWAY.
    pub(super) fn retire(&self) {
        self.goaway.store(true, Ordering::Release);
    }
}

const FRAME_HEADER: usize = 9;
const SETTINGS_ENTRY: usize = 6;
const TYPE_SETTINGS: u8 = 0x4;
const TYPE_GOAWAY: u8 = 0x7;
const FLAG_ACK: u8 = 0x1;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;

/// Where the frame parser is in the byte stream.
#[derive(Debug)]
enum State {
    /// Collecting a frame header.
    Header {
        buf: [u8; FRAME_HEADER],
        have: usize,
    },
    /// Skipping `left` payload bytes of a frame we do not read.
    Skip { left: usize },
    /// Reading a SETTINGS payload, entry by entry.
    Settings {
        left: usize,
        entry: [u8; SETTINGS_ENTRY],
        have: usize,
    },
}

/// An incremental HTTP/2 frame-header parser for the server-to-client
/// direction (the server sends no connection preface string).
#[derive(Debug)]
pub(super) struct Frames {
    state: State,
}

impl Default for Frames {
    fn default() -> Self {
        Frames {
            state: State::Header {
                buf: [0; FRAME_HEADER],
                have: 0,
            },
        }
    }
}

impl Frames {
    /// Feed the next bytes the connection read; updates `peer`.
    pub(super) fn feed(&mut self, mut bytes: &[u8], peer: &Peer) {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Header { buf, have } => {
                    let n = (FRAME_HEADER - *have).min(bytes.len());
                    buf[*have..*have + n].copy_from_slice(&bytes[..n]);
                    *have += n;
                    bytes = &bytes[n..];
                    if *have == FRAME_HEADER {
                        let header = *buf;
                        self.header(header, peer);
                    }
                }
                State::Skip { left } => {
                    let n = (*left).min(bytes.len());
                    *left -= n;
                    bytes = &bytes[n..];
                    if *left == 0 {
                        self.state = Frames::default().state;
                    }
                }
                State::Settings { left, entry, have } => {
                    let n = (SETTINGS_ENTRY - *have).min(*left).min(bytes.len());
                    entry[*have..*have + n].copy_from_slice(&bytes[..n]);
                    *have += n;
                    *left -= n;
                    bytes = &bytes[n..];
                    if *have == SETTINGS_ENTRY {
                        let id = u16::from_be_bytes([entry[0], entry[1]]);
                        let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
                        if id == SETTINGS_MAX_CONCURRENT_STREAMS {
                            peer.limit.store(value, Ordering::Release);
                        }
                        *have = 0;
                    }
                    if *left == 0 {
                        self.state = Frames::default().state;
                        self.settings_done(peer);
                    }
                }
            }
        }
    }

    /// A complete frame header: decide what to do with its payload.
    fn header(&mut self, h: [u8; FRAME_HEADER], peer: &Peer) {
        let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        let (kind, flags) = (h[3], h[4]);
        let stream_zero = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff == 0;
        if kind == TYPE_GOAWAY && stream_zero && !peer.goaway.swap(true, Ordering::AcqRel) {
            peer.changed.notify_waiters();
        }
        let settings = kind == TYPE_SETTINGS && stream_zero && flags & FLAG_ACK == 0;
        self.state = match (settings, len) {
            (true, 0) => {
                self.state = Frames::default().state;
                self.settings_done(peer);
                return;
            }
            (true, left) => State::Settings {
                left,
                entry: [0; SETTINGS_ENTRY],
                have: 0,
            },
            (false, 0) => Frames::default().state,
            (false, left) => State::Skip { left },
        };
    }

    /// A whole SETTINGS frame has been read: it took effect.
    fn settings_done(&self, peer: &Peer) {
        peer.settled.store(true, Ordering::Release);
        peer.preface.notify_waiters();
        peer.changed.notify_waiters();
    }
}

/// Any byte stream an upstream connection runs over.
pub(super) trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<S: AsyncRead + AsyncWrite + Send + Unpin> Stream for S {}

/// The transport an HTTP/2 upstream connection runs over, watched.
pub(super) type Watched = hyper_util::rt::TokioIo<Tap<Box<dyn Stream>>>;

/// Take a connected transport apart to its decrypted byte stream and watch
/// what it reads for `peer`.
pub(super) fn watch(io: super::conn::Io, peer: std::sync::Arc<Peer>) -> Watched {
    let inner: Box<dyn Stream> = match io {
        hyper_rustls::MaybeHttpsStream::Http(tcp) => Box::new(tcp.into_inner()),
        hyper_rustls::MaybeHttpsStream::Https(tls) => Box::new(tls.into_inner()),
    };
    hyper_util::rt::TokioIo::new(ReadTap::new(inner, Watch::new(peer)))
}

/// A transport whose reads are shown to a [`Frames`] parser.
pub(super) type Tap<S> = ReadTap<S, Watch>;

/// The frame parser and the peer it reports to.
#[derive(Debug)]
pub(super) struct Watch {
    frames: Frames,
    peer: std::sync::Arc<Peer>,
}

impl Watch {
    /// Watch a connection's reads on behalf of `peer`.
    pub(super) fn new(peer: std::sync::Arc<Peer>) -> Watch {
        Watch {
            frames: Frames::default(),
            peer,
        }
    }
}

impl Observe for Watch {
    fn observe(&mut self, bytes: &[u8]) {
        self.frames.feed(bytes, &self.peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn settings(entries: &[(u16, u32)]) -> Vec<u8> {
        let mut p = Vec::new();
        for (id, v) in entries {
            p.extend_from_slice(&id.to_be_bytes());
            p.extend_from_slice(&v.to_be_bytes());
        }
        frame(TYPE_SETTINGS, 0, 0, &p)
    }

    /// A server's byte stream: preface SETTINGS (limit 4), an ACK, a HEADERS
    /// and DATA frame, a SETTINGS lowering the limit to 2, then GOAWAY.
    fn wire() -> Vec<u8> {
        let mut w = settings(&[(0x4, 65_535), (0x3, 4), (0x5, 16_384)]);
        w.extend(frame(TYPE_SETTINGS, FLAG_ACK, 0, &[]));
        w.extend(frame(0x1, 0x4, 1, &[0x88]));
        // A DATA payload that looks like a SETTINGS frame must be skipped.
        w.extend(frame(0x0, 0, 1, &settings(&[(0x3, 99)])));
        w.extend(settings(&[(0x3, 2)]));
        w.extend(frame(TYPE_GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 0]));
        w
    }

    #[test]
    fn reads_limit_changes_and_goaway_at_every_split() {
        let w = wire();
        for split in 0..=w.len() {
            let peer = Peer::new(Arc::new(Notify::new()));
            let mut f = Frames::default();
            assert!(!peer.settled());
            f.feed(&w[..split], &peer);
            f.feed(&w[split..], &peer);
            assert!(peer.settled(), "split {split}");
            assert_eq!(peer.limit(), 2, "split {split}: last SETTINGS wins");
            assert!(peer.gone_away(), "split {split}");
        }
        // Byte by byte, watching the limit as it goes.
        let peer = Peer::new(Arc::new(Notify::new()));
        let mut f = Frames::default();
        let mut seen = Vec::new();
        for b in &w {
            f.feed(std::slice::from_ref(b), &peer);
            if peer.settled() && seen.last() != Some(&peer.limit()) {
                seen.push(peer.limit());
            }
        }
        assert_eq!(seen, [4, 2], "the DATA payload's fake limit 99 is ignored");
    }

    #[test]
    fn a_preface_without_the_setting_means_no_limit() {
        let peer = Peer::new(Arc::new(Notify::new()));
        let mut f = Frames::default();
        f.feed(&settings(&[]), &peer);
        assert!(peer.settled());
        assert_eq!(peer.limit(), u32::MAX);
        assert!(!peer.gone_away());
    }
}
