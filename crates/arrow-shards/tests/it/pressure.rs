//! The randomized memory-pressure matrix: limits from a few KiB to ample, 1..2000 partitions,
//! batches from 1 row to larger than the limit, 1..8 writers, and a reader that seals and reads
//! partitions while writers and the spiller are busy. Every batch is read back exactly once in
//! its producer's order or handed back in an error; the pool never holds more than the limit
//! plus one batch; nothing is spilled when everything fits; no file is left after close; no run
//! hangs (a watchdog fails it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_shards::{Error, ShardBuffer};
use arrow_shards_memory::sizing::batch_memory_size;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{Written, assert_partition, batch, schema};

#[derive(Debug, Clone)]
struct Case {
    limit: usize,
    partitions: u32,
    writers: usize,
    batches: usize,
    max_rows: usize,
    reader: bool,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            4usize << 10..64 << 10,
            64usize << 10..4 << 20,
            Just(1usize << 30)
        ],
        prop_oneof![1u32..8, 8u32..2000],
        1usize..=8,
        1usize..40,
        prop_oneof![1usize..4, 1usize..3000],
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(limit, partitions, writers, batches, max_rows, reader, seed)| Case {
                limit,
                partitions,
                writers,
                batches,
                max_rows,
                reader,
                seed,
            },
        )
}

fn run(case: &Case) {
    let root = tempfile::tempdir().unwrap();
    let schema = schema(&[1, 3]);
    let buffer = ShardBuffer::builder(schema.clone(), case.partitions)
        .with_memory_limit(case.limit)
        .with_spill_dir(root.path())
        .with_max_spill_round_bytes(case.limit / 2 + 1)
        .with_spill_segment_bytes(case.limit / 8 + 1)
        .build()
        .unwrap();
    let largest = Mutex::new(0usize);
    // every byte offered to the buffer, refused or not: a refused oversized batch is charged
    // while it is on its way to disk, so it counts towards the threshold too
    let offered = std::sync::atomic::AtomicUsize::new(0);
    let read: Mutex<HashMap<u32, RecordBatch>> = Mutex::new(HashMap::new());
    let writers_done = std::sync::atomic::AtomicUsize::new(0);
    let accepted = std::thread::scope(|s| {
        if case.reader {
            s.spawn(|| {
                let mut rng = StdRng::seed_from_u64(case.seed ^ 0xdead);
                while writers_done.load(std::sync::atomic::Ordering::Acquire) < case.writers {
                    let p = rng.random_range(0..case.partitions);
                    buffer.seal(p).unwrap();
                    if let Ok(reader) = buffer.read(p) {
                        read.lock().unwrap().insert(p, reader.concat().unwrap());
                    }
                    std::thread::yield_now();
                }
            });
        }
        let handles: Vec<_> = (0..case.writers)
            .map(|w| {
                let (buffer, schema, largest, done) = (&buffer, &schema, &largest, &writers_done);
                let offered = &offered;
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(case.seed.wrapping_add(w as u64));
                    let mut accepted = Written::new();
                    let mut seq: HashMap<u32, i64> = HashMap::new();
                    for _ in 0..case.batches {
                        let p = rng.random_range(0..case.partitions);
                        let rows = rng.random_range(1..=case.max_rows);
                        let next = seq.entry(p).or_default();
                        let b = batch(schema, &mut rng, w as i64, *next, rows);
                        {
                            let mut l = largest.lock().unwrap();
                            *l = (*l).max(batch_memory_size(&b));
                            // what the buffer charges for it: its memory plus the fixed
                            // overhead of a stored batch (docs/memory-accounting.md)
                            offered.fetch_add(
                                arrow_shards::batch_cost(&b),
                                std::sync::atomic::Ordering::Relaxed,
                            );
                        }
                        match buffer.write_blocking(p, b.clone()) {
                            Ok(()) => {
                                *next += rows as i64;
                                accepted.entry((w as i64, p)).or_default().push(b);
                            }
                            Err(e) => {
                                assert!(matches!(e.error(), Error::Sealed { .. }), "{e}");
                                assert_eq!(e.into_batch(), b, "refused batch handed back");
                            }
                        }
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                    accepted
                })
            })
            .collect();
        let mut all = Written::new();
        for h in handles {
            all.extend(h.join().unwrap());
        }
        all
    });
    buffer.finish().unwrap();
    let mut read = read.into_inner().unwrap();
    for p in 0..case.partitions {
        if let Ok(reader) = buffer.read(p) {
            assert!(
                read.insert(p, reader.concat().unwrap()).is_none(),
                "partition {p} read twice"
            );
        }
    }
    for p in 0..case.partitions {
        assert_partition(&read[&p], p, &accepted);
    }
    let peak = buffer.memory_pool().peak();
    let largest = largest.into_inner().unwrap();
    // the documented bound (docs/memory-accounting.md): the limit, plus one oversized batch on
    // its way to disk, plus the one segment the (single) active reader decodes
    let segment = (case.limit / 8 + 1).max(largest);
    let bound = case.limit + largest + segment;
    assert!(
        peak <= bound,
        "peak {peak} > limit {} + batch {largest} + segment {segment}",
        case.limit
    );

    let bytes = offered.into_inner();
    let metrics = buffer.close().unwrap();
    if bytes < case.limit * 8 / 10 {
        assert_eq!(
            metrics.bytes_spilled, 0,
            "everything fit: {bytes} of {}",
            case.limit
        );
    }
    assert_eq!(buffer.memory_pool().reserved(), 0);
    assert_eq!(
        std::fs::read_dir(root.path()).unwrap().count(),
        0,
        "files left after close"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn every_batch_once_in_order_under_memory_pressure(case in case()) {
        let (tx, rx) = mpsc::channel();
        let c = case.clone();
        let worker = std::thread::spawn(move || {
            run(&c);
            let _ = tx.send(());
        });
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(()) => worker.join().unwrap(),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // the run panicked: surface its message
                if let Err(panic) = worker.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung: {case:?}"),
        }
    }
}
