//! Cost of writing small shards: N 10-row slices of a 16-column batch into 1024 partitions.
//! Meant for instruction counts, which do not depend on the machine's load:
//!
//! ```text
//! cargo build --release -p arrow-shards --example write_cost
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/write_cost 100000
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/write_cost 200000
//! ```
//! The difference of the two totals divided by 100,000 is the instructions per write.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_shards::ShardBuffer;

fn input() -> RecordBatch {
    let rows: i32 = 8192;
    let mut columns: Vec<(String, ArrayRef)> = Vec::new();
    for c in 0..16 {
        let array: ArrayRef = match c % 4 {
            0 => Arc::new(Int64Array::from_iter_values(0..i64::from(rows))),
            1 => Arc::new(Int32Array::from_iter_values(0..rows)),
            2 => Arc::new(Float64Array::from_iter_values((0..rows).map(f64::from))),
            _ => Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| format!("s{i}")),
            )),
        };
        columns.push((format!("c{c}"), array));
    }
    RecordBatch::try_from_iter(columns).unwrap()
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let input = input();
    let shards: Vec<RecordBatch> = (0..819).map(|i| input.slice(i * 10, 10)).collect();
    let buffer = ShardBuffer::builder(input.schema(), 1024).build().unwrap();
    let start = Instant::now();
    for i in 0..n {
        buffer
            .write_blocking((i % 1024) as u32, shards[i % shards.len()].clone())
            .unwrap();
    }
    let elapsed = start.elapsed();
    println!(
        "{n} writes, {:.0} ns per write (wall clock, noisy)",
        elapsed.as_nanos() as f64 / n as f64
    );
}
