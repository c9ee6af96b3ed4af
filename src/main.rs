//! The `tokentap` binary: parse flags, load config, run until a signal.
fn main() {}
