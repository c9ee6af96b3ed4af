//! Decompression of the metering copy (stub).
