//! `gen all-types`: a seeded table of 13 columns covering the Arrow types a shuffle must carry.
//!
//! What the small-budget tests (`tests/it/small_budget.rs`) shuffle: keys with nulls, a
//! dictionary, nested list and struct columns, wide values (`large`, up to 300 bytes), and a
//! unique `id` to check that every row comes back once. 100,000 rows (the default) are
//! 25.6 MiB of Arrow buffers (about 35 MiB as the parquet reader allocates them back,
//! `bytes_in` of a shuffle) and 7 parquet row groups of at most [`ROW_GROUP_ROWS`] rows
//! (18.7 MiB of zstd parquet: the random `large` strings barely compress).
//!
//! | column | type | values |
//! |---|---|---|
//! | `id` | Int64, non-null | the row number, 0..N |
//! | `k` | Int64 | 0..50,000 (~43,000 distinct at 100,000 rows), 5% null |
//! | `s` | Utf8 | `s-0` .. `s-19999`, 5% null |
//! | `dict` | Dictionary(Int32, Utf8) | 50 values `category-00` .. `category-49`, 2% null |
//! | `list` | List(Int32) | 0 to 5 elements in -1000..1000, 5% null |
//! | `struct` | Struct(a: Int32, b: Utf8) | `b` 10% null; the struct 2% null (children too) |
//! | `dec` | Decimal128(18, 2) | ±10,000,000,000.00, 3% null |
//! | `ts` | Timestamp(µs, "UTC") | 2020 to 2024, 2% null |
//! | `large` | LargeUtf8 | 0 to 300 printable ASCII bytes |
//! | `bin` | Binary | 0 to 24 bytes |
//! | `f` | Float64 | ±1,000,000, 1% NaN, 2% null |
//! | `flag` | Boolean | 5% null |
//! | `date` | Date32 | 2000 to 2029, 1% null |
//!
//! Every value of row `i` comes from a SplitMix64 stream seeded by `i` alone, so row `i` is the
//! same whatever the number of rows or the batch size: `--rows 1000` is a prefix of `--rows
//! 100000`.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder, Int32Builder,
    Int64Builder, LargeStringBuilder, ListBuilder, NullBufferBuilder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, RecordBatch, RecordBatchReader, StringArray, StructArray,
};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};

/// Rows per parquet row group: 100,000 rows give 7 row groups (several row groups of a few
/// MiB each, so a small budget meets more than one).
pub(crate) const ROW_GROUP_ROWS: usize = 14_300;

/// The seed of every row's stream.
const SEED: u64 = 0x0031_a117_e5ed_5eed;
/// Distinct values `k` draws from.
const K_VALUES: u64 = 50_000;
/// Distinct values `s` draws from.
const S_VALUES: u64 = 20_000;
/// Distinct values of `dict`.
const DICT_VALUES: usize = 50;
/// 2020-01-01T00:00:00Z in microseconds.
const TS_START: i64 = 1_577_836_800_000_000;
/// Five years of 365 days, in microseconds.
const TS_SPAN: u64 = 5 * 365 * 86_400 * 1_000_000;
/// 2000-01-01 in days since the epoch.
const DATE_START: i32 = 10_957;
/// Most bytes of a `large` value.
const LARGE_MAX: u64 = 300;
/// Most bytes of a `bin` value.
const BIN_MAX: u64 = 24;

/// The table's batches, in row order: a [`RecordBatchReader`] of `rows` rows in batches of
/// `batch_rows` (the last one shorter).
#[derive(Debug)]
pub(crate) struct AllTypes {
    schema: SchemaRef,
    next_row: u64,
    rows: u64,
    batch_rows: u64,
}

impl AllTypes {
    /// The first `rows` rows, in batches of `batch_rows` (at least 1).
    pub(crate) fn new(rows: u64, batch_rows: usize) -> Self {
        Self {
            schema: schema(),
            next_row: 0,
            rows,
            batch_rows: (batch_rows as u64).max(1),
        }
    }
}

impl Iterator for AllTypes {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next_row >= self.rows {
            return None;
        }
        let end = self.rows.min(self.next_row + self.batch_rows);
        let batch = batch(&self.schema, self.next_row..end);
        self.next_row = end;
        Some(batch)
    }
}

impl RecordBatchReader for AllTypes {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// The schema: 13 nullable columns but `id`.
pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new_dictionary("dict", DataType::Int32, DataType::Utf8, true),
        Field::new_list("list", list_item(), true),
        Field::new_struct("struct", struct_fields(), true),
        Field::new("dec", DataType::Decimal128(18, 2), true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("large", DataType::LargeUtf8, true),
        Field::new("bin", DataType::Binary, true),
        Field::new("f", DataType::Float64, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("date", DataType::Date32, true),
    ]))
}

fn list_item() -> FieldRef {
    Arc::new(Field::new_list_field(DataType::Int32, true))
}

fn struct_fields() -> Fields {
    Fields::from(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ])
}

/// The rows `range` as one batch.
fn batch(schema: &SchemaRef, range: std::ops::Range<u64>) -> Result<RecordBatch, ArrowError> {
    let mut columns = Columns::with_capacity((range.end - range.start) as usize)?;
    for row in range {
        columns.append(row);
    }
    RecordBatch::try_new(schema.clone(), columns.finish()?)
}

/// One builder per column; [`Columns::append`] draws a row's values in a fixed order.
struct Columns {
    id: Int64Builder,
    k: Int64Builder,
    s: StringBuilder,
    dict_keys: Int32Builder,
    list: ListBuilder<Int32Builder>,
    struct_a: Int32Builder,
    struct_b: StringBuilder,
    struct_nulls: NullBufferBuilder,
    dec: Decimal128Builder,
    ts: TimestampMicrosecondBuilder,
    large: LargeStringBuilder,
    bin: BinaryBuilder,
    f: Float64Builder,
    flag: BooleanBuilder,
    date: Date32Builder,
    /// Scratch for the bytes of `large` and `bin`.
    bytes: Vec<u8>,
}

impl Columns {
    fn with_capacity(rows: usize) -> Result<Self, ArrowError> {
        Ok(Self {
            id: Int64Builder::with_capacity(rows),
            k: Int64Builder::with_capacity(rows),
            s: StringBuilder::with_capacity(rows, rows * 8),
            dict_keys: Int32Builder::with_capacity(rows),
            list: ListBuilder::with_capacity(Int32Builder::with_capacity(rows * 3), rows)
                .with_field(list_item()),
            struct_a: Int32Builder::with_capacity(rows),
            struct_b: StringBuilder::with_capacity(rows, rows * 6),
            struct_nulls: NullBufferBuilder::new(rows),
            dec: Decimal128Builder::with_capacity(rows).with_precision_and_scale(18, 2)?,
            ts: TimestampMicrosecondBuilder::with_capacity(rows).with_timezone("UTC"),
            large: LargeStringBuilder::with_capacity(rows, rows * 151),
            bin: BinaryBuilder::with_capacity(rows, rows * 13),
            f: Float64Builder::with_capacity(rows),
            flag: BooleanBuilder::with_capacity(rows),
            date: Date32Builder::with_capacity(rows),
            bytes: Vec::with_capacity(LARGE_MAX as usize),
        })
    }

    /// Appends row `row`. The order of the draws below is part of the table: changing it
    /// changes every value after it.
    fn append(&mut self, row: u64) {
        let mut rng = RowRng::for_row(row);
        self.id.append_value(row as i64);

        let k = rng.below(K_VALUES) as i64;
        self.k.append_option((!rng.percent(5)).then_some(k));

        let s = rng.below(S_VALUES);
        if rng.percent(5) {
            self.s.append_null();
        } else {
            self.s.append_value(format!("s-{s}"));
        }

        let key = rng.below(DICT_VALUES as u64) as i32;
        self.dict_keys
            .append_option((!rng.percent(2)).then_some(key));

        let len = rng.below(6);
        if rng.percent(5) {
            self.list.append_null();
        } else {
            for _ in 0..len {
                self.list
                    .values()
                    .append_value(rng.below(2000) as i32 - 1000);
            }
            self.list.append(true);
        }

        // A null struct gets null children too, as a parquet reader gives them back.
        let struct_valid = !rng.percent(2);
        let a = rng.draw() as i32;
        let b = rng.below(1000);
        let b_valid = !rng.percent(10);
        self.struct_nulls.append(struct_valid);
        self.struct_a.append_option(struct_valid.then_some(a));
        if struct_valid && b_valid {
            self.struct_b.append_value(format!("b-{b}"));
        } else {
            self.struct_b.append_null();
        }

        let cents = rng.below(2 * 10_u64.pow(12)) as i128 - 10_i128.pow(12);
        self.dec.append_option((!rng.percent(3)).then_some(cents));

        let ts = TS_START + rng.below(TS_SPAN) as i64;
        self.ts.append_option((!rng.percent(2)).then_some(ts));

        let large_len = rng.below(LARGE_MAX + 1) as usize;
        rng.fill_printable(&mut self.bytes, large_len);
        // Printable ASCII is UTF-8.
        self.large
            .append_value(std::str::from_utf8(&self.bytes).unwrap_or_default());

        let bin_len = rng.below(BIN_MAX + 1) as usize;
        rng.fill_printable(&mut self.bytes, bin_len);
        self.bin.append_value(&self.bytes);

        let f = (rng.unit() - 0.5) * 2e6;
        if rng.percent(1) {
            self.f.append_value(f64::NAN);
        } else {
            self.f.append_option((!rng.percent(2)).then_some(f));
        }

        let flag = rng.draw() & 1 == 1;
        self.flag.append_option((!rng.percent(5)).then_some(flag));

        let date = DATE_START + rng.below(30 * 365) as i32;
        self.date.append_option((!rng.percent(1)).then_some(date));
    }

    fn finish(mut self) -> Result<Vec<ArrayRef>, ArrowError> {
        let labels: StringArray = (0..DICT_VALUES)
            .map(|i| Some(format!("category-{i:02}")))
            .collect();
        let dict =
            DictionaryArray::<Int32Type>::try_new(self.dict_keys.finish(), Arc::new(labels))?;
        let structs = StructArray::try_new(
            struct_fields(),
            vec![
                Arc::new(self.struct_a.finish()),
                Arc::new(self.struct_b.finish()),
            ],
            self.struct_nulls.finish(),
        )?;
        Ok(vec![
            Arc::new(self.id.finish()),
            Arc::new(self.k.finish()),
            Arc::new(self.s.finish()),
            Arc::new(dict),
            Arc::new(self.list.finish()),
            Arc::new(structs),
            Arc::new(self.dec.finish()),
            Arc::new(self.ts.finish()),
            Arc::new(self.large.finish()),
            Arc::new(self.bin.finish()),
            Arc::new(self.f.finish()),
            Arc::new(self.flag.finish()),
            Arc::new(self.date.finish()),
        ])
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014), seeded per row: small, fast, and fixed here so the
/// table never changes with a dependency.
struct RowRng(u64);

impl RowRng {
    const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

    /// The stream of row `row`. The row number is mixed first, so the streams of neighbouring
    /// rows do not overlap (plain SplitMix64 seeded with `row * GAMMA` would give row `i + 1`
    /// the stream of row `i` shifted by one).
    fn for_row(row: u64) -> Self {
        Self(mix(SEED ^ mix(row)))
    }

    fn draw(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(Self::GAMMA);
        mix(self.0)
    }

    /// A value in `0..n` (`n` > 0; the modulo bias is below 1e-13 for our `n`).
    fn below(&mut self, n: u64) -> u64 {
        self.draw() % n
    }

    /// True with probability `p` percent.
    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    /// A float in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.draw() >> 11) as f64 / (1_u64 << 53) as f64
    }

    /// Replaces `out` with `len` printable ASCII bytes (space to `~`), eight per draw.
    fn fill_printable(&mut self, out: &mut Vec<u8>, len: usize) {
        out.clear();
        while out.len() < len {
            let word = self.draw().to_le_bytes();
            let take = (len - out.len()).min(word.len());
            out.extend(word[..take].iter().map(|b| b' ' + b % 95));
        }
    }
}

/// The SplitMix64 output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type};
    use arrow_array::{Array, RecordBatchReader};

    use super::*;

    fn all(rows: u64, batch_rows: usize) -> Vec<RecordBatch> {
        AllTypes::new(rows, batch_rows)
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn batches_cover_the_rows_in_order() {
        let batches = all(1000, 300);
        let sizes: Vec<usize> = batches.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, [300, 300, 300, 100]);
        let ids: Vec<i64> = batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect();
        assert_eq!(ids, (0..1000).collect::<Vec<i64>>());
        assert!(AllTypes::new(0, 10).next().is_none());
        assert_eq!(AllTypes::new(5, 10).schema(), schema());
    }

    #[test]
    fn a_row_is_the_same_whatever_the_batching() {
        let whole = all(500, 500).remove(0);
        let pieces = all(500, 7);
        let joined = arrow_select::concat::concat_batches(&schema(), &pieces).unwrap();
        assert_eq!(whole, joined);
        let prefix = all(100, 100).remove(0);
        assert_eq!(prefix, whole.slice(0, 100));
    }

    #[test]
    fn values_have_the_promised_shape() {
        let batch = all(20_000, 20_000).remove(0);
        let column = |name: &str| batch.column_by_name(name).unwrap();
        let null_share = |name: &str| column(name).null_count() as f64 / 20_000.0;
        for (name, percent) in [("k", 5.0), ("s", 5.0), ("dict", 2.0), ("list", 5.0)] {
            let share = null_share(name) * 100.0;
            assert!((share - percent).abs() < 1.0, "{name}: {share}% null");
        }
        assert_eq!(null_share("id"), 0.0);
        assert_eq!(null_share("large"), 0.0);
        let nans = column("f")
            .as_primitive::<Float64Type>()
            .iter()
            .filter(|v| v.is_some_and(f64::is_nan))
            .count();
        assert!((150..250).contains(&nans), "{nans} NaN");
        let dict = column("dict").as_dictionary::<Int32Type>();
        assert_eq!(dict.values().len(), DICT_VALUES);
        let lists = column("list").as_list::<i32>();
        assert!(lists.iter().flatten().all(|l| l.len() <= 5));
        assert!(lists.iter().flatten().any(|l| l.len() == 5));
        let large = column("large").as_string::<i64>();
        let longest = large.iter().flatten().map(str::len).max();
        assert_eq!(longest, Some(LARGE_MAX as usize));
        let structs = column("struct").as_struct();
        for i in 0..structs.len() {
            if structs.is_null(i) {
                assert!(structs.column(0).is_null(i) && structs.column(1).is_null(i));
            }
        }
    }

    #[test]
    fn rows_are_about_26_mib_in_memory() {
        // 10,000 rows, scaled to the 100,000 default: the arrays' buffers, without capacity slack
        // (builders sized by estimate over-allocate a little).
        let batch = all(10_000, 10_000).remove(0);
        let bytes: usize = batch
            .columns()
            .iter()
            .map(|c| c.to_data().get_slice_memory_size().unwrap())
            .sum();
        let per_100k = bytes as f64 * 10.0 / f64::from(1 << 20);
        assert!((23.0..29.0).contains(&per_100k), "{per_100k:.1} MiB");
    }
}
