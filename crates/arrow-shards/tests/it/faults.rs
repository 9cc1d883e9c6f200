//! Randomized fault injection at the buffer level: many shuffles under memory pressure, each
//! with a random `FaultPlan` (file create, open, write, read and remove failing at random
//! points, once or from then on, with ENOSPC or EIO), writers and a concurrent reader.
//!
//! Every case checks the guarantee of `docs/reliability.md`: no panic, no hang (watchdog);
//! every batch is either accepted or handed back in a `WriteError`; every accepted row is read
//! back exactly once in its producer's order, or its partition's read ends in an error that
//! names a file, and the rows handed out before it are a per-producer prefix (the rest is
//! *reported*); the pool is empty and no file is left after close.
//!
//! `ARROW_SHARDS_FAULT_CASES=n` runs more cases (default 48); a failure prints its seed.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io;
use std::sync::Mutex;
use std::time::Duration;

use arrow_shards::{Error, ShardBuffer};
use arrow_shards_spill::{FaultPlan, FsOp, SpillError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{Written, batch, schema};
use crate::harness::{ReadOutcome, Tally, check_outcome, entries, read_all, spill_error, watchdog};

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

const OPS: [FsOp; 5] = [
    FsOp::CreateFile,
    FsOp::Open,
    FsOp::Write,
    FsOp::Read,
    FsOp::Remove,
];

/// A random plan of one to three rules, and a description for failure messages.
fn random_plan(rng: &mut StdRng) -> (FaultPlan, String) {
    let mut plan = FaultPlan::new();
    let mut text = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        let op = OPS[rng.random_range(0..OPS.len())];
        let nth = rng.random_range(1..=30);
        let repeat = rng.random_bool(0.5);
        let full = rng.random_bool(0.5);
        let error: fn() -> io::Error = if full { enospc } else { eio };
        plan = if repeat {
            plan.fail_from(op, nth, error)
        } else {
            plan.fail_nth(op, nth, error)
        };
        text.push(format!(
            "{op:?} #{nth}{} {}",
            if repeat { "+" } else { "" },
            if full { "ENOSPC" } else { "EIO" }
        ));
    }
    (plan, text.join(", "))
}

/// What one case came to, summed over cases for the report.
#[derive(Debug, Default, Clone, Copy)]
struct Summary {
    written_rows: usize,
    returned_rows: usize,
    tally: Tally,
    failed_reads: usize,
    spill_failed: bool,
    close_retried: bool,
}

fn run_case(seed: u64) -> Summary {
    let mut rng = StdRng::seed_from_u64(seed);
    let root = tempfile::tempdir().unwrap();
    let limit = rng.random_range(16usize << 10..256 << 10);
    let partitions = rng.random_range(1u32..=16);
    let writers = rng.random_range(1usize..=4);
    let batches = rng.random_range(5usize..=30);
    let max_rows = rng.random_range(1usize..=1500);
    let with_reader = rng.random_bool(0.5);
    let schema = schema(&[rng.random_range(0..8), 1]);
    let buffer = ShardBuffer::builder(schema.clone(), partitions)
        .with_memory_limit(limit)
        .with_spill_dir(root.path())
        .with_max_spill_round_bytes(limit / 2 + 1)
        .with_spill_segment_bytes(limit / 6 + 1)
        .with_read_batch_rows([0, 1000][rng.random_range(0..2)])
        .build()
        .unwrap();
    let (plan, description) = random_plan(&mut rng);
    assert!(buffer.set_spill_fault_plan(plan));
    let context = format!("seed {seed}: faults [{description}]");

    let outcomes: Mutex<HashMap<u32, ReadOutcome>> = Mutex::new(HashMap::new());
    let writers_done = std::sync::atomic::AtomicUsize::new(0);
    let (accepted, returned_rows) = std::thread::scope(|s| {
        if with_reader {
            let (buffer, outcomes, done) = (&buffer, &outcomes, &writers_done);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ 0x7ead);
                while done.load(std::sync::atomic::Ordering::Acquire) < writers {
                    let p = rng.random_range(0..partitions);
                    buffer.seal(p).unwrap();
                    // only this thread reads while the writers run
                    if let Entry::Vacant(slot) = outcomes.lock().unwrap().entry(p) {
                        slot.insert(read_all(buffer, p));
                    }
                    std::thread::yield_now();
                }
            });
        }
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (buffer, schema, done, context) = (&buffer, &schema, &writers_done, &context);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(w as u64 + 1));
                    let mut accepted = Written::new();
                    let mut returned = 0;
                    let mut seq: HashMap<u32, i64> = HashMap::new();
                    for _ in 0..batches {
                        let p = rng.random_range(0..partitions);
                        let rows = rng.random_range(1..=max_rows);
                        let next = seq.entry(p).or_default();
                        let b = batch(schema, &mut rng, w as i64, *next, rows);
                        match buffer.write_blocking(p, b.clone()) {
                            Ok(()) => {
                                *next += rows as i64;
                                accepted.entry((w as i64, p)).or_default().push(b);
                            }
                            Err(e) => {
                                match e.error() {
                                    Error::Spill(cause) => assert!(
                                        matches!(
                                            **cause,
                                            SpillError::DiskFull { .. } | SpillError::Io { .. }
                                        ),
                                        "{context}: {e}"
                                    ),
                                    Error::Sealed { .. } => {}
                                    other => panic!("{context}: unexpected refusal {other}"),
                                }
                                assert_eq!(e.into_batch(), b, "{context}: batch handed back");
                                returned += rows;
                            }
                        }
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                    (accepted, returned)
                })
            })
            .collect();
        let mut all = Written::new();
        let mut returned = 0;
        for h in handles {
            let (accepted, r) = h.join().unwrap();
            all.extend(accepted);
            returned += r;
        }
        (all, returned)
    });

    buffer.finish().unwrap();
    let mut outcomes = outcomes.into_inner().unwrap();
    for p in 0..partitions {
        if let Entry::Vacant(slot) = outcomes.entry(p) {
            slot.insert(read_all(&buffer, p));
        }
    }
    let mut summary = Summary {
        returned_rows,
        ..Summary::default()
    };
    for p in 0..partitions {
        let outcome = &outcomes[&p];
        if let Some(error) = &outcome.error {
            summary.failed_reads += 1;
            let cause = spill_error(error)
                .unwrap_or_else(|| panic!("{context}: read error is not a SpillError: {error}"));
            let message = error.to_string();
            match cause {
                SpillError::Io { path, .. } => {
                    assert!(message.contains(&path.display().to_string()), "{message}")
                }
                SpillError::DiskFull { dir, .. } => {
                    assert!(message.contains(&dir.display().to_string()), "{message}")
                }
                other => panic!("{context}: unexpected read error {other}"),
            }
        }
        let tally = check_outcome(p, outcome, &accepted);
        summary.tally.delivered += tally.delivered;
        summary.tally.reported += tally.reported;
    }
    let accepted_rows: usize = accepted.values().flatten().map(|b| b.num_rows()).sum();
    summary.written_rows = accepted_rows + returned_rows;
    assert_eq!(
        summary.tally.delivered + summary.tally.reported,
        accepted_rows,
        "{context}"
    );

    summary.spill_failed = buffer.metrics().spill_error.is_some();
    let closed = buffer.close();
    if root_has_files(&root) {
        // only an injected Remove failure may keep the directory; close says so, naming it
        let error = closed.expect_err("files left but close reported success");
        let dir = buffer.spill_dir().unwrap().display().to_string();
        assert!(error.to_string().contains(&dir), "{context}: {error}");
        // the disk heals: a second close removes it
        buffer.set_spill_fault_plan(FaultPlan::new());
        let _ = buffer.close();
        summary.close_retried = true;
    } else if let Err(e) = closed {
        // the spill failure, reported again; anything else (an accounting mismatch) is a bug
        assert!(
            summary.spill_failed && matches!(e, Error::Spill(_)),
            "{context}: close failed: {e}"
        );
    }
    assert!(
        !root_has_files(&root),
        "{context}: left {:?}",
        entries(root.path())
    );
    assert_eq!(buffer.memory_pool().reserved(), 0, "{context}: leaked");
    summary
}

fn root_has_files(root: &tempfile::TempDir) -> bool {
    !entries(root.path()).is_empty()
}

#[test]
fn random_faults_under_memory_pressure_lose_nothing() {
    let cases: u64 = std::env::var("ARROW_SHARDS_FAULT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let mut total = Summary::default();
    let (mut spill_failures, mut read_failures, mut retried) = (0, 0, 0);
    for case in 0..cases {
        let seed = 0xfa17_0000 + case;
        let summary = watchdog(
            &format!("fault case seed {seed}"),
            Duration::from_secs(120),
            move || run_case(seed),
        );
        total.written_rows += summary.written_rows;
        total.returned_rows += summary.returned_rows;
        total.tally.delivered += summary.tally.delivered;
        total.tally.reported += summary.tally.reported;
        spill_failures += usize::from(summary.spill_failed);
        read_failures += summary.failed_reads;
        retried += usize::from(summary.close_retried);
    }
    eprintln!(
        "fault injection: {cases} cases, {} rows written: {} read back, {} reported by a read \
         error, {} handed back by a refused write; {spill_failures} cases with a failed spill, \
         {read_failures} failed partition reads, {retried} closes retried after a failed remove",
        total.written_rows, total.tally.delivered, total.tally.reported, total.returned_rows
    );
    assert_eq!(
        total.tally.delivered + total.tally.reported + total.returned_rows,
        total.written_rows
    );
    // the plans must actually bite, or this test proves nothing
    assert!(spill_failures > 0 && read_failures > 0, "no fault fired");
}
