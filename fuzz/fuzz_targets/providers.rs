//! Fuzz target: arbitrary bytes through `providers::Parser` for a fuzzer-chosen
//! provider kind, operation and content type; see `fuzz/src/providers.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    tokentap_fuzz::providers::fuzz_one(input);
});
