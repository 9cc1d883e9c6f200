//! The input: TPC-H lineitem generated in memory, cut into chunks of
//! `--chunk-rows` and hash-partitioned by `l_orderkey` into one shard per partition per chunk.
//! All of it happens before any timed case starts; generation and partitioning are timed and
//! reported on their own.

use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::{ArrowError, DataType, SchemaRef};
use arrow_select::take::take_record_batch;
use arrow_shards::RowsByPartition;
use arrow_shards_memory::sizing::batch_memory_size;
use arrow_shards_spill::compact_views;
use tpchgen::generators::LineItemGenerator;
use tpchgen_arrow::LineItemArrow;

use crate::Result;

/// Where the rows come from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// `tpchgen` lineitem at this scale factor (about 6M rows per 1.0).
    Tpch { scale: f64 },
}

/// The partitioned input, as the buffer receives it.
#[derive(Debug)]
pub(crate) struct Input {
    pub(crate) schema: SchemaRef,
    pub(crate) partitions: u32,
    /// Per input chunk, its shards in partition order (empty shards left out); empty in
    /// scatter mode.
    pub(crate) chunks: Vec<Vec<(u32, RecordBatch)>>,
    /// Scatter mode: the input chunks whole, each with its rows' partitions.
    pub(crate) whole: Vec<(RecordBatch, Vec<u32>)>,
    pub(crate) rows: u64,
    /// Sum of `batch_memory_size` over the shards: the data's in-memory size. Shards share no
    /// allocation (see [`partition`]), so this is also what they keep alive together.
    pub(crate) bytes: u64,
    /// Sum of `batch_memory_size` over the input chunks before partitioning.
    pub(crate) chunk_bytes: u64,
    pub(crate) shards: u64,
    /// Seconds to generate or read the chunks.
    pub(crate) load_secs: f64,
    /// Seconds to hash-partition the chunks.
    pub(crate) partition_secs: f64,
    /// Sum of `l_orderkey` over all rows: a cheap check that reads return every row intact.
    pub(crate) key_sum: i128,
}

impl Input {
    /// Loads and partitions the input.
    pub(crate) fn prepare(
        source: &Source,
        chunk_rows: usize,
        partitions: u32,
        scatter: bool,
    ) -> Result<Self> {
        let started = Instant::now();
        let (schema, chunks) = load(source, chunk_rows)?;
        let load_secs = started.elapsed().as_secs_f64();
        let chunk_bytes = chunks.iter().map(|b| batch_memory_size(b) as u64).sum();
        let key_sum = chunks.iter().map(key_sum).sum();
        if scatter {
            let started = Instant::now();
            let whole: Vec<_> = chunks
                .into_iter()
                .map(|chunk| {
                    let ids = partition_ids(&chunk, partitions);
                    (chunk, ids)
                })
                .collect();
            return Ok(Self {
                schema,
                partitions,
                chunks: Vec::new(),
                rows: whole.iter().map(|(b, _)| b.num_rows() as u64).sum(),
                bytes: chunk_bytes,
                chunk_bytes,
                shards: 0,
                load_secs,
                partition_secs: started.elapsed().as_secs_f64(),
                key_sum,
                whole,
            });
        }

        let started = Instant::now();
        let mut out = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            out.push(partition(&chunk, partitions)?);
            // the chunk is dropped here: only the shards stay in memory
        }
        let partition_secs = started.elapsed().as_secs_f64();

        let shards = out.iter().map(|c| c.len() as u64).sum();
        let rows = out.iter().flatten().map(|(_, b)| b.num_rows() as u64).sum();
        let bytes = out
            .iter()
            .flatten()
            .map(|(_, b)| batch_memory_size(b) as u64)
            .sum();
        Ok(Self {
            schema,
            partitions,
            chunks: out,
            rows,
            bytes,
            chunk_bytes,
            shards,
            load_secs,
            partition_secs,
            key_sum,
            whole: Vec::new(),
        })
    }

    /// Every shard in write order.
    pub(crate) fn shards(&self) -> impl Iterator<Item = &(u32, RecordBatch)> {
        self.chunks.iter().flatten()
    }
}

/// Sum of the `l_orderkey` column.
pub(crate) fn key_sum(batch: &RecordBatch) -> i128 {
    let keys = batch.column(0).as_primitive::<Int64Type>();
    keys.values().iter().map(|&k| i128::from(k)).sum()
}

fn load(source: &Source, chunk_rows: usize) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    match source {
        Source::Tpch { scale } => load_tpch(*scale, chunk_rows),
    }
}

/// Generates lineitem on two threads (parts 1 and 2 of 2: the same rows on every run).
fn load_tpch(scale: f64, chunk_rows: usize) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    const PARTS: i32 = 2;
    let parts: Vec<std::result::Result<Vec<RecordBatch>, ArrowError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (1..=PARTS)
            .map(|part| {
                s.spawn(move || {
                    let generator = LineItemGenerator::new(scale, part, PARTS);
                    LineItemArrow::new(generator)
                        .with_batch_size(chunk_rows)
                        .collect::<std::result::Result<Vec<_>, _>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("tpchgen thread panicked"))
            .collect()
    });
    let mut chunks = Vec::new();
    for part in parts {
        chunks.extend(part?);
    }
    let schema = LineItemArrow::schema_ref();
    check_key(&schema)?;
    Ok((schema, chunks))
}

fn check_key(schema: &SchemaRef) -> Result<()> {
    match schema.fields().first() {
        Some(f) if f.name() == "l_orderkey" && f.data_type() == &DataType::Int64 => Ok(()),
        _ => Err("the first column must be `l_orderkey: Int64`".into()),
    }
}

/// The partition of an order key: Fibonacci hashing (multiply by 2^64 / golden ratio, keep the
/// high 32 bits), then scaled to `0..partitions` by a multiply-shift instead of a modulo.
/// Consecutive keys land far apart, so partitions get near-equal shares of lineitem's dense keys.
pub(crate) fn partition_of(key: i64, partitions: u32) -> u32 {
    let h = (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    ((h * u64::from(partitions)) >> 32) as u32
}

/// Splits `chunk` into one shard per non-empty partition: the library's grouping
/// ([`RowsByPartition`], a counting sort of the row indices), then one `take` per shard in row
/// order.
///
/// View columns (lineitem's strings are `Utf8View`) come out of `take` sharing the chunk's
/// string data; each shard is compacted ([`compact_views`]) so it owns its memory, as a shard
/// received from another worker would. Without it every shard would keep the whole chunk's
/// strings alive and an IPC encoder would write them once per shard.
pub(crate) fn partition(chunk: &RecordBatch, partitions: u32) -> Result<Vec<(u32, RecordBatch)>> {
    let targets = partition_ids(chunk, partitions);
    let groups = RowsByPartition::new((&targets).into(), chunk.num_rows(), partitions)?;
    let Some(order) = groups.order() else {
        let whole = groups.ranges().first().map(|&(p, _, _)| (p, chunk.clone()));
        return Ok(whole.into_iter().collect());
    };
    let order = UInt32Array::from(order.to_vec());
    let mut shards = Vec::with_capacity(groups.ranges().len());
    for &(p, start, len) in groups.ranges() {
        let shard = take_record_batch(chunk, &order.slice(start, len))?;
        shards.push((p, compact_views(&shard)?));
    }
    Ok(shards)
}

/// The partition of every row of `chunk`, by its `l_orderkey`.
pub(crate) fn partition_ids(chunk: &RecordBatch, partitions: u32) -> Vec<u32> {
    let keys = chunk.column(0).as_primitive::<Int64Type>();
    keys.values()
        .iter()
        .map(|&k| partition_of(k, partitions))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_balanced_and_in_range() {
        let mut counts = vec![0u32; 64];
        for k in 1..=64_000 {
            counts[partition_of(k, 64) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn partition_puts_every_row_in_its_partition_once_in_order() {
        use arrow_array::{ArrayRef, Int64Array, StringViewArray};
        let keys: Vec<i64> = (0..5_000).map(|i| (i * 7919) % 1_000).collect();
        let strings: Vec<String> = (0..5_000)
            .map(|i| format!("row {i} with a long string"))
            .collect();
        let chunk = RecordBatch::try_from_iter([
            (
                "l_orderkey",
                std::sync::Arc::new(Int64Array::from(keys.clone())) as ArrayRef,
            ),
            (
                "s",
                std::sync::Arc::new(StringViewArray::from_iter_values(&strings)) as ArrayRef,
            ),
        ])
        .unwrap();
        let mut seen = Vec::new();
        for (p, shard) in partition(&chunk, 16).unwrap() {
            let k = shard.column(0).as_primitive::<Int64Type>();
            let s = shard.column(1).as_string_view();
            for row in 0..shard.num_rows() {
                assert_eq!(partition_of(k.value(row), 16), p);
                let i: usize = s.value(row)[4..]
                    .split(' ')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert_eq!(keys[i], k.value(row));
                seen.push((p, i));
            }
        }
        let mut expected: Vec<(u32, usize)> = (0..keys.len())
            .map(|i| (partition_of(keys[i], 16), i))
            .collect();
        expected.sort();
        assert_eq!(
            seen, expected,
            "every row once, input order within a partition"
        );
    }
}
