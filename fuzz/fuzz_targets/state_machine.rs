//! Arbitrary sequences of writes, seals, reads and finishes under a tiny memory limit.
#![no_main]

#[path = "../../crates/arrow-shards/tests/it/fuzz_logic.rs"]
#[allow(dead_code)]
mod fuzz_logic;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzz_logic::state_machine(data);
});
