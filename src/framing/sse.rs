//! SSE framing (stub; replaced by the full decoder).
use super::{Frame, FramingError};
/// Incremental `text/event-stream` decoder.
#[derive(Debug)]
pub struct SseDecoder { _max: usize }
impl SseDecoder {
    pub fn new(max: usize) -> Self { SseDecoder { _max: max } }
    pub fn feed(&mut self, _c: &[u8], _on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> { Ok(()) }
    pub fn finish(&mut self, _on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> { Ok(()) }
}
