//! Integration tests of the buffer: one binary, one module per concern.

// Built with `--no-default-features --features arrow_59`, the arrow 59 crates go by the
// usual names (as in the library's lib.rs; docs/arrow-versions.md).
#[cfg(feature = "arrow_59")]
extern crate arrow_array_59 as arrow_array;
#[cfg(feature = "arrow_59")]
extern crate arrow_buffer_59 as arrow_buffer;
#[cfg(feature = "arrow_59")]
extern crate arrow_data_59 as arrow_data;
#[cfg(feature = "arrow_59")]
extern crate arrow_schema_59 as arrow_schema;
#[cfg(feature = "arrow_59")]
extern crate arrow_select_59 as arrow_select;

mod accounting;
mod common;
mod concurrency;
mod corruption;
mod crash;
mod dictionaries;
mod embedding;
mod errors;
mod exactly_once;
mod faults;
mod file_safety;
mod full_disk;
mod fuzz_replay;
mod harness;
mod load;
mod pressure;
mod read_budget;
mod schema_rule;
mod shared_pool;
mod shutdown;
mod small_budgets;
mod small_shards;
mod spill_tiers;
mod spilling;
mod subscribe;
mod waiting;
mod write_all;
