//! Fuzz target: arbitrary TOML text through `config::from_toml`; see
//! `fuzz/src/config.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    tokentap_fuzz::config::fuzz_one(input);
});
