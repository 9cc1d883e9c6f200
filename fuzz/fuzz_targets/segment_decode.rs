//! Untrusted bytes as a spill run file, read through the `SegmentRef`s of a real run.
#![no_main]

#[path = "../../crates/arrow-shards/tests/it/fuzz_logic.rs"]
#[allow(dead_code)]
mod fuzz_logic;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

static TARGET: OnceLock<fuzz_logic::DecodeTarget> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let target = TARGET.get_or_init(fuzz_logic::DecodeTarget::new);
    target.run(data);
});
