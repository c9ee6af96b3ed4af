//! Shared by the allocation tests (`tests/alloc_*.rs`), which include it
//! and `facts.rs` alone (`#[path]`): the whole `support` module would
//! allocate in the background of a test that counts allocations.

#![allow(dead_code, reason = "each test uses what it needs")]

/// Allocations (blocks) made while `f` runs under dhat's testing
/// allocator; each test file holds one test, so nothing else allocates
/// meanwhile but the test harness, which waits.
pub(crate) fn allocations(f: impl FnOnce()) -> u64 {
    let before = dhat::HeapStats::get().total_blocks;
    f();
    dhat::HeapStats::get().total_blocks - before
}
