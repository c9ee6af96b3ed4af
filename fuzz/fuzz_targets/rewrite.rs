//! Fuzz target: arbitrary streams through `rewrite::UsageStripper` and bodies
//! through `rewrite::add_include_usage`; see `fuzz/src/rewrite.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    tokentap_fuzz::rewrite::fuzz_one(input);
});
