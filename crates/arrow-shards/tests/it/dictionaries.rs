//! Dictionary columns come back with their dictionaries as written: wherever the
//! buffer concatenates (compaction's cut, the spill writer's coalescing, the merge's coalescing
//! on read), a read batch's dictionary holds no value twice and keeps every value the written
//! dictionaries held, used or not; and every row decodes to what was written, in order.
//!
//! arrow's own `concat` fails each of these cases: with as many dictionary values as rows it
//! merges the dictionaries and drops unused values, otherwise it appends them, duplicates
//! included.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, BooleanArray, DictionaryArray, Int32Array, Int64Array};
use arrow_array::{RecordBatch, StringArray, StructArray, UInt32Array};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use arrow_select::filter::filter_record_batch;
use arrow_shards::ShardBuffer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PARTITIONS: u32 = 4;

fn dictionary_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// `seq` (Int64, counting rows per partition), `d` (a dictionary column) and `s`, a struct
/// holding a dictionary `d` too.
fn schema() -> SchemaRef {
    let inner = Fields::from(vec![Field::new("d", dictionary_type(), true)]);
    Arc::new(Schema::new(vec![
        Field::new("seq", DataType::Int64, false),
        Field::new("d", dictionary_type(), true),
        Field::new("s", DataType::Struct(inner), true),
    ]))
}

/// `rows` rows drawn from the first `used` of `categories` (every fifth null); the dictionary
/// is a fresh array holding all of `categories`.
fn batch(
    rng: &mut StdRng,
    first: i64,
    rows: usize,
    categories: &[String],
    used: usize,
) -> RecordBatch {
    let mut column = || -> ArrayRef {
        let keys: Int32Array = (0..rows)
            .map(|_| (!rng.random_ratio(1, 5)).then(|| rng.random_range(0..used as i32)))
            .collect();
        let values: ArrayRef = Arc::new(StringArray::from_iter_values(categories));
        Arc::new(DictionaryArray::try_new(keys, values).unwrap())
    };
    let d = column();
    let inner = column();
    let field = Arc::new(Field::new("d", dictionary_type(), true));
    let s = StructArray::try_new(Fields::from(vec![field]), vec![inner], None).unwrap();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(first..first + rows as i64)),
        d,
        Arc::new(s),
    ];
    RecordBatch::try_new(schema(), columns).unwrap()
}

fn categories(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// The dictionary columns of `batch`: `d` and `s.d`.
fn dictionaries(batch: &RecordBatch) -> [&DictionaryArray<Int32Type>; 2] {
    let s = batch.column(2).as_struct();
    [
        batch.column(1).as_dictionary::<Int32Type>(),
        s.column(0).as_dictionary::<Int32Type>(),
    ]
}

fn values(d: &DictionaryArray<Int32Type>) -> Vec<String> {
    let values = d.values().as_string::<i32>();
    values.iter().map(|v| v.unwrap().to_owned()).collect()
}

/// Each row decoded (`None`: null).
fn decoded(d: &DictionaryArray<Int32Type>) -> Vec<Option<String>> {
    let values = d.values().as_string::<i32>();
    (0..d.len())
        .map(|i| {
            d.is_valid(i)
                .then(|| values.value(d.keys().value(i) as usize).to_owned())
        })
        .collect()
}

/// One partition's writes, in order, and the batches read back.
#[derive(Default)]
struct Partition {
    written: Vec<RecordBatch>,
    read: Vec<RecordBatch>,
}

impl Partition {
    /// No read dictionary holds a value twice, the read dictionaries together hold every value
    /// a written one held, and every row decodes as written, in order.
    fn check(&self) {
        let written_rows: usize = self.written.iter().map(|b| b.num_rows()).sum();
        let read_rows: usize = self.read.iter().map(|b| b.num_rows()).sum();
        assert_eq!(read_rows, written_rows);
        for column in 0..2 {
            let mut written_values = HashSet::new();
            let mut written_decoded = Vec::new();
            for b in &self.written {
                written_values.extend(values(dictionaries(b)[column]));
                written_decoded.extend(decoded(dictionaries(b)[column]));
            }
            let mut read_values = HashSet::new();
            let mut read_decoded = Vec::new();
            for b in &self.read {
                let d = dictionaries(b)[column];
                let values = values(d);
                let distinct: HashSet<_> = values.iter().collect();
                assert_eq!(distinct.len(), values.len(), "a value twice: {values:?}");
                read_values.extend(values);
                read_decoded.extend(decoded(d));
            }
            assert_eq!(read_values, written_values, "column {column}");
            assert!(
                read_decoded == written_decoded,
                "column {column}: rows changed"
            );
        }
        let seq = |batches: &[RecordBatch]| -> Vec<i64> {
            let column =
                |b: &RecordBatch| b.column(0).as_primitive::<Int64Type>().values().to_vec();
            batches.iter().flat_map(column).collect()
        };
        assert_eq!(seq(&self.read), seq(&self.written));
    }
}

/// The dictionary of write `i`: its categories, and how many of the first ones rows use.
type Dictionaries = fn(usize) -> (Vec<String>, usize);

/// How a test's buffer is built and written.
struct Run {
    compact_rows: usize,
    read_rows: usize,
    memory_limit: Option<usize>,
    writes: usize,
    max_rows: usize,
    dictionary: Dictionaries,
}

impl Run {
    /// 200 writes of 1-20 rows, no memory limit.
    fn in_memory(compact_rows: usize, read_rows: usize, dictionary: Dictionaries) -> Self {
        Self {
            compact_rows,
            read_rows,
            memory_limit: None,
            writes: 200,
            max_rows: 20,
            dictionary,
        }
    }

    /// Writes, reads every partition back, checks each; returns the partitions and whether
    /// anything was spilled.
    fn go(&self, seed: u64) -> (Vec<Partition>, bool) {
        let root = tempfile::tempdir().unwrap();
        let mut builder = ShardBuffer::builder(schema(), PARTITIONS)
            .with_compact_target_rows(self.compact_rows)
            .with_read_batch_rows(self.read_rows);
        if let Some(limit) = self.memory_limit {
            builder = builder.with_memory_limit(limit).with_spill_dir(root.path());
        }
        let buffer = builder.build().unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut partitions: Vec<Partition> =
            (0..PARTITIONS).map(|_| Partition::default()).collect();
        let mut next = [0i64; PARTITIONS as usize];
        for i in 0..self.writes {
            let p = rng.random_range(0..PARTITIONS);
            let rows = rng.random_range(1..=self.max_rows);
            let (categories, used) = (self.dictionary)(i);
            let b = batch(&mut rng, next[p as usize], rows, &categories, used);
            next[p as usize] += rows as i64;
            buffer.write_blocking(p, b.clone()).unwrap();
            partitions[p as usize].written.push(b);
        }
        buffer.finish().unwrap();
        for (p, partition) in partitions.iter_mut().enumerate() {
            partition.read = buffer.read(p as u32).unwrap().map(Result::unwrap).collect();
            partition.check();
        }
        let spilled = buffer.close().unwrap().spill_runs > 0;
        (partitions, spilled)
    }
}

/// Fifty categories, rows using the first thirty: a pandas categorical with unused categories.
fn same_categories(_: usize) -> (Vec<String>, usize) {
    (categories("c", 50), 30)
}

/// Write `i` has its own values beside shared ones: `c0..c9` then `w{i}.0..w{i}.2` (one
/// unused), rotated so that the first-seen order differs between writes.
fn different_dictionaries(i: usize) -> (Vec<String>, usize) {
    let mut values = categories(&format!("w{}.", i % 7), 3);
    values.extend(categories("c", 10));
    values.rotate_left(i % 5);
    let used = values.len() - 1;
    (values, used)
}

/// Every read dictionary is exactly [`same_categories`]' fifty, in order.
fn assert_all_fifty_categories(partitions: &[Partition]) {
    for b in partitions.iter().flat_map(|p| &p.read) {
        for d in dictionaries(b) {
            assert_eq!(values(d), categories("c", 50));
        }
    }
}

#[test]
fn same_categories_come_back_exactly_through_compaction() {
    let (partitions, _) = Run::in_memory(8192, 8192, same_categories).go(1);
    assert_all_fifty_categories(&partitions);
    for p in &partitions {
        // compaction joined the small writes into one batch per partition
        assert!(
            p.written.len() > 1 && p.read.len() == 1,
            "{} batches",
            p.read.len()
        );
    }
}

#[test]
fn same_categories_come_back_exactly_through_the_merge_coalescing() {
    let (partitions, _) = Run::in_memory(0, 100, same_categories).go(2);
    assert_all_fifty_categories(&partitions);
    for p in &partitions {
        assert!(p.read.len() < p.written.len(), "nothing coalesced");
    }
}

#[test]
fn different_dictionaries_are_united_through_compaction_and_coalescing() {
    for (compact_rows, read_rows) in [(8192, 8192), (64, 1000), (0, 100)] {
        let run = Run::in_memory(compact_rows, read_rows, different_dictionaries);
        let (partitions, _) = run.go(3);
        assert!(partitions.iter().all(|p| p.read.len() < p.written.len()));
    }
}

#[test]
fn spilled_partitions_keep_their_dictionaries() {
    // (seed, compaction target, read batch rows, dictionaries, the same categories everywhere?);
    // read batches as they are (0) show the spill writer's coalescing alone
    let cases: [(u64, usize, usize, Dictionaries, bool); 4] = [
        (4, 0, 0, same_categories, true),
        (5, 0, 0, different_dictionaries, false),
        (6, 256, 8192, same_categories, true),
        (7, 256, 8192, different_dictionaries, false),
    ];
    for (seed, compact_rows, read_rows, dictionary, same) in cases {
        let run = Run {
            compact_rows,
            read_rows,
            memory_limit: Some(256 << 10),
            writes: 3000,
            max_rows: 40,
            dictionary,
        };
        let (partitions, spilled) = run.go(seed);
        assert!(spilled, "nothing was spilled (seed {seed})");
        if same {
            assert_all_fifty_categories(&partitions);
        }
    }
}

#[test]
fn a_scatter_write_keeps_the_dictionaries_of_its_batches() {
    let buffer = ShardBuffer::builder(schema(), PARTITIONS).build().unwrap();
    let mut rng = StdRng::seed_from_u64(8);
    let mut partitions: Vec<Partition> = (0..PARTITIONS).map(|_| Partition::default()).collect();
    let mut first = 0;
    for i in 0..50 {
        let (categories, used) = different_dictionaries(i);
        let rows = rng.random_range(1..=60);
        let b = batch(&mut rng, first, rows, &categories, used);
        first += rows as i64;
        let ids: UInt32Array = (0..rows).map(|_| rng.random_range(0..PARTITIONS)).collect();
        for (p, partition) in partitions.iter_mut().enumerate() {
            let mask: BooleanArray = ids.iter().map(|id| Some(id == Some(p as u32))).collect();
            partition
                .written
                .push(filter_record_batch(&b, &mask).unwrap());
        }
        buffer.write_partitioned_blocking(b, &ids).unwrap();
    }
    buffer.finish().unwrap();
    for (p, partition) in partitions.iter_mut().enumerate() {
        partition.read = buffer.read(p as u32).unwrap().map(Result::unwrap).collect();
        partition.check();
    }
    buffer.close().unwrap();
}
