//! Fuzz target: arbitrary bytes into the eventstream decoder, split at a fuzzer-chosen
//! point; must not panic and must equal the whole-input decode.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    tokentap_fuzz::fuzz_one(tokentap_fuzz::Target::Eventstream, input);
});
