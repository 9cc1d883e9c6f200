//! Integration tests of `arrow-shards-spill`.

mod common;
mod round_trip;
