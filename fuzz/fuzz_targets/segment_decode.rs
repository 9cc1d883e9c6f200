//! Untrusted bytes as a spill run file, read segment by segment with the index of a real run
//! (`arrow_shards_spill::fuzz::DecodeTarget`, straight through the I/O-free decoder).
#![no_main]

use std::sync::OnceLock;

use arrow_shards_spill::fuzz::DecodeTarget;
use libfuzzer_sys::fuzz_target;

static TARGET: OnceLock<DecodeTarget> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    TARGET.get_or_init(DecodeTarget::new).run(data);
});
