//! Fuzz target: arbitrary request bodies through `sniff::sniff`; the replay
//! must reproduce them exactly; see `fuzz/src/sniff.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    tokentap_fuzz::sniff::fuzz_one(input);
});
