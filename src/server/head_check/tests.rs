use super::*;

const LIMITS: Limits = Limits {
    max_head_bytes: 4096,
    max_headers: 10,
};

/// Feed `stream` split at `at` and return the verdicts of `n` requests.
fn verdicts_split(stream: &[u8], at: usize, n: usize) -> Vec<Result<(), Refusal>> {
    let v = Arc::new(Verdicts::default());
    let mut t = Tracker::new(LIMITS, v.clone());
    t.feed(&stream[..at]);
    t.feed(&stream[at..]);
    (0..n).map(|_| v.next()).collect()
}

/// The same verdicts at every split offset.
fn verdicts(stream: &[u8], n: usize) -> Vec<Result<(), Refusal>> {
    let whole = verdicts_split(stream, stream.len(), n);
    for at in 0..stream.len() {
        assert_eq!(
            verdicts_split(stream, at, n),
            whole,
            "split at {at} of {:?}",
            String::from_utf8_lossy(stream)
        );
    }
    whole
}

#[test]
fn keep_alive_requests_with_every_framing_pass() {
    let stream = b"\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n\
        POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
        POST /c HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n\
        5;ext=1\r\nGET /\r\n10 \r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n\
        GET /d HTTP/1.1\r\n\r\n";
    assert_eq!(
        verdicts(stream, 5),
        [Ok(()), Ok(()), Ok(()), Ok(()), Err(Refusal::Unverified)]
    );
}

#[test]
fn a_smuggled_head_inside_a_body_is_not_a_head() {
    let inner = "GET /b HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n";
    let stream = format!(
        "POST /a HTTP/1.1\r\nContent-Length: {}\r\n\r\n{inner}GET /c HTTP/1.1\r\n\r\n",
        inner.len()
    );
    assert_eq!(verdicts(stream.as_bytes(), 2), [Ok(()), Ok(())]);
}

#[test]
fn ambiguous_framing_is_refused() {
    let cases: [(&[u8], Refusal); 9] = [
        (
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            Refusal::LengthAndChunked,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            Refusal::LengthAndChunked,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
            Refusal::DuplicateContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n",
            Refusal::BadContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            Refusal::TransferEncoding,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            Refusal::TransferEncoding,
        ),
        (
            b"GET / HTTP/1.1\r\nX-A: 1\r\n  folded\r\n\r\n",
            Refusal::ObsFold,
        ),
        (b"GET / HTTP/1.1\nHost: x\n\n", Refusal::BareLf),
        (
            b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n",
            Refusal::Connect,
        ),
    ];
    for (head, want) in cases {
        assert_eq!(
            verdicts(head, 1),
            [Err(want)],
            "{:?}",
            String::from_utf8_lossy(head)
        );
    }
}

#[test]
fn limits_are_enforced() {
    let many: String = (0..11).map(|i| format!("X-{i}: v\r\n")).collect();
    let head = format!("GET / HTTP/1.1\r\n{many}\r\n");
    assert_eq!(verdicts(head.as_bytes(), 1), [Err(Refusal::TooManyHeaders)]);
    let sized = |n: usize| format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(n));
    let exact = sized(4096 - sized(0).len());
    assert_eq!(exact.len(), LIMITS.max_head_bytes);
    assert_eq!(
        verdicts(exact.as_bytes(), 1),
        [Ok(())],
        "a head of exactly the limit"
    );
    let over = sized(4096 - sized(0).len() + 1);
    assert_eq!(verdicts(over.as_bytes(), 1), [Err(Refusal::HeadTooLarge)]);
}

#[test]
fn http2_preface_stops_tracking() {
    let v = Arc::new(Verdicts::default());
    let mut t = Tracker::new(LIMITS, v.clone());
    t.feed(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04");
    assert_eq!(t.state, State::Off);
    assert_eq!(v.refused.load(Ordering::Acquire), 0, "no refusal recorded");
}

/// The tracker as it was before heads were checked in place (copied
/// and split into lines byte by byte): the reference the differential
/// tests hold the current one to. Verdicts only.
mod reference {
    use super::super::{Chunk, Framing, Limits, Refusal, State, chunk_step, decimal};

    pub(super) struct Old {
        state: Option<State>,
        line: usize,
        head: Vec<u8>,
        limits: Limits,
        pub(super) passed: u64,
        pub(super) refused: Option<Refusal>,
    }

    impl Old {
        pub(super) fn new(limits: Limits) -> Old {
            Old {
                state: None,
                line: 0,
                head: Vec::new(),
                limits,
                passed: 0,
                refused: None,
            }
        }

        pub(super) fn feed(&mut self, mut bytes: &[u8]) {
            while !bytes.is_empty() {
                let used = match self.state {
                    Some(State::Off) => return,
                    None | Some(State::Head) => self.head_bytes(bytes),
                    Some(State::Fixed(rem)) => {
                        let n = rem.min(bytes.len() as u64);
                        self.state = match rem - n {
                            0 => None,
                            left => Some(State::Fixed(left)),
                        };
                        n as usize
                    }
                    Some(State::Chunked(c)) => {
                        let (next, used) = chunk_step(c, bytes);
                        self.state = Some(next);
                        used
                    }
                };
                bytes = &bytes[used..];
            }
        }

        fn head_bytes(&mut self, bytes: &[u8]) -> usize {
            let mut used = 0;
            if self.head.is_empty() {
                used = bytes
                    .iter()
                    .position(|b| !matches!(b, b'\r' | b'\n'))
                    .unwrap_or(bytes.len());
            }
            while used < bytes.len() {
                let rest = &bytes[used..];
                let (seg, ends_line) = match memchr::memchr(b'\n', rest) {
                    Some(nl) => (&rest[..=nl], true),
                    None => (rest, false),
                };
                if self.head.len() + seg.len() > self.limits.max_head_bytes {
                    self.refuse(Refusal::HeadTooLarge);
                    return bytes.len();
                }
                self.head.extend_from_slice(seg);
                used += seg.len();
                self.line += seg.iter().filter(|b| !matches!(b, b'\r' | b'\n')).count();
                if ends_line && self.line == 0 {
                    let verdict = inspect(&self.head, self.limits);
                    self.head.clear();
                    match verdict {
                        Err(r) => self.refuse(r),
                        Ok(framing) => {
                            self.state = match framing {
                                Framing::Http2 => Some(State::Off),
                                Framing::Empty | Framing::Fixed(0) => None,
                                Framing::Fixed(n) => Some(State::Fixed(n)),
                                Framing::Chunked => Some(State::Chunked(Chunk::Start)),
                            };
                            if framing != Framing::Http2 {
                                self.passed += 1;
                            }
                        }
                    }
                    return used;
                }
                if ends_line {
                    self.line = 0;
                }
            }
            self.state = Some(State::Head);
            bytes.len()
        }

        fn refuse(&mut self, why: Refusal) {
            self.refused = Some(why);
            self.state = Some(State::Off);
        }
    }

    pub(super) fn inspect(head: &[u8], limits: Limits) -> Result<Framing, Refusal> {
        for (i, _) in head.iter().enumerate().filter(|(_, b)| **b == b'\n') {
            if i == 0 || head[i - 1] != b'\r' {
                return Err(Refusal::BareLf);
            }
        }
        let mut lines = head
            .split(|b| *b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .filter(|l| !l.is_empty());
        let request_line = lines.next().unwrap_or_default();
        if request_line == b"PRI * HTTP/2.0" {
            return Ok(Framing::Http2);
        }
        if request_line.starts_with(b"CONNECT ") {
            return Err(Refusal::Connect);
        }
        let (mut fields, mut lengths, mut codings) = (0usize, Vec::new(), Vec::new());
        for line in lines {
            if line.starts_with(b" ") || line.starts_with(b"\t") {
                return Err(Refusal::ObsFold);
            }
            fields += 1;
            let Some(colon) = line.iter().position(|b| *b == b':') else {
                continue;
            };
            let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
            if name.eq_ignore_ascii_case(b"content-length") {
                lengths.push(value);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                codings.push(value);
            }
        }
        if fields > limits.max_headers {
            return Err(Refusal::TooManyHeaders);
        }
        match (lengths.as_slice(), codings.as_slice()) {
            ([], []) => Ok(Framing::Empty),
            ([_, _, ..], _) => Err(Refusal::DuplicateContentLength),
            ([_], [_, ..]) => Err(Refusal::LengthAndChunked),
            ([len], []) => decimal(len).map(Framing::Fixed),
            ([], [te]) if te.eq_ignore_ascii_case(b"chunked") => Ok(Framing::Chunked),
            ([], _) => Err(Refusal::TransferEncoding),
        }
    }
}

/// What a tracker said after `reads`: heads passed, and the refusal.
fn outcome_of(reads: &[&[u8]], limits: Limits) -> (u64, Option<Refusal>) {
    let v = Arc::new(Verdicts::default());
    let mut t = Tracker::new(limits, v.clone());
    reads.iter().for_each(|r| t.feed(r));
    let passed = v.passed.load(Ordering::Acquire);
    (passed, Refusal::from_u8(v.refused.load(Ordering::Acquire)))
}

fn reference_of(reads: &[&[u8]], limits: Limits) -> (u64, Option<Refusal>) {
    let mut old = reference::Old::new(limits);
    reads.iter().for_each(|r| old.feed(r));
    (old.passed, old.refused)
}

/// Connection streams that exercise every verdict: keep-alive with
/// each framing, every refusal, CRs inside lines, lines of only CRs,
/// heads near the size limit, empty lines before a request line.
fn streams() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = vec![
        b"\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
          POST /c HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n5;ext=1\r\nGET /\r\n0\r\nX-T: 1\r\n\r\n\
          GET /d HTTP/1.1\r\n\r\n"
            .to_vec(),
        b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\r\nGET / HTTP/1.1\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nX: a\r\n\r\r\r\n".to_vec(),
        b"GET / HTTP/1.1\r\n\r\r\nX: 1\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nX: 1\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nX: 1\r\n\n".to_vec(),
        b"\n\r\n\rGET / HTTP/1.1\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nNoColon\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\n\tX: 1\r\nContent-Length: 1\nY\r\n\r\n".to_vec(),
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(),
        b"PRI * HTTP/2.0\n\n".to_vec(),
        b"CONNECT x:1 HTTP/1.1\r\n X: 1\r\n\r\n".to_vec(),
        b"POST / HTTP/1.1\r\ncontent-length:  007 \r\n\r\n1234567GET / HTTP/1.1\r\n\r\n".to_vec(),
        b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n".to_vec(),
        b"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n".to_vec(),
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n".to_vec(),
        b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nHost: x".to_vec(),
    ];
    let many: String = (0..11).map(|i| format!("X-{i}: v\r\n")).collect();
    out.push(format!("GET / HTTP/1.1\r\n{many}\r\n").into_bytes());
    let sized = |n: usize| format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(n));
    let base = sized(0).len();
    for n in [
        LIMITS.max_head_bytes - base - 1,
        LIMITS.max_head_bytes - base,
        LIMITS.max_head_bytes - base + 1,
    ] {
        out.push(format!("{}GET / HTTP/1.1\r\n\r\n", sized(n)).into_bytes());
    }
    out.push(format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(5000)).into_bytes());
    out
}

/// Byte edits of `data` that matter to the tracker (seeded).
fn edits(data: &[u8], rng: &mut fastrand::Rng) -> Vec<u8> {
    crate::providers::scan::differential::edited(data, b"\r\n: \tCc0;", 3, rng)
}

#[test]
fn verdicts_match_the_copying_tracker_at_every_split() {
    let mut rng = fastrand::Rng::with_seed(17);
    let mut cases = streams();
    for s in streams() {
        let n = if s.len() < 300 { 40 } else { 4 };
        cases.extend((0..n).map(|_| edits(&s, &mut rng)));
    }
    for limits in [
        LIMITS,
        Limits {
            max_head_bytes: 40,
            max_headers: 2,
        },
    ] {
        for s in &cases {
            let want = reference_of(&[s], limits);
            assert_eq!(
                outcome_of(&[s], limits),
                want,
                "{:?}",
                String::from_utf8_lossy(s)
            );
            // Every split of the short streams; of the long ones (near
            // the size limit), every 7th and those around the limit.
            let splits = (0..=s.len()).filter(|at| {
                s.len() < 300 || at % 7 == 0 || at.abs_diff(LIMITS.max_head_bytes) < 3
            });
            for at in splits {
                let reads: [&[u8]; 2] = [&s[..at], &s[at..]];
                assert_eq!(
                    reference_of(&reads, limits),
                    want,
                    "reference, split at {at}"
                );
                assert_eq!(
                    outcome_of(&reads, limits),
                    want,
                    "split at {at} of {:?}",
                    String::from_utf8_lossy(s)
                );
            }
            let bytes: Vec<&[u8]> = s.chunks(1).collect();
            assert_eq!(outcome_of(&bytes, limits), want, "byte by byte");
            let thirds: Vec<&[u8]> = s.chunks(s.len().div_ceil(3).max(1)).collect();
            assert_eq!(outcome_of(&thirds, limits), want, "in three reads");
        }
    }
}

#[test]
fn inspect_matches_the_line_splitting_reference() {
    let mut rng = fastrand::Rng::with_seed(18);
    for s in streams() {
        for m in std::iter::once(s.clone()).chain((0..200).map(|_| edits(&s, &mut rng))) {
            // Heads as the tracker hands them over: from the first
            // byte that is not CR or LF to the end of the empty line.
            let Some(start) = m.iter().position(|b| !matches!(b, b'\r' | b'\n')) else {
                continue;
            };
            let Some(end) = head_end(&m[start..], 0) else {
                continue;
            };
            let head = &m[start..start + end];
            for limits in [
                LIMITS,
                Limits {
                    max_head_bytes: 4096,
                    max_headers: 1,
                },
            ] {
                assert_eq!(
                    inspect(head, limits),
                    reference::inspect(head, limits),
                    "{:?}",
                    String::from_utf8_lossy(head)
                );
            }
        }
    }
}

#[test]
fn a_head_within_one_read_is_not_copied() {
    let v = Arc::new(Verdicts::default());
    let mut t = Tracker::new(LIMITS, v.clone());
    t.feed(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nhiGET / HTTP/1.1\r\nHo");
    assert_eq!(v.passed.load(Ordering::Acquire), 1);
    assert_eq!(
        t.head, b"GET / HTTP/1.1\r\nHo",
        "only the split head is kept"
    );
    t.feed(b"st: x\r\n\r\n");
    assert_eq!(v.passed.load(Ordering::Acquire), 2);
    assert!(t.head.is_empty() && t.state == State::Head);
}

#[test]
fn a_broken_chunked_body_fails_closed() {
    let stream = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    assert_eq!(verdicts(stream, 2), [Ok(()), Err(Refusal::Unverified)]);
}
