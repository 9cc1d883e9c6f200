//! Integration tests of `arrow-shards-spill`.

mod common;
mod corruption;
mod faults;
mod lifecycle;
mod many_partitions;
mod property;
mod round_trip;
