//! What the pool is charged against what the process really allocates, for shards of 1, 8 and
//! 8192 rows, with compaction on and off (issue: small shards). A test binary of its own: it
//! counts every allocation with a global allocator.
//!
//! The bytes the buffer holds are measured as the allocator's net bytes (allocated minus
//! freed) between before the writes and after them, with every input batch dropped, so only the
//! buffer's own memory is left. Tests run one at a time (a mutex), so nothing else allocates
//! meanwhile.

// Built with `--no-default-features --features arrow_59`, the arrow 59 crates go by the
// usual names (as in the library's lib.rs; docs/arrow-versions.md).
#[cfg(feature = "arrow_59")]
extern crate arrow_array_59 as arrow_array;
#[cfg(feature = "arrow_59")]
extern crate arrow_buffer_59 as arrow_buffer;
#[cfg(feature = "arrow_59")]
extern crate arrow_data_59 as arrow_data;
#[cfg(feature = "arrow_59")]
extern crate arrow_schema_59 as arrow_schema;
#[cfg(feature = "arrow_59")]
extern crate arrow_select_59 as arrow_select;

use std::alloc::System;
use std::sync::{Arc, Mutex};

use arrow_array::{ArrayRef, Date32Array, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::SchemaRef;
use arrow_shards::ShardBuffer;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// 16 columns shaped like TPC-H lineitem: 8 numbers, 2 dates, 6 strings.
fn shard(rows: usize, seed: usize) -> RecordBatch {
    let mut columns: Vec<(String, ArrayRef)> = Vec::new();
    for c in 0..6 {
        let a = Int64Array::from_iter_values((0..rows).map(|i| (i * 7 + seed + c) as i64));
        columns.push((format!("i{c}"), Arc::new(a)));
    }
    for c in 0..2 {
        let a = Float64Array::from_iter_values((0..rows).map(|i| (i + seed + c) as f64 * 0.5));
        columns.push((format!("f{c}"), Arc::new(a)));
    }
    for c in 0..2 {
        let a = Date32Array::from_iter_values((0..rows).map(|i| (i + seed + c) as i32));
        columns.push((format!("d{c}"), Arc::new(a)));
    }
    for c in 0..6 {
        let a = StringArray::from_iter_values(
            (0..rows).map(|i| "x".repeat(1 + (i * 13 + seed + c) % (4 + 8 * c))),
        );
        columns.push((format!("s{c}"), Arc::new(a)));
    }
    RecordBatch::try_from_iter(columns).unwrap()
}

/// Writes `total_rows` in shards of `shard_rows` over `partitions` partitions; returns the net
/// bytes allocated meanwhile and what the buffer says it holds.
fn measure(shard_rows: usize, total_rows: usize, partitions: u32, compact: bool) -> (f64, f64) {
    let schema: SchemaRef = shard(1, 0).schema();
    let buffer = ShardBuffer::builder(schema, partitions)
        .with_compact_target_rows(if compact { 8192 } else { 0 })
        .build()
        .unwrap();
    // warm up the allocator's and the buffer's lazily made state
    buffer.write_blocking(0, shard(0, 0)).unwrap();
    let region = Region::new(GLOBAL);
    let mut written = 0;
    let mut n = 0;
    while written < total_rows {
        let batch = shard(shard_rows, n);
        buffer
            .write_blocking((n % partitions as usize) as u32, batch)
            .unwrap();
        written += shard_rows;
        n += 1;
    }
    let stats = region.change();
    // reallocations are already in both counts, as the bytes they added or gave back
    let real = stats.bytes_allocated as f64 - stats.bytes_deallocated as f64;
    let reserved = buffer.metrics().reserved as f64;
    drop(buffer);
    (real, reserved)
}

fn assert_within_20_percent(shard_rows: usize, total_rows: usize, partitions: u32, compact: bool) {
    // held until the assertion is done: a failing test's panic allocates a lot (a backtrace)
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (real, reserved) = measure(shard_rows, total_rows, partitions, compact);
    let ratio = reserved / real;
    eprintln!(
        "{shard_rows}-row shards, {partitions} partitions, compaction {compact}: \
         real {real:.0} B, reserved {reserved:.0} B, reserved/real {ratio:.3}"
    );
    assert!(
        (0.8..=1.2).contains(&ratio),
        "{shard_rows}-row shards (compaction {compact}): reserved {reserved} vs really allocated \
         {real} (ratio {ratio:.3})"
    );
}

#[test]
fn one_row_shards() {
    assert_within_20_percent(1, 20_000, 64, true);
    assert_within_20_percent(1, 5_000, 64, false);
}

#[test]
fn eight_row_shards() {
    assert_within_20_percent(8, 80_000, 1024, true);
    assert_within_20_percent(8, 40_000, 64, false);
    // open batches cut at 8192 rows: stored batches made by compaction
    assert_within_20_percent(8, 80_000, 4, true);
}

#[test]
fn large_shards() {
    assert_within_20_percent(8192, 8192 * 12, 4, true);
    assert_within_20_percent(8192, 8192 * 12, 4, false);
}
