//! Capped maps: hash maps and sets for the per-request lookups of
//! telemetry in, hashed with Fx seeded once per process (not SipHash) out.
//!
//! Each request looks up a handful of small keys (a route, a capped model
//! and tenant, a dozen attributes): SipHash spent about 3.5k instructions
//! a request on them, Fx a fraction of that. Fx is not built to resist
//! chosen collisions, so it is used only for maps that are capped: every
//! key is a value a cardinality guard admitted (or the guard's own set of
//! at most `cap` values), so the worst a peer can plant is one bounded
//! chain of `cap` entries.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher as _;

use rustc_hash::FxSeededState;

/// A capped map keyed by telemetry values.
pub(crate) type FxMap<K, V> = HashMap<K, V, FxSeededState>;
/// A capped set of telemetry values.
pub(crate) type FxSet<K> = HashSet<K, FxSeededState>;

/// A hasher seeded from the process's random state.
fn seeded() -> FxSeededState {
    let seed = std::collections::hash_map::RandomState::new().hash_one(0u8);
    FxSeededState::with_seed(seed as usize)
}

/// An empty capped map.
pub(crate) fn map<K, V>() -> FxMap<K, V> {
    HashMap::with_hasher(seeded())
}

/// An empty capped set.
pub(crate) fn set<K>() -> FxSet<K> {
    HashSet::with_hasher(seeded())
}
