//! Config harness: TOML text in, assertions about `config::from_toml` out.
//!
//! Invariants:
//! - nothing panics: any text is a validated `Config` or a `ConfigError`;
//! - an error displays as a non-empty message, and the key it names, if
//!   any, is not empty;
//! - a valid config's `redacted_toml()` loads again, and rendering that
//!   gives the same text (the redacted form is a fixed point).

use tokentap::config::from_toml;

/// The invariants for one config text.
pub fn check(text: &str) {
    match from_toml(text) {
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an error with no message: {e:?}");
            assert!(
                e.key().is_none_or(|k| !k.is_empty()),
                "an error naming an empty key: {e:?}"
            );
        }
        Ok(config) => {
            let shown = config.redacted_toml();
            let back = from_toml(&shown).unwrap_or_else(|e| {
                panic!("the redacted config must load again: {e}\n--- input\n{text}\n--- redacted\n{shown}")
            });
            assert_eq!(
                back.redacted_toml(),
                shown,
                "the redacted config must render the same after a reload\n--- input\n{text}"
            );
        }
    }
}

/// The fuzz entry point: UTF-8 text only (TOML is UTF-8; other bytes are
/// refused before parsing, by the file reader).
pub fn fuzz_one(input: &[u8]) {
    if let Ok(text) = std::str::from_utf8(input) {
        check(text);
    }
}
