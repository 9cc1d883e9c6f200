//! Integration tests for arrow-shards-merge: one binary, one module per concern.

// Built with `--no-default-features --features arrow_59`, the arrow 59 crates go by the
// usual names (as in the library's lib.rs; docs/arrow-versions.md).
#[cfg(feature = "arrow_59")]
extern crate arrow_array_59 as arrow_array;
#[cfg(feature = "arrow_59")]
extern crate arrow_schema_59 as arrow_schema;
#[cfg(feature = "arrow_59")]
extern crate arrow_select_59 as arrow_select;

mod common;
mod limit;
mod memory;
mod segments;
mod slots;
