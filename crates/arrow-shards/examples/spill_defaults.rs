//! Measures how the spill settings (threshold/target, bytes per round) change the cost of a
//! shuffle that does not fit in memory, to choose the defaults. Run:
//!
//! ```text
//! cargo run --release -p arrow-shards --example spill_defaults
//! ```
//!
//! Data: 64 Mi rows (16-byte key+value + a 16-24 byte string) split into 64 partitions, shards of
//! 1,000 rows, written by 2 threads into a buffer limited to a quarter of the data. Each setting
//! is run 3 times; the table shows the median seconds and, beside it, the ratio to the cheapest
//! setting measured in the same run.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_shards::ShardBuffer;
use arrow_shards_memory::sizing::batch_memory_size;

const PARTITIONS: u32 = 64;
const SHARD_ROWS: usize = 1000;
const SHARDS: usize = 16_384;

fn shards() -> Vec<RecordBatch> {
    (0..SHARDS)
        .map(|i| {
            let base = (i * SHARD_ROWS) as i64;
            let k: ArrayRef =
                Arc::new(Int64Array::from_iter_values(base..base + SHARD_ROWS as i64));
            let v: ArrayRef = Arc::new(Float64Array::from_iter_values(
                (0..SHARD_ROWS).map(|j| j as f64),
            ));
            let s: ArrayRef = Arc::new(StringArray::from_iter_values(
                (0..SHARD_ROWS).map(|j| format!("comment number {:08}", base as usize + j)),
            ));
            RecordBatch::try_from_iter([("k", k), ("v", v), ("s", s)]).unwrap()
        })
        .collect()
}

struct Outcome {
    seconds: f64,
    write_seconds: f64,
    spilled: u64,
    runs: u64,
}

fn run(shards: &[RecordBatch], limit: usize, threshold: f64, target: f64, round: usize) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(shards[0].schema(), PARTITIONS)
        .with_memory_limit(limit)
        .with_spill_threshold(threshold)
        .with_spill_target(target)
        .with_max_spill_round_bytes(round)
        .with_spill_dir(dir.path())
        .with_read_batch_rows(0)
        .build()
        .unwrap();
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..2 {
            let buffer = buffer.clone();
            s.spawn(move || {
                for (i, shard) in shards.iter().enumerate().skip(t).step_by(2) {
                    buffer
                        .write_blocking((i % PARTITIONS as usize) as u32, shard.clone())
                        .unwrap();
                }
            });
        }
    });
    let write_seconds = start.elapsed().as_secs_f64();
    buffer.finish().unwrap();
    let mut rows = 0;
    for p in 0..PARTITIONS {
        for batch in buffer.read(p).unwrap() {
            rows += batch.unwrap().num_rows();
        }
    }
    assert_eq!(rows, SHARDS * SHARD_ROWS);
    let seconds = start.elapsed().as_secs_f64();
    let m = buffer.close().unwrap();
    Outcome {
        seconds,
        write_seconds,
        spilled: m.bytes_spilled,
        runs: m.spill_runs,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let shards = shards();
    let total: usize = shards.iter().map(batch_memory_size).sum();
    let limit = total / 4;
    println!(
        "data {} MiB, limit {} MiB, {PARTITIONS} partitions, {SHARDS} shards",
        total >> 20,
        limit >> 20
    );
    let settings: Vec<(f64, f64, usize)> = vec![
        (0.95, 0.9, 64 << 20),
        (0.9, 0.8, 64 << 20),
        (0.8, 0.6, 64 << 20),
        (0.7, 0.4, 64 << 20),
        (0.5, 0.25, 64 << 20),
        (0.8, 0.6, 8 << 20),
        (0.8, 0.6, 256 << 20),
    ];
    let mut rows = Vec::new();
    for &(threshold, target, round) in &settings {
        let outcomes: Vec<Outcome> = (0..3)
            .map(|_| run(&shards, limit, threshold, target, round))
            .collect();
        let seconds = median(outcomes.iter().map(|o| o.seconds).collect());
        let write = median(outcomes.iter().map(|o| o.write_seconds).collect());
        let spilled = outcomes[0].spilled;
        let runs = outcomes[0].runs;
        rows.push((threshold, target, round, seconds, write, spilled, runs));
    }
    let best = rows.iter().map(|r| r.3).fold(f64::INFINITY, f64::min);
    println!(
        "| threshold | target | round MiB | total s (median of 3) | vs best | write s | spilled MiB | runs |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (threshold, target, round, seconds, write, spilled, runs) in rows {
        println!(
            "| {threshold} | {target} | {} | {seconds:.2} | {:.2}x | {write:.2} | {} | {runs} |",
            round >> 20,
            seconds / best,
            spilled >> 20
        );
    }
}
