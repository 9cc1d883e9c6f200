//! Load: 8 writers and 2 readers that seal and read partitions while the writers go on, under
//! a 4 MiB limit. Every accepted row must come back exactly once, in its producer's order;
//! writers refused by a sealed partition take their batch back and write it elsewhere.
//!
//! `load_1gib` moves 1 GiB and is `#[ignore]`d: in a debug build on the 2-core CI machine it
//! takes minutes, so CI runs it in release:
//! `cargo test --release -p arrow-shards --test it load::load_1gib -- --ignored`.
//! `load_small` runs the same code over 64 MiB in every `cargo test`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_shards::{Error, ShardBuffer};
use arrow_shards_memory::sizing::batch_memory_size;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::harness::watchdog;

const WRITERS: i64 = 8;
const READERS: usize = 2;
const PARTITIONS: u32 = 64;
const ROWS: i64 = 8192;
const LIMIT: usize = 4 << 20;
const SEGMENT: usize = 1 << 20;

fn payload(producer: i64, seq: i64) -> i64 {
    seq.wrapping_mul(0x9e37_79b9).wrapping_add(producer)
}

fn batch(producer: i64, first: i64) -> RecordBatch {
    let seqs = first..first + ROWS;
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "producer",
            Arc::new(Int64Array::from(vec![producer; ROWS as usize])),
        ),
        ("seq", Arc::new(Int64Array::from_iter_values(seqs.clone()))),
        (
            "a",
            Arc::new(Int64Array::from_iter_values(
                seqs.clone().map(|s| payload(producer, s)),
            )),
        ),
        (
            "b",
            Arc::new(Int64Array::from_iter_values(seqs.clone().map(|s| s ^ 0x55))),
        ),
        (
            "c",
            Arc::new(Int64Array::from_iter_values(seqs.clone().map(|s| -s))),
        ),
        (
            "d",
            Arc::new(Int64Array::from_iter_values(seqs.map(|s| s * 3))),
        ),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

/// Rows per (producer, partition).
type Counts = HashMap<(i64, u32), i64>;

/// Reads one partition, checking on the fly that each producer's rows continue its sequence.
fn read_checked(buffer: &ShardBuffer, p: u32, counts: &Mutex<Counts>) -> u64 {
    let mut next: HashMap<i64, i64> = HashMap::new();
    let mut bytes = 0u64;
    for item in buffer.read(p).unwrap() {
        let b = item.unwrap();
        bytes += b.num_rows() as u64 * 48;
        let producers = b.column(0).as_primitive::<Int64Type>().values();
        let seqs = b.column(1).as_primitive::<Int64Type>().values();
        let a = b.column(2).as_primitive::<Int64Type>().values();
        for i in 0..b.num_rows() {
            let expected = next.entry(producers[i]).or_default();
            assert_eq!(
                seqs[i], *expected,
                "partition {p}, producer {}",
                producers[i]
            );
            assert_eq!(
                a[i],
                payload(producers[i], seqs[i]),
                "partition {p}: payload"
            );
            *expected += 1;
        }
    }
    let mut counts = counts.lock().unwrap();
    for (producer, n) in next {
        assert!(
            counts.insert((producer, p), n).is_none(),
            "partition {p} read twice"
        );
    }
    bytes
}

fn run(total_bytes: u64) {
    let root = tempfile::tempdir().unwrap();
    let schema = batch(0, 0).schema();
    let batch_size = batch_memory_size(&batch(0, 0));
    let buffer = ShardBuffer::builder(schema, PARTITIONS)
        .with_memory_limit(LIMIT)
        .with_spill_dir(root.path())
        .with_spill_segment_bytes(SEGMENT)
        .with_max_spill_round_bytes(LIMIT / 2)
        .build()
        .unwrap();
    let per_writer = (total_bytes / (ROWS as u64 * 48) / WRITERS as u64).max(1);
    let total_batches = per_writer * WRITERS as u64;
    let written = AtomicU64::new(0);
    let writers_done = AtomicBool::new(false);
    let read: Mutex<Counts> = Mutex::new(HashMap::new());
    let next_partition = AtomicUsize::new(0);
    let sealed_early = AtomicUsize::new(0);
    let start = Instant::now();
    let accepted: Counts = std::thread::scope(|s| {
        for _ in 0..READERS {
            let (buffer, written, done, read, next, sealed_early) = (
                &buffer,
                &written,
                &writers_done,
                &read,
                &next_partition,
                &sealed_early,
            );
            s.spawn(move || {
                // while writers run, seal and read one partition per 1/96 of the batches (so
                // about two thirds of them, leaving the writers somewhere to go); then the rest
                loop {
                    let claimed = next.load(Ordering::Acquire);
                    if claimed >= PARTITIONS as usize {
                        return;
                    }
                    let writing = !done.load(Ordering::Acquire);
                    let due = written.load(Ordering::Acquire) * 96 / total_batches;
                    if writing && (claimed as u64 >= due || claimed >= 42) {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    if next
                        .compare_exchange(claimed, claimed + 1, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        continue;
                    }
                    let p = claimed as u32;
                    if writing {
                        buffer.seal(p).unwrap();
                        sealed_early.fetch_add(1, Ordering::Relaxed);
                    }
                    read_checked(buffer, p, read);
                }
            });
        }
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (buffer, written) = (&buffer, &written);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(w as u64);
                    let mut seq: HashMap<u32, i64> = HashMap::new();
                    for _ in 0..per_writer {
                        loop {
                            let p = rng.random_range(0..PARTITIONS);
                            let next = seq.entry(p).or_default();
                            match buffer.write_blocking(p, batch(w, *next)) {
                                Ok(()) => {
                                    *next += ROWS;
                                    break;
                                }
                                Err(e) => {
                                    assert!(matches!(e.error(), Error::Sealed { .. }), "{e}");
                                    assert_eq!(e.into_batch(), batch(w, *next));
                                }
                            }
                        }
                        written.fetch_add(1, Ordering::AcqRel);
                    }
                    seq.into_iter()
                        .filter(|(_, n)| *n > 0)
                        .map(|(p, n)| ((w, p), n))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let accepted = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        buffer.finish().unwrap();
        writers_done.store(true, Ordering::Release);
        accepted
    });
    let read = read.into_inner().unwrap();
    let nonzero: Counts = read.into_iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(nonzero, accepted, "rows per producer and partition");
    let peak = buffer.memory_pool().peak();
    let bound = LIMIT + READERS * (SEGMENT + batch_size);
    assert!(peak <= bound, "peak {peak} > {bound}");
    let m = buffer.close().unwrap();
    assert_eq!(m.rows_written, total_batches * ROWS as u64);
    assert_eq!(m.rows_read, m.rows_written);
    assert!(m.bytes_spilled > 0);
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
    eprintln!(
        "load: {} MiB in {} batches, {} partitions sealed and read while writing, {} MiB \
         spilled, peak {} KiB, {:?}",
        m.bytes_written >> 20,
        m.batches_written,
        sealed_early.load(Ordering::Relaxed),
        m.bytes_spilled >> 20,
        peak >> 10,
        start.elapsed()
    );
}

#[test]
fn load_small() {
    watchdog("load 64 MiB", Duration::from_secs(600), || run(64 << 20));
}

#[test]
#[ignore = "1 GiB: minutes in a debug build; CI runs it with --release (see module docs)"]
fn load_1gib() {
    watchdog("load 1 GiB", Duration::from_secs(1800), || run(1 << 30));
}
