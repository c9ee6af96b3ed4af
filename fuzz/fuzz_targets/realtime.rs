//! Fuzz target: arbitrary WebSocket sessions through
//! `providers::realtime::RealtimeParser`; see `fuzz/src/realtime.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    tokentap_fuzz::realtime::fuzz_one(input);
});
