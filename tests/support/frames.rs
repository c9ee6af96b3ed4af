//! Recorded fixture bodies in, the frames a scripted upstream sends one by
//! one out: SSE events, NDJSON lines, AWS eventstream messages. Every byte
//! of the body lands in exactly one frame, in order.

/// An SSE body's events, each with its blank-line end (`\n\n` or
/// `\r\n\r\n`); a tail without one is the last frame.
pub(crate) fn sse(body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < body.len() {
        let end = if body[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if body[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        };
        match end {
            Some(e) => {
                out.push(body[start..e].to_vec());
                start = e;
                i = e;
            }
            None => i += 1,
        }
    }
    if start < body.len() {
        out.push(body[start..].to_vec());
    }
    out
}

/// An NDJSON body's lines (each keeps its `\n`).
pub(crate) fn ndjson(body: &[u8]) -> Vec<Vec<u8>> {
    body.split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// An AWS eventstream body's messages (each starts with its length).
pub(crate) fn eventstream(body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = body;
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        out.push(rest[..len].to_vec());
        rest = &rest[len..];
    }
    out
}
