//! Fuzz target: arbitrary bytes through the metered path (`meter::body::Meter`:
//! decompression, parser, tally); see `fuzz/src/meter.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    tokentap_fuzz::meter::fuzz_one(input);
});
