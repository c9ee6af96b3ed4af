//! Anthropic (stub).
use crate::framing::Frame;
use super::{AdapterError, Event};
#[derive(Debug)]
pub struct AnthropicAdapter;
impl AnthropicAdapter {
    pub fn new() -> Self { AnthropicAdapter }
    pub fn on_frame(&mut self, _f: Frame<'_>, _out: &mut dyn FnMut(Event<'_>)) -> Result<(), AdapterError> { Ok(()) }
}
