//! Integration tests of the buffer: one binary, one module per concern.

mod accounting;
mod common;
mod concurrency;
mod corruption;
mod crash;
mod embedding;
mod errors;
mod exactly_once;
mod faults;
mod file_safety;
mod full_disk;
mod fuzz_replay;
mod fuzz_state_machine;
mod harness;
mod load;
mod pressure;
mod read_budget;
mod schema_rule;
mod shared_pool;
mod shutdown;
mod small_shards;
mod spilling;
mod waiting;
