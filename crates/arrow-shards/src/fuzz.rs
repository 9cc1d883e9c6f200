//! The `state_machine` fuzz target's logic (feature `test-utils`), next to the buffer it tests:
//! the cargo-fuzz target in `fuzz/` calls it, and so does the stable replay test
//! (`tests/it/fuzz_replay.rs`), so CI runs the very function the fuzzer runs, over the committed
//! corpus and seeded random inputs. (The decode targets' logic is the spill crate's,
//! `arrow_shards_spill::fuzz`.) Not part of the API: it panics on any difference.
//!
//! [`state_machine`]: bytes as a sequence of buffer operations (writes from three producers,
//! `try_write`, seals, full and half reads, finish, and subscriptions: subscribe, take some,
//! drop the stream) on a buffer with a tiny memory limit, so the spiller runs all the time.
//! Every refusal is checked against a model, every accepted row must come back exactly once in
//! its producer's order (or, for a reader dropped half way, a per-producer prefix; a
//! subscription's takes so far are always a prefix, and all of it at the end), and after
//! `close` the pool is empty and no file is left.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::path::Path;

use crate::{Error, ShardBuffer, SubscriptionReader};

/// Reads a little-endian cursor over the fuzz input; zeros once it is used up.
struct Bytes<'a> {
    data: &'a [u8],
}

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((first, rest)) => {
                self.data = rest;
                *first
            }
            None => 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

fn machine_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("producer", DataType::Int64, false),
        Field::new("seq", DataType::Int64, false),
        Field::new("payload", DataType::Utf8, true),
    ]))
}

fn machine_batch(producer: i64, first_seq: i64, rows: usize) -> RecordBatch {
    let payload: StringArray = (0..rows)
        .map(|i| (i % 3 != 0).then(|| "x".repeat((first_seq as usize + i) % 40)))
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![producer; rows])),
        Arc::new(Int64Array::from_iter_values(
            first_seq..first_seq + rows as i64,
        )),
        Arc::new(payload),
    ];
    RecordBatch::try_new(machine_schema(), columns).expect("columns match the schema")
}

/// `(producer, seq)` of every row of `batch`, in order.
fn row_ids(batch: &RecordBatch) -> Vec<(i64, i64)> {
    let producers = batch.column(0).as_primitive::<Int64Type>();
    let seqs = batch.column(1).as_primitive::<Int64Type>();
    producers
        .values()
        .iter()
        .copied()
        .zip(seqs.values().iter().copied())
        .collect()
}

/// What the model expects of one partition.
#[derive(Default)]
struct ModelPartition {
    /// Accepted rows per producer, in write order.
    accepted: HashMap<i64, Vec<i64>>,
    sealed: bool,
    /// Claimed by a read or a subscription.
    read: bool,
    /// A live subscription and the rows it handed over so far.
    subscription: Option<(SubscriptionReader, Vec<(i64, i64)>)>,
    /// Its subscription was dropped early: writes to it are accepted and discarded.
    abandoned: bool,
}

/// Takes up to `batches` batches from `p`'s subscription without waiting (all of them with
/// `None`, which must not need to wait: the buffer is finished); checks what it has so far.
fn take_some(p: u32, m: &mut ModelPartition, batches: Option<usize>) {
    let Some((reader, rows)) = &mut m.subscription else {
        return;
    };
    let mut taken = 0;
    let ended = loop {
        if batches.is_some_and(|b| taken >= b) {
            break false;
        }
        match reader.try_next() {
            Poll::Ready(Some(batch)) => {
                let batch = batch.expect("no fault is injected: reads succeed");
                assert!(batch.num_rows() > 0, "no empty batch is handed out");
                rows.extend(row_ids(&batch));
                taken += 1;
            }
            Poll::Ready(None) => break true,
            Poll::Pending => {
                assert!(
                    batches.is_some(),
                    "partition {p}: a finished buffer made a take wait"
                );
                break false;
            }
        }
    };
    let rows = std::mem::take(rows);
    check_delivered(p, m, &rows, ended);
    if let Some((_, kept)) = &mut m.subscription {
        *kept = rows;
    }
}
/// Checks rows handed out for `partition`: per producer, exactly the accepted rows in order
/// (`complete`), or a prefix of them (a reader dropped half way).
fn check_delivered(partition: u32, model: &ModelPartition, rows: &[(i64, i64)], complete: bool) {
    let mut by_producer: HashMap<i64, Vec<i64>> = HashMap::new();
    for (producer, seq) in rows {
        by_producer.entry(*producer).or_default().push(*seq);
    }
    for (producer, got) in &by_producer {
        let want = model.accepted.get(producer).map_or(&[][..], Vec::as_slice);
        assert!(
            got.len() <= want.len() && want[..got.len()] == got[..],
            "partition {partition}, producer {producer}: got {got:?}, accepted {want:?}"
        );
    }
    if complete {
        for (producer, want) in &model.accepted {
            let got = by_producer.get(producer).map_or(&[][..], Vec::as_slice);
            assert_eq!(got, &want[..], "partition {partition}, producer {producer}");
        }
    }
}

/// Runs the operations encoded in `data` against a buffer and a model of it; panics on any
/// difference, any lost or duplicated row, a leaked reservation or a leftover file in `root`
/// (an empty directory the buffer spills under).
pub fn state_machine(data: &[u8], root: &Path) {
    let mut input = Bytes { data };
    let partitions = u32::from(input.byte() % 4) + 1;
    let limit = (usize::from(input.byte() % 16) + 1) * 1024;
    let read_rows = [0, 5, 8192][usize::from(input.byte() % 3)];
    let buffer = ShardBuffer::builder(machine_schema(), partitions)
        .with_memory_limit(limit)
        .with_spill_dir(root)
        .with_spill_segment_bytes(limit / 4 + 1)
        .with_max_spill_round_bytes(limit / 2 + 1)
        .with_read_batch_rows(read_rows)
        // a write that waits this long is a hang: the spiller can always make room here
        .with_write_timeout(Duration::from_secs(60))
        .build()
        .expect("build");
    let mut model: Vec<ModelPartition> =
        (0..partitions).map(|_| ModelPartition::default()).collect();
    let mut finished = false;
    let mut next_seq: HashMap<(i64, u32), i64> = HashMap::new();
    // Rows of every accepted write, abandoned partitions' included.
    let mut accepted = 0u64;

    let read = |buffer: &ShardBuffer,
                model: &mut [ModelPartition],
                finished: bool,
                p: u32,
                keep: Option<usize>| {
        let m = &mut model[p as usize];
        match buffer.read(p) {
            Ok(reader) => {
                assert!(
                    !m.read && (m.sealed || finished),
                    "read of partition {p} allowed"
                );
                m.read = true;
                let mut rows = Vec::new();
                for (i, batch) in reader.enumerate() {
                    let batch = batch.expect("no fault is injected: reads succeed");
                    assert!(batch.num_rows() > 0, "no empty batch is handed out");
                    rows.extend(row_ids(&batch));
                    if keep.is_some_and(|k| i + 1 >= k) {
                        break;
                    }
                }
                check_delivered(p, m, &rows, keep.is_none());
            }
            Err(Error::AlreadyRead { partition }) => {
                assert_eq!(partition, p);
                assert!(m.read, "AlreadyRead for an unread partition {p}");
            }
            Err(Error::NotComplete { partition }) => {
                assert_eq!(partition, p);
                assert!(!m.read && !m.sealed && !finished, "NotComplete for {p}");
            }
            Err(other) => panic!("unexpected read error: {other}"),
        }
    };

    let mut ops = 0;
    while !input.is_empty() && ops < 200 {
        ops += 1;
        let op = input.byte();
        let p = u32::from(input.byte()) % partitions;
        match op % 11 {
            0..=3 => {
                let producer = i64::from(op / 8 % 3);
                let rows = usize::from(input.byte() % 128);
                let seq = next_seq.entry((producer, p)).or_default();
                let batch = machine_batch(producer, *seq, rows);
                let result = if op % 11 == 3 {
                    buffer.try_write(p, batch.clone())
                } else {
                    buffer.write_blocking(p, batch.clone())
                };
                let m = &mut model[p as usize];
                match result {
                    Ok(()) if m.abandoned => {
                        assert!(!finished && !m.sealed, "write accepted after seal/finish");
                        accepted += rows as u64;
                        *seq += rows as i64;
                    }
                    Ok(()) => {
                        assert!(!finished && !m.sealed, "write accepted after seal/finish");
                        accepted += rows as u64;
                        m.accepted
                            .entry(producer)
                            .or_default()
                            .extend(*seq..*seq + rows as i64);
                        *seq += rows as i64;
                    }
                    Err(e) => {
                        match e.error() {
                            Error::Finished => assert!(finished),
                            Error::Sealed { partition } => {
                                assert!(m.sealed && !finished && *partition == p)
                            }
                            Error::MemoryExhausted { .. } => {
                                assert!(op % 11 == 3, "a blocking write waited 60 s: a hang")
                            }
                            other => panic!("unexpected write error: {other}"),
                        }
                        assert_eq!(e.into_batch(), batch, "the refused batch comes back");
                    }
                }
            }
            4 => {
                buffer.seal(p).expect("seal");
                model[p as usize].sealed = true;
            }
            5 => read(&buffer, &mut model, finished, p, None),
            6 => {
                let keep = usize::from(input.byte() % 4);
                read(&buffer, &mut model, finished, p, Some(keep));
            }
            7 => {
                buffer.finish().expect("finish");
                finished = true;
            }
            8 => {
                let m = &mut model[p as usize];
                match buffer.subscribe_blocking(p) {
                    Ok(reader) => {
                        assert!(!m.read, "second claim of partition {p} allowed");
                        m.read = true;
                        m.subscription = Some((reader, Vec::new()));
                    }
                    Err(Error::AlreadyRead { partition }) => {
                        assert!(m.read && partition == p, "AlreadyRead for unread {p}");
                    }
                    Err(other) => panic!("unexpected subscribe error: {other}"),
                }
            }
            9 => {
                let batches = usize::from(input.byte() % 4);
                take_some(p, &mut model[p as usize], Some(batches));
            }
            _ => {
                let m = &mut model[p as usize];
                if m.subscription.take().is_some() {
                    // Dropped before its end, or after it (then nothing is abandoned, and
                    // nothing more can be written).
                    m.abandoned = true;
                }
            }
        }
    }
    buffer.finish().expect("finish");
    for p in 0..partitions {
        let m = &mut model[p as usize];
        if m.subscription.is_some() {
            take_some(p, m, None);
            m.subscription = None;
        } else if !m.read {
            read(&buffer, &mut model, true, p, None);
        }
    }
    let metrics = buffer.close().expect("close");
    assert_eq!(metrics.reserved, 0);
    assert_eq!(buffer.memory_pool().reserved(), 0, "a reservation leaked");
    assert_eq!(metrics.rows_written, accepted);
    let left = std::fs::read_dir(root).expect("root").count();
    assert_eq!(left, 0, "files left after close");
}
