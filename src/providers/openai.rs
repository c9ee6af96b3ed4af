//! OpenAI (stub).
use crate::framing::Frame;
use super::{AdapterError, Event, Operation};
#[derive(Debug)]
pub struct OpenaiAdapter;
impl OpenaiAdapter {
    pub fn new(_op: Option<Operation>) -> Self { OpenaiAdapter }
    pub fn on_frame(&mut self, _f: Frame<'_>, _out: &mut dyn FnMut(Event<'_>)) -> Result<(), AdapterError> { Ok(()) }
}
