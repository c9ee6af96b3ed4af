//! The comparison from production traffic (`GET /api/compare`): finished
//! requests in, per (route, model) side; within cells of prompt-size class
//! × load class, medians of repeated windows with their spread out, and
//! whether two sides are like with like. See docs/COMPARING.md.

pub mod classes;

pub use self::classes::LoadClasses;
