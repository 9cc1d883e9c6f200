//! Arbitrary sequences of writes, seals, reads and finishes under a tiny memory limit.
#![no_main]

// The buffer's test logic, shared with the stable replay test in arrow-shards' suite.
#[path = "../../crates/arrow-shards/tests/it/fuzz_state_machine.rs"]
mod fuzz_state_machine;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzz_state_machine::state_machine(data);
});
