//! Fuzz target: one direction of a relayed WebSocket through
//! `framing::websocket::WsDecoder` (sender, deflate and cap from the first
//! input byte); see `fuzz/src/websocket.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    tokentap_fuzz::websocket::fuzz_one(input);
});
