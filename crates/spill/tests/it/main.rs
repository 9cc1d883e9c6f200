//! Integration tests of `arrow-shards-spill`.

// Built with `--no-default-features --features arrow_59`, the arrow 59 crates go by the
// usual names (as in the library's lib.rs; docs/arrow-versions.md).
#[cfg(feature = "arrow_59")]
extern crate arrow_array_59 as arrow_array;
#[cfg(feature = "arrow_59")]
extern crate arrow_buffer_59 as arrow_buffer;
#[cfg(feature = "arrow_59")]
extern crate arrow_data_59 as arrow_data;
#[cfg(feature = "arrow_59")]
extern crate arrow_ipc_59 as arrow_ipc;
#[cfg(feature = "arrow_59")]
extern crate arrow_schema_59 as arrow_schema;
#[cfg(feature = "arrow_59")]
extern crate arrow_select_59 as arrow_select;

mod common;
mod corruption;
mod faults;
mod format2;
mod lifecycle;
mod many_partitions;
mod object_store;
mod property;
mod quota;
mod round_trip;
