//! Integration tests for arrow-shards-merge: one binary, one module per concern.

mod common;
mod limit;
mod memory;
mod segments;
