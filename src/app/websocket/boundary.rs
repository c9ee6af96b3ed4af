//! Frame boundaries: the bytes relayed in one direction in; whether the
//! stream now stands between two WebSocket frames out. Reads only frame
//! headers (RFC 6455 §5.2), so tokentap can tell when a close frame of its
//! own (shutdown) would land cleanly. No payload is looked at.

/// Where the relayed stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Inside a frame header: `have` of its `need` bytes seen so far
    /// (`need` is 2 until the second byte says more).
    Header { have: u8, need: u8 },
    /// Inside a payload: this many bytes still to come.
    Payload(u64),
}

/// Follows frame headers in one direction of a WebSocket.
#[derive(Debug, Clone)]
pub(super) struct Boundary {
    state: State,
    head: [u8; 14],
}

impl Default for Boundary {
    fn default() -> Self {
        Boundary {
            state: State::Header { have: 0, need: 2 },
            head: [0; 14],
        }
    }
}

impl Boundary {
    /// Whether the bytes fed so far end exactly at the end of a frame.
    pub(super) fn at_boundary(&self) -> bool {
        self.state == State::Header { have: 0, need: 2 }
    }

    /// Follow `bytes`, the next bytes relayed in this direction.
    pub(super) fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match self.state {
                State::Payload(left) => {
                    let n = left.min(bytes.len() as u64);
                    bytes = &bytes[n as usize..];
                    self.state = match left - n {
                        0 => State::Header { have: 0, need: 2 },
                        rest => State::Payload(rest),
                    };
                }
                State::Header { have, need } => {
                    let take = usize::from(need - have).min(bytes.len());
                    let at = usize::from(have);
                    self.head[at..at + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    self.header_bytes(have + take as u8, need);
                }
            }
        }
    }

    /// `have` header bytes are in `head`: work out the header's length
    /// once the second byte is in, and the payload once all of it is.
    fn header_bytes(&mut self, have: u8, mut need: u8) {
        if have == 2 && need == 2 {
            let mask = if self.head[1] & 0x80 != 0 { 4 } else { 0 };
            need = 2
                + mask
                + match self.head[1] & 0x7f {
                    126 => 2,
                    127 => 8,
                    _ => 0,
                };
        }
        if have < need {
            self.state = State::Header { have, need };
            return;
        }
        let len = match self.head[1] & 0x7f {
            126 => u64::from(u16::from_be_bytes([self.head[2], self.head[3]])),
            127 => {
                let mut b = [0; 8];
                b.copy_from_slice(&self.head[2..10]);
                u64::from_be_bytes(b)
            }
            n => u64::from(n),
        };
        self.state = match len {
            0 => State::Header { have: 0, need: 2 },
            n => State::Payload(n),
        };
    }
}

/// A close frame with status 1001 (going away), as tokentap sends it to
/// both sides on shutdown; `mask` is set for frames towards the upstream
/// (a client's frames are masked, RFC 6455 §5.3).
pub(super) fn going_away(mask: Option<[u8; 4]>) -> Vec<u8> {
    let payload = 1001u16.to_be_bytes();
    match mask {
        None => vec![0x88, 0x02, payload[0], payload[1]],
        Some(m) => vec![
            0x88,
            0x82,
            m[0],
            m[1],
            m[2],
            m[3],
            payload[0] ^ m[0],
            payload[1] ^ m[1],
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload_len: usize, masked: bool) -> Vec<u8> {
        let mut f = vec![0x82];
        let m = if masked { 0x80 } else { 0 };
        match payload_len {
            n if n < 126 => f.push(m | n as u8),
            n if n <= 0xffff => {
                f.push(m | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(m | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        if masked {
            f.extend_from_slice(&[1, 2, 3, 4]);
        }
        f.extend(std::iter::repeat_n(7u8, payload_len));
        f
    }

    #[test]
    fn boundaries_are_found_at_every_split() {
        let mut stream = Vec::new();
        let mut ends = vec![0];
        for (len, masked) in [
            (0, false),
            (5, true),
            (125, false),
            (300, true),
            (70_000, false),
        ] {
            stream.extend(frame(len, masked));
            ends.push(stream.len());
        }
        for split in [1, 2, 3, 7, 13, 1000] {
            let mut b = Boundary::default();
            let mut fed = 0;
            for chunk in stream.chunks(split) {
                b.feed(chunk);
                fed += chunk.len();
                assert_eq!(
                    b.at_boundary(),
                    ends.contains(&fed),
                    "split {split}, after {fed} bytes"
                );
            }
        }
    }

    #[test]
    fn going_away_frames_unmask_to_1001() {
        assert_eq!(going_away(None), [0x88, 2, 0x03, 0xe9]);
        let masked = going_away(Some([9, 8, 7, 6]));
        assert_eq!(masked[1], 0x82, "mask bit and length 2");
        assert_eq!([masked[6] ^ 9, masked[7] ^ 8], [0x03, 0xe9]);
    }
}
