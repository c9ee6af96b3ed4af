//! sniff
