//! A transport whose reads are shown to an observer on their way to
//! hyper: the same bytes in and out, a look at each read on the side.
//! Writes pass straight through. The proxy listener screens request heads
//! with it (`server::head_check`) and the HTTP/2 upstream pool watches the
//! server's SETTINGS and GOAWAY frames with it (`upstream::tap`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Sees every byte the wrapped transport reads, in order, after the read
/// and before hyper does.
pub trait Observe {
    /// The bytes one read returned (never empty).
    fn observe(&mut self, bytes: &[u8]);
}

/// `inner` with its reads shown to `observer`.
#[derive(Debug)]
pub struct ReadTap<T, O> {
    inner: T,
    observer: O,
}

impl<T, O> ReadTap<T, O> {
    /// Wrap `inner`, showing its reads to `observer`.
    pub fn new(inner: T, observer: O) -> ReadTap<T, O> {
        ReadTap { inner, observer }
    }

    /// The transport, once its bytes are no longer worth watching (an
    /// upgrade hands the socket to another protocol).
    pub fn into_inner(self) -> T {
        self.inner
    }
}

impl<T: AsyncRead + Unpin, O: Observe + Unpin> AsyncRead for ReadTap<T, O> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let res = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = res {
            let read = &buf.filled()[before..];
            if !read.is_empty() {
                this.observer.observe(read);
            }
        }
        res
    }
}

impl<T: AsyncWrite + Unpin, O: Unpin> AsyncWrite for ReadTap<T, O> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[derive(Default)]
    struct Seen(Vec<u8>, usize);

    impl Observe for Seen {
        fn observe(&mut self, bytes: &[u8]) {
            self.0.extend_from_slice(bytes);
            self.1 += 1;
        }
    }

    #[tokio::test]
    async fn reads_pass_unchanged_and_are_seen_once_writes_pass_through() {
        let (mut far, near) = tokio::io::duplex(64);
        let mut tap = ReadTap::new(near, Seen::default());
        far.write_all(b"hello ").await.expect("write");
        far.write_all(b"world").await.expect("write");
        drop(far.shutdown().await);
        let mut got = Vec::new();
        let mut buf = [0u8; 4];
        loop {
            let n = tap.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"hello world");
        assert_eq!(tap.observer.0, b"hello world", "every byte seen, in order");
        assert!(tap.observer.1 >= 3, "one look per read, never an empty one");
        tap.write_all(b"back").await.expect("write through");
        let mut inner = tap.into_inner();
        inner.flush().await.expect("flush");
    }
}
