//! Decompression of the metering copy: compressed body chunks in, plain
//! bytes out, one chunk at a time.
//!
//! Only the side copy that feeds the parser is decompressed; the client
//! still receives the upstream's compressed bytes untouched. Output per call
//! is capped so a decompression bomb costs an error, not memory.

use std::fmt;
use std::io::{self, Write};

use brotli_decompressor::DecompressorWriter;
use flate2::write::{DeflateDecoder, MultiGzDecoder, ZlibDecoder};
use zstd::stream::raw::{DParameter, Decoder as ZstdDecoder, InBuffer, Operation, OutBuffer};

/// Largest decompressed output a single `feed` may produce.
pub const MAX_OUTPUT_PER_CALL: usize = 64 << 20;

/// Largest zstd window accepted (8 MiB, the limit RFC 9659 sets for HTTP).
const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// Brotli's internal output buffer.
const BROTLI_BUFFER: usize = 16 << 10;

/// Output reserved per zstd step.
const ZSTD_STEP: usize = 32 << 10;

/// Why the metering copy could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    /// The `Content-Encoding` is unknown, or stacks several codings.
    #[error("unsupported content-encoding {0:?}")]
    Unsupported(String),
    /// The bytes are not a valid stream of the declared coding.
    #[error("corrupt {encoding} stream")]
    Corrupt {
        /// The coding name (`gzip`, `br`, ...).
        encoding: &'static str,
    },
    /// One chunk expanded past [`MAX_OUTPUT_PER_CALL`].
    #[error("{encoding} chunk expands past the {limit}-byte limit")]
    TooLarge {
        /// The coding name (`gzip`, `br`, ...).
        encoding: &'static str,
        /// Most output bytes one chunk may expand to.
        limit: usize,
    },
}

/// An incremental decoder for one response body's `Content-Encoding`.
pub enum Decompressor {
    /// `gzip`, possibly several members.
    Gzip(Box<MultiGzDecoder<Sink>>),
    /// `deflate`, zlib-wrapped or raw.
    Deflate(Box<Deflate>),
    /// `br` (Brotli).
    Brotli(Box<DecompressorWriter<Sink>>),
    /// `zstd`.
    Zstd(Box<Zstd>),
}

/// A zstd stream decoder and its per-call output limit.
pub struct Zstd {
    dec: ZstdDecoder<'static>,
    limit: usize,
}

/// `deflate` as sent in practice: zlib-wrapped per RFC 9110, or raw
/// deflate from servers that got it wrong. The first two bytes decide.
pub enum Deflate {
    /// Fewer than two bytes seen so far (and the output limit).
    Sniff(Vec<u8>, usize),
    /// zlib-wrapped deflate, as RFC 9110 says.
    Zlib(ZlibDecoder<Sink>),
    /// Raw deflate without the zlib wrapper.
    Raw(DeflateDecoder<Sink>),
}

/// The writer the flate2 and brotli decoders write into: a buffer that
/// refuses to grow past the per-call limit.
pub struct Sink {
    buf: Vec<u8>,
    limit: usize,
    /// Set when a write was refused for size.
    overflowed: bool,
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            self.overflowed = true;
            return Err(io::Error::other("decompressed chunk too large"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Sink {
    fn new(limit: usize) -> Sink {
        Sink {
            buf: Vec::new(),
            limit,
            overflowed: false,
        }
    }
}

impl fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Decompressor")
            .field(&self.encoding())
            .finish()
    }
}

impl Decompressor {
    /// The decoder for a `Content-Encoding` value: `Ok(None)` for none or
    /// `identity`, an error for unknown or stacked codings.
    pub fn new(content_encoding: &str) -> Result<Option<Decompressor>, DecompressError> {
        Decompressor::with_limit(content_encoding, MAX_OUTPUT_PER_CALL)
    }

    /// Like [`Decompressor::new`], with a different cap on the output of
    /// one `feed`.
    pub fn with_limit(
        content_encoding: &str,
        limit: usize,
    ) -> Result<Option<Decompressor>, DecompressError> {
        let mut codings = content_encoding
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"));
        let Some(coding) = codings.next() else {
            return Ok(None);
        };
        let unsupported = || DecompressError::Unsupported(content_encoding.trim().to_owned());
        if codings.next().is_some() {
            return Err(unsupported());
        }
        let sink = || Sink::new(limit);
        let dec = if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            Decompressor::Gzip(Box::new(MultiGzDecoder::new(sink())))
        } else if coding.eq_ignore_ascii_case("deflate") {
            Decompressor::Deflate(Box::new(Deflate::Sniff(Vec::with_capacity(2), limit)))
        } else if coding.eq_ignore_ascii_case("br") {
            Decompressor::Brotli(Box::new(DecompressorWriter::new(sink(), BROTLI_BUFFER)))
        } else if coding.eq_ignore_ascii_case("zstd") {
            let corrupt = |_| DecompressError::Corrupt { encoding: "zstd" };
            let mut dec = ZstdDecoder::new().map_err(corrupt)?;
            dec.set_parameter(DParameter::WindowLogMax(ZSTD_WINDOW_LOG_MAX))
                .map_err(corrupt)?;
            Decompressor::Zstd(Box::new(Zstd { dec, limit }))
        } else {
            return Err(unsupported());
        };
        Ok(Some(dec))
    }

    /// The coding's name, for errors and logs.
    pub fn encoding(&self) -> &'static str {
        match self {
            Decompressor::Gzip(_) => "gzip",
            Decompressor::Deflate(_) => "deflate",
            Decompressor::Brotli(_) => "br",
            Decompressor::Zstd(_) => "zstd",
        }
    }

    /// Decompress one chunk, appending whatever output it completes to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), DecompressError> {
        let encoding = self.encoding();
        match self {
            Decompressor::Gzip(dec) => write_through(&mut **dec, input, out, encoding),
            Decompressor::Brotli(dec) => write_through(&mut **dec, input, out, encoding),
            Decompressor::Deflate(dec) => dec.feed(input, out),
            Decompressor::Zstd(dec) => dec.feed(input, out),
        }
    }
}

/// The decoders that write into a [`Sink`].
trait SinkWriter: Write {
    fn sink(&mut self) -> &mut Sink;
}

/// Each decoder hands back the sink it writes into.
macro_rules! sink_writers {
    ($($decoder:ty),+) => {
        $(impl SinkWriter for $decoder {
            fn sink(&mut self) -> &mut Sink {
                self.get_mut()
            }
        })+
    };
}

sink_writers!(
    MultiGzDecoder<Sink>,
    ZlibDecoder<Sink>,
    DeflateDecoder<Sink>,
    DecompressorWriter<Sink>
);

/// Push `input` through a writer-style decoder and move its output to `out`.
fn write_through<W: SinkWriter>(
    dec: &mut W,
    input: &[u8],
    out: &mut Vec<u8>,
    encoding: &'static str,
) -> Result<(), DecompressError> {
    let result = dec.write_all(input).and_then(|()| dec.flush());
    let sink = dec.sink();
    if sink.overflowed {
        return Err(DecompressError::TooLarge {
            encoding,
            limit: sink.limit,
        });
    }
    result.map_err(|_| DecompressError::Corrupt { encoding })?;
    if out.is_empty() {
        std::mem::swap(out, &mut sink.buf);
    } else {
        out.extend_from_slice(&sink.buf);
    }
    sink.buf.clear();
    Ok(())
}

impl Deflate {
    fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), DecompressError> {
        if let Deflate::Sniff(head, limit) = self {
            let limit = *limit;
            let take = input.len().min(2 - head.len());
            head.extend_from_slice(&input[..take]);
            input = &input[take..];
            let [cmf, flg] = head[..] else {
                return Ok(());
            };
            let head = [cmf, flg];
            let sink = Sink::new(limit);
            // RFC 1950: CM = 8, CINFO <= 7, and CMF·256 + FLG divisible by 31.
            let zlib = cmf & 0x0f == 8 && cmf >> 4 <= 7 && u16::from_be_bytes(head) % 31 == 0;
            *self = if zlib {
                Deflate::Zlib(ZlibDecoder::new(sink))
            } else {
                Deflate::Raw(DeflateDecoder::new(sink))
            };
            self.feed(&head, out)?;
        }
        match self {
            Deflate::Sniff(..) => Ok(()),
            Deflate::Zlib(dec) => write_through(dec, input, out, "deflate"),
            Deflate::Raw(dec) => write_through(dec, input, out, "deflate"),
        }
    }
}

impl Zstd {
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), DecompressError> {
        let start = out.len();
        let mut input = InBuffer::around(input);
        loop {
            if out.len() - start > self.limit {
                return Err(DecompressError::TooLarge {
                    encoding: "zstd",
                    limit: self.limit,
                });
            }
            out.reserve(ZSTD_STEP);
            let (in_before, pos) = (input.pos(), out.len());
            let mut output = OutBuffer::around_pos(out, pos);
            self.dec
                .run(&mut input, &mut output)
                .map_err(|_| DecompressError::Corrupt { encoding: "zstd" })?;
            // With input used up and room left over, the decoder has flushed
            // everything it can; no progress at all means it never will.
            let room_left = output.pos() < output.capacity();
            let stalled = input.pos() == in_before && output.pos() == pos;
            if (input.pos() == input.src.len() && room_left) || stalled {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = include_bytes!("../../tests/fixtures/openai/chat_stream_usage.sse");

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).expect("gzip");
        enc.finish().expect("gzip")
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).expect("zlib");
        enc.finish().expect("zlib")
    }

    fn raw_deflate(data: &[u8]) -> Vec<u8> {
        let mut enc =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).expect("deflate");
        enc.finish().expect("deflate")
    }

    fn brotli(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut enc = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
            enc.write_all(data).expect("brotli");
        }
        out
    }

    fn zstd(data: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(data, 3).expect("zstd")
    }

    /// Feed `pieces` through a fresh decoder for `encoding`.
    fn run(encoding: &str, pieces: &[&[u8]]) -> Result<Vec<u8>, DecompressError> {
        let mut dec = Decompressor::new(encoding)?.expect("a decoder");
        let (mut all, mut out) = (Vec::new(), Vec::new());
        for piece in pieces {
            out.clear();
            dec.feed(piece, &mut out)?;
            all.extend_from_slice(&out);
        }
        Ok(all)
    }

    fn codecs() -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("gzip", gzip(BODY)),
            ("deflate", zlib(BODY)),
            ("deflate", raw_deflate(BODY)),
            ("br", brotli(BODY)),
            ("zstd", zstd(BODY)),
        ]
    }

    #[test]
    fn every_codec_round_trips_at_every_split() {
        for (encoding, packed) in codecs() {
            assert_eq!(
                run(encoding, &[&packed]).as_deref(),
                Ok(BODY),
                "{encoding}: whole"
            );
            for at in 0..=packed.len() {
                let (a, b) = packed.split_at(at);
                let got = run(encoding, &[a, b]);
                assert_eq!(got.as_deref(), Ok(BODY), "{encoding}: split at {at}");
            }
            let bytes: Vec<&[u8]> = packed.chunks(1).collect();
            assert_eq!(
                run(encoding, &bytes).as_deref(),
                Ok(BODY),
                "{encoding}: bytewise"
            );
        }
    }

    #[test]
    fn output_is_not_held_back() {
        // A flushed prefix must come out before the stream ends, or the
        // meter would see every token at the end.
        /// What a decoder gives for `encoding`'s flushed but unfinished
        /// stream of `enc`, whose written bytes `written` returns.
        fn flushed<W: Write>(encoding: &str, mut enc: W, written: fn(&W) -> &Vec<u8>) -> Vec<u8> {
            enc.write_all(b"data: first\n\n").expect(encoding);
            enc.flush().expect("flush");
            let mut dec = Decompressor::new(encoding)
                .expect(encoding)
                .expect("a decoder");
            let mut out = Vec::new();
            dec.feed(written(&enc), &mut out).expect("valid prefix");
            out
        }
        let gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        assert_eq!(flushed("gzip", gzip, |e| e.get_ref()), b"data: first\n\n");
        let zstd = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("zstd");
        assert_eq!(flushed("zstd", zstd, |e| e.get_ref()), b"data: first\n\n");
    }

    #[test]
    fn encoding_names() {
        assert!(matches!(Decompressor::new(""), Ok(None)));
        assert!(matches!(Decompressor::new("identity"), Ok(None)));
        assert!(matches!(Decompressor::new(" Identity "), Ok(None)));
        for (name, canonical) in [
            ("GZIP", "gzip"),
            ("x-gzip", "gzip"),
            ("br", "br"),
            ("zstd", "zstd"),
        ] {
            let dec = Decompressor::new(name).expect("known").expect("a decoder");
            assert_eq!(dec.encoding(), canonical);
        }
        assert_eq!(
            Decompressor::new("gzip, br").map(|_| ()),
            Err(DecompressError::Unsupported("gzip, br".into())),
            "stacked codings are refused"
        );
        assert_eq!(
            Decompressor::new("compress").map(|_| ()),
            Err(DecompressError::Unsupported("compress".into()))
        );
        assert!(matches!(Decompressor::new("gzip, identity"), Ok(Some(_))));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let garbage: Vec<u8> = (0u32..4096)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for encoding in ["gzip", "br", "zstd"] {
            assert!(
                run(encoding, &[&garbage]).is_err(),
                "{encoding}: garbage accepted"
            );
            let bytes: Vec<&[u8]> = garbage.chunks(7).collect();
            assert!(
                run(encoding, &bytes).is_err(),
                "{encoding}: garbage accepted in pieces"
            );
        }
        // Deflate garbage may or may not parse as raw deflate; it must not panic.
        let _ = run("deflate", &[&garbage]);
        // Corrupting a valid stream is caught.
        for (encoding, mut packed) in codecs() {
            let mid = packed.len() / 2;
            packed[mid..].iter_mut().for_each(|b| *b ^= 0x5a);
            let _ = run(encoding, &[&packed]);
        }
    }

    #[test]
    fn truncated_stream_yields_a_prefix() {
        for (encoding, packed) in codecs() {
            let got = run(encoding, &[&packed[..packed.len() / 2]]).expect("a valid prefix");
            assert!(
                BODY.starts_with(&got),
                "{encoding}: output is a prefix of the body"
            );
        }
    }

    #[test]
    fn expansion_is_capped() {
        let zeros = vec![0u8; 4 << 20];
        for (encoding, packed) in [
            ("gzip", gzip(&zeros)),
            ("deflate", zlib(&zeros)),
            ("br", brotli(&zeros)),
            ("zstd", zstd(&zeros)),
        ] {
            let mut dec = Decompressor::with_limit(encoding, 1 << 20)
                .expect("known")
                .expect("dec");
            let mut out = Vec::new();
            assert_eq!(
                dec.feed(&packed, &mut out),
                Err(DecompressError::TooLarge {
                    encoding,
                    limit: 1 << 20
                }),
                "{encoding}: bomb not capped"
            );
        }
    }

    #[test]
    fn decompressor_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<Decompressor>();
    }
}
