//! Untrusted bytes as the IPC payload of a validly framed and checksummed segment, so they reach
//! arrow-ipc's decoder behind the CRC32C (`arrow_shards_spill::fuzz::PayloadTarget`).
//!
//! The spill crate turns decoder panics into `Corrupt` errors with `catch_unwind`; libfuzzer-sys
//! would abort on them (its panic hook), so this target installs a hook that prints each new
//! panic location once instead. A panic that escapes the read still aborts the run: libfuzzer-sys
//! catches it around the target.
#![no_main]

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};

use arrow_shards_spill::fuzz::PayloadTarget;
use libfuzzer_sys::fuzz_target;

static TARGET: OnceLock<PayloadTarget> = OnceLock::new();
static PANICS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn init() -> PayloadTarget {
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let mut seen = PANICS.lock().unwrap_or_else(|e| e.into_inner());
        if seen.insert(at.clone()) {
            eprintln!("ipc_payload: panic #{} at {at}: {info}", seen.len());
        }
    }));
    PayloadTarget::new()
}

fuzz_target!(|data: &[u8]| {
    TARGET.get_or_init(init).run(data);
});
