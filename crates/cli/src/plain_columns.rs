//! Which parquet columns to write without a dictionary, chosen from a sample of the input.
//!
//! The parquet crate dictionary-encodes every column until its dictionary reaches
//! `--dictionary-limit` (1 MiB) in a row group. A column whose values are mostly distinct
//! gains nothing from it and pays the most: every value is hashed into an interner that grows
//! to the limit (and for 8-byte keys a 1 MiB dictionary holds ~130 K values, more than a
//! partition's row group often has, so it never falls back). On SF 1 lineitem at 64 partitions
//! the interner was ~25% of the run's CPU, and writing `l_partkey`, `l_extendedprice` and
//! `l_comment` plain made the run 13% faster and its files 9% smaller (docs/benchmarks.md).
//!
//! The rule: in the sample (the first input batch decoded, up to [`SAMPLE_ROWS`] rows), a
//! column of at least [`MIN_SAMPLE_VALUES`] non-null values whose distinct values are more than
//! `--dictionary-distinct-ratio` of them (0.5 by default) is written plain. Only top-level
//! columns of integer, float, decimal, date, time, timestamp, duration, string and binary
//! types are sampled; the others keep the crate's choice. A sample is one batch: a column
//! whose first rows repeat less than the rest (or more) is judged by those rows, and a plain
//! column is only larger, never wrong. Counting is by sorting the sample's values (no hashing):
//! ~16 columns of 65 K rows take a few milliseconds, once per run.
//!
//! # Locking
//! None here: [`PlainColumns`] is a `OnceLock` written once by the first input thread to
//! decode a non-empty batch, before that batch is written to the buffer, so every output writer
//! (which exists only once a row has reached the buffer) reads it set. Another input thread
//! sampling meanwhile waits inside `get_or_init` for the choice (a few milliseconds of sorting,
//! no I/O).

use std::sync::OnceLock;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Decimal32Type, Decimal64Type, Decimal128Type, Decimal256Type,
    DurationMicrosecondType, DurationMillisecondType, DurationNanosecondType, DurationSecondType,
    Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    Time32MillisecondType, Time32SecondType, Time64MicrosecondType, Time64NanosecondType,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrowPrimitiveType, RecordBatch};
use arrow_schema::{DataType, TimeUnit};

/// The most rows of the sample.
pub(crate) const SAMPLE_ROWS: usize = 65_536;

/// Fewer non-null values than this in the sample say too little: the column keeps its
/// dictionary.
pub(crate) const MIN_SAMPLE_VALUES: usize = 1_024;

/// The default `--dictionary-distinct-ratio`.
pub(crate) const DEFAULT_RATIO: f64 = 0.5;

/// The columns to write plain, decided once from the first input batch.
#[derive(Debug, Default)]
pub(crate) struct PlainColumns {
    chosen: OnceLock<Vec<String>>,
}

impl PlainColumns {
    /// Decides from `batch` unless decided already or `batch` is empty; `ratio` is
    /// `--dictionary-distinct-ratio` (1 or more: never plain).
    pub(crate) fn sample(&self, batch: &RecordBatch, ratio: f64) {
        if batch.num_rows() > 0 {
            self.chosen.get_or_init(|| choose(batch, ratio));
        }
    }

    /// The names of the columns to write plain (none before a sample).
    pub(crate) fn names(&self) -> &[String] {
        self.chosen.get().map_or(&[], Vec::as_slice)
    }
}

/// The top-level columns of `batch` whose sampled values are more than `ratio` distinct.
pub(crate) fn choose(batch: &RecordBatch, ratio: f64) -> Vec<String> {
    if ratio >= 1.0 {
        return Vec::new();
    }
    let rows = batch.num_rows().min(SAMPLE_ROWS);
    let schema = batch.schema();
    batch
        .columns()
        .iter()
        .zip(schema.fields())
        .filter(|(column, _)| {
            let sample = column.slice(0, rows);
            distinct(sample.as_ref()).is_some_and(|(values, distinct)| {
                values >= MIN_SAMPLE_VALUES && distinct as f64 > ratio * values as f64
            })
        })
        .map(|(_, field)| field.name().clone())
        .collect()
}

/// `(non-null values, distinct non-null values)` of `array`, or `None` for a type not sampled.
fn distinct(array: &dyn Array) -> Option<(usize, usize)> {
    use DataType as D;
    Some(match array.data_type() {
        D::Int8 => primitive::<Int8Type>(array),
        D::Int16 => primitive::<Int16Type>(array),
        D::Int32 => primitive::<Int32Type>(array),
        D::Int64 => primitive::<Int64Type>(array),
        D::UInt8 => primitive::<UInt8Type>(array),
        D::UInt16 => primitive::<UInt16Type>(array),
        D::UInt32 => primitive::<UInt32Type>(array),
        D::UInt64 => primitive::<UInt64Type>(array),
        D::Float16 => by_key(array.as_primitive::<Float16Type>(), |v| v.to_bits()),
        D::Float32 => by_key(array.as_primitive::<Float32Type>(), f32::to_bits),
        D::Float64 => by_key(array.as_primitive::<Float64Type>(), f64::to_bits),
        D::Decimal32(_, _) => primitive::<Decimal32Type>(array),
        D::Decimal64(_, _) => primitive::<Decimal64Type>(array),
        D::Decimal128(_, _) => primitive::<Decimal128Type>(array),
        D::Decimal256(_, _) => primitive::<Decimal256Type>(array),
        D::Date32 => primitive::<Date32Type>(array),
        D::Date64 => primitive::<Date64Type>(array),
        D::Time32(TimeUnit::Second) => primitive::<Time32SecondType>(array),
        D::Time32(_) => primitive::<Time32MillisecondType>(array),
        D::Time64(TimeUnit::Microsecond) => primitive::<Time64MicrosecondType>(array),
        D::Time64(_) => primitive::<Time64NanosecondType>(array),
        D::Timestamp(TimeUnit::Second, _) => primitive::<TimestampSecondType>(array),
        D::Timestamp(TimeUnit::Millisecond, _) => primitive::<TimestampMillisecondType>(array),
        D::Timestamp(TimeUnit::Microsecond, _) => primitive::<TimestampMicrosecondType>(array),
        D::Timestamp(TimeUnit::Nanosecond, _) => primitive::<TimestampNanosecondType>(array),
        D::Duration(TimeUnit::Second) => primitive::<DurationSecondType>(array),
        D::Duration(TimeUnit::Millisecond) => primitive::<DurationMillisecondType>(array),
        D::Duration(TimeUnit::Microsecond) => primitive::<DurationMicrosecondType>(array),
        D::Duration(TimeUnit::Nanosecond) => primitive::<DurationNanosecondType>(array),
        D::Utf8 => bytes(
            array
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(str::as_bytes)),
        ),
        D::LargeUtf8 => bytes(
            array
                .as_string::<i64>()
                .iter()
                .map(|v| v.map(str::as_bytes)),
        ),
        D::Utf8View => bytes(array.as_string_view().iter().map(|v| v.map(str::as_bytes))),
        D::Binary => bytes(array.as_binary::<i32>().iter()),
        D::LargeBinary => bytes(array.as_binary::<i64>().iter()),
        D::BinaryView => bytes(array.as_binary_view().iter()),
        _ => return None,
    })
}

fn primitive<T>(array: &dyn Array) -> (usize, usize)
where
    T: ArrowPrimitiveType,
    T::Native: Ord,
{
    by_key(array.as_primitive::<T>(), |v| v)
}

/// Counts by a totally ordered key of each value (floats by their bits).
fn by_key<T, K>(
    array: &arrow_array::PrimitiveArray<T>,
    key: impl Fn(T::Native) -> K,
) -> (usize, usize)
where
    T: ArrowPrimitiveType,
    K: Ord,
{
    let mut keys: Vec<K> = array.iter().flatten().map(key).collect();
    let values = keys.len();
    keys.sort_unstable();
    keys.dedup();
    (values, keys.len())
}

fn bytes<'a>(values: impl Iterator<Item = Option<&'a [u8]>>) -> (usize, usize) {
    let mut values: Vec<&[u8]> = values.flatten().collect();
    let count = values.len();
    values.sort_unstable();
    values.dedup();
    (count, values.len())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        Decimal128Array, Float64Array, Int64Array, StringArray, StringViewArray, StructArray,
    };
    use arrow_schema::{Field, Fields};

    use super::*;

    fn batch(columns: Vec<(&str, Arc<dyn Array>)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    #[test]
    fn mostly_distinct_columns_are_plain_and_repeating_ones_keep_their_dictionary() {
        let n = 4_096i64;
        let b = batch(vec![
            ("key", Arc::new(Int64Array::from_iter_values(0..n))),
            (
                "few",
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 7))),
            ),
            // exactly half distinct: not more than the ratio, keeps its dictionary
            (
                "half",
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i / 2))),
            ),
            (
                "price",
                Arc::new(
                    Decimal128Array::from_iter_values((0..n).map(|i| i128::from(i) * 3))
                        .with_precision_and_scale(15, 2)
                        .unwrap(),
                ),
            ),
            (
                "text",
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("c{i}")),
                )),
            ),
            (
                "mode",
                Arc::new(StringViewArray::from_iter_values(
                    (0..n).map(|i| ["AIR", "RAIL", "SHIP"][i as usize % 3]),
                )),
            ),
            (
                "float",
                Arc::new(Float64Array::from_iter_values(
                    (0..n).map(|i| i as f64 / 3.0),
                )),
            ),
        ]);
        assert_eq!(choose(&b, DEFAULT_RATIO), ["key", "price", "text", "float"]);
        // a ratio of 1 keeps every dictionary; a lower one takes "half" too
        assert!(choose(&b, 1.0).is_empty());
        assert_eq!(choose(&b, 0.4), ["key", "half", "price", "text", "float"]);
    }

    #[test]
    fn nulls_do_not_count_and_small_samples_say_nothing() {
        // 2,000 distinct values among 4,000 rows, half of them null: all distinct
        let mostly_null = Int64Array::from_iter((0..4_000i64).map(|i| (i % 2 == 0).then_some(i)));
        // 1,000 distinct values: below the minimum sample
        let small = Int64Array::from_iter_values(0..1_000);
        let b = batch(vec![("nulls", Arc::new(mostly_null))]);
        assert_eq!(choose(&b, DEFAULT_RATIO), ["nulls"]);
        let b = batch(vec![("small", Arc::new(small))]);
        assert!(choose(&b, DEFAULT_RATIO).is_empty());
    }

    #[test]
    fn nested_columns_keep_the_crates_choice_and_the_first_sample_decides() {
        let inner = Arc::new(Int64Array::from_iter_values(0..4_096)) as Arc<dyn Array>;
        let nested = StructArray::new(
            Fields::from(vec![Field::new("a", DataType::Int64, false)]),
            vec![Arc::clone(&inner)],
            None,
        );
        let b = batch(vec![("nested", Arc::new(nested)), ("flat", inner)]);
        let plain = PlainColumns::default();
        assert!(plain.names().is_empty());
        // an empty batch says nothing: the next one decides
        plain.sample(&b.slice(0, 0), DEFAULT_RATIO);
        plain.sample(&b, DEFAULT_RATIO);
        assert_eq!(plain.names(), ["flat"]);
        // later batches do not change the choice
        let repeating = batch(vec![(
            "flat",
            Arc::new(Int64Array::from_iter_values(std::iter::repeat_n(1, 4_096))) as _,
        )]);
        plain.sample(&repeating, DEFAULT_RATIO);
        assert_eq!(plain.names(), ["flat"]);
    }
}
