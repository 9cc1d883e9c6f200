//! Arbitrary sequences of writes, seals, reads and finishes under a tiny memory limit.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The buffer's own fuzz logic (feature test-utils), shared with the stable replay test.
    let root = tempfile::tempdir().expect("temp dir");
    arrow_shards::fuzz::state_machine(data, root.path());
});
