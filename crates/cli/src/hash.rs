//! The partition hash: which partition a row's key belongs to.
//!
//! The hash must be the same on every run, platform and arrow version, so it is written out here
//! rather than borrowed from a hasher whose output may change:
//!
//! 1. Each key **value** is encoded canonically as little-endian bytes and hashed with 64-bit
//!    FNV-1a (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`):
//!    - booleans: one byte, 0 or 1;
//!    - signed integers, dates, times, timestamps and durations: the value widened to `i64`
//!      (8 bytes), so Int32 `5` and Int64 `5` hash alike; the time unit and time zone are part of
//!      the type, not of the hash;
//!    - unsigned integers: widened to `u64` (8 bytes);
//!    - floats: widened to `f64`, with `-0.0` as `0.0` and every NaN as the canonical NaN;
//!    - decimals: the unscaled value as `i128` (Decimal32/64/128, 16 bytes) or `i256` (32 bytes);
//!    - strings (Utf8, LargeUtf8, Utf8View) and binaries (Binary, LargeBinary, BinaryView,
//!      FixedSizeBinary): their bytes, so equal strings hash equally whatever their layout;
//!    - dictionaries: the hash of the **value** a key points to, never of the key itself;
//!    - a null: the constant [`NULL_VALUE`].
//! 2. The value hashes of a row's key columns are folded in column order, starting from a seed:
//!    `acc = fmix64(acc * 0x9E3779B97F4A7C15 ^ value_hash)` (wrapping multiply; `fmix64` is the
//!    MurmurHash3 finalizer, which spreads FNV's weak low bits). The seed for partitioning is 0.
//! 3. A row whose key columns are **all null** has hash 0, so it goes to **partition 0**.
//! 4. The partition is `hash % partitions`.
//!
//! `--verify` fingerprints keys with the same function and another seed ([`VERIFY_SEED`]).

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{ArrowError, DataType, IntervalUnit, Schema, TimeUnit};

use crate::error::CliError;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
const FOLD: u64 = 0x9e37_79b9_7f4a_7c15;

/// The value hash of a null ("NULLNULL" read as bytes).
pub(crate) const NULL_VALUE: u64 = 0x4e55_4c4c_4e55_4c4c;
/// The seed of the partition hash.
pub(crate) const PARTITION_SEED: u64 = 0;
/// The seed of `--verify`'s key fingerprints, independent of the partition hash.
pub(crate) const VERIFY_SEED: u64 = 0x5645_5249_4659_2121;

/// 64-bit FNV-1a of `bytes`.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The MurmurHash3 64-bit finalizer.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// Folds one column's value hash into a row's running hash.
fn fold(acc: u64, value_hash: u64) -> u64 {
    fmix64(acc.wrapping_mul(FOLD) ^ value_hash)
}

/// The partition of a row hash.
pub(crate) fn partition_of(hash: u64, partitions: u32) -> u32 {
    // The remainder is below `partitions`, a u32.
    (hash % u64::from(partitions)) as u32
}

/// Whether a column of type `data_type` can be a key.
pub(crate) fn is_key_type(data_type: &DataType) -> bool {
    use DataType::*;
    match data_type {
        Null
        | Boolean
        | Int8
        | Int16
        | Int32
        | Int64
        | UInt8
        | UInt16
        | UInt32
        | UInt64
        | Float16
        | Float32
        | Float64
        | Date32
        | Date64
        | Time32(_)
        | Time64(_)
        | Timestamp(_, _)
        | Duration(_)
        | Interval(IntervalUnit::YearMonth)
        | Decimal32(_, _)
        | Decimal64(_, _)
        | Decimal128(_, _)
        | Decimal256(_, _)
        | Utf8
        | LargeUtf8
        | Utf8View
        | Binary
        | LargeBinary
        | BinaryView
        | FixedSizeBinary(_) => true,
        Dictionary(_, values) => is_key_type(values),
        _ => false,
    }
}

/// Hashes the key columns of batches, as described in the module docs.
#[derive(Debug, Clone)]
pub(crate) struct KeyHasher {
    columns: Vec<usize>,
    seed: u64,
}

impl KeyHasher {
    /// A hasher of the columns `names` of `schema`, checking that each exists and can be a key.
    pub(crate) fn new(schema: &Schema, names: &[String], seed: u64) -> Result<Self, CliError> {
        let mut columns = Vec::with_capacity(names.len());
        for name in names {
            let index = schema.index_of(name).map_err(|_| CliError::UnknownKey {
                name: name.clone(),
                available: schema.fields().iter().map(|f| f.name().clone()).collect(),
            })?;
            let data_type = schema.field(index).data_type();
            if !is_key_type(data_type) {
                return Err(CliError::UnsupportedKeyType {
                    name: name.clone(),
                    data_type: data_type.clone(),
                });
            }
            columns.push(index);
        }
        Ok(KeyHasher { columns, seed })
    }

    /// The same key columns with another seed.
    pub(crate) fn with_seed(&self, seed: u64) -> Self {
        KeyHasher {
            columns: self.columns.clone(),
            seed,
        }
    }

    /// The hash of every row of `batch`, into `out` (cleared first).
    pub(crate) fn hash_rows(
        &self,
        batch: &RecordBatch,
        out: &mut Vec<u64>,
    ) -> Result<(), ArrowError> {
        let rows = batch.num_rows();
        out.clear();
        out.resize(rows, self.seed);
        let mut all_null = vec![true; rows];
        let mut values = vec![0u64; rows];
        for &index in &self.columns {
            let column = batch.column(index);
            value_hashes(column.as_ref(), &mut values)?;
            for (acc, &v) in out.iter_mut().zip(&values) {
                *acc = fold(*acc, v);
            }
            match column.logical_nulls() {
                None => all_null.fill(false),
                Some(nulls) => {
                    for (flag, valid) in all_null.iter_mut().zip(nulls.iter()) {
                        *flag &= !valid;
                    }
                }
            }
        }
        for (acc, &null) in out.iter_mut().zip(&all_null) {
            if null {
                *acc = 0;
            }
        }
        Ok(())
    }
}

fn fill<V>(out: &mut [u64], values: impl Iterator<Item = Option<V>>, hash: impl Fn(V) -> u64) {
    for (slot, value) in out.iter_mut().zip(values) {
        *slot = value.map_or(NULL_VALUE, &hash);
    }
}

fn signed(v: i64) -> u64 {
    fnv1a(&v.to_le_bytes())
}

fn unsigned(v: u64) -> u64 {
    fnv1a(&v.to_le_bytes())
}

fn float(v: f64) -> u64 {
    let canonical = if v.is_nan() {
        f64::NAN
    } else if v == 0.0 {
        0.0
    } else {
        v
    };
    fnv1a(&canonical.to_bits().to_le_bytes())
}

fn decimal(v: i128) -> u64 {
    fnv1a(&v.to_le_bytes())
}

/// The value hash of each element of `array` (length `out.len()`), [`NULL_VALUE`] for nulls.
fn value_hashes(array: &dyn Array, out: &mut [u64]) -> Result<(), ArrowError> {
    debug_assert_eq!(array.len(), out.len());
    macro_rules! ints {
        ($t:ty) => {
            fill(out, array.as_primitive::<$t>().iter(), |v| {
                signed(i64::from(v))
            })
        };
    }
    macro_rules! uints {
        ($t:ty) => {
            fill(out, array.as_primitive::<$t>().iter(), |v| {
                unsigned(u64::from(v))
            })
        };
    }
    use DataType::*;
    match array.data_type() {
        Null => out.fill(NULL_VALUE),
        Boolean => fill(out, array.as_boolean().iter(), |v| fnv1a(&[u8::from(v)])),
        Int8 => ints!(Int8Type),
        Int16 => ints!(Int16Type),
        Int32 => ints!(Int32Type),
        Int64 => ints!(Int64Type),
        UInt8 => uints!(UInt8Type),
        UInt16 => uints!(UInt16Type),
        UInt32 => uints!(UInt32Type),
        UInt64 => uints!(UInt64Type),
        Float16 => fill(out, array.as_primitive::<Float16Type>().iter(), |v| {
            float(v.to_f64())
        }),
        Float32 => fill(out, array.as_primitive::<Float32Type>().iter(), |v| {
            float(f64::from(v))
        }),
        Float64 => fill(out, array.as_primitive::<Float64Type>().iter(), float),
        Date32 => ints!(Date32Type),
        Date64 => ints!(Date64Type),
        Time32(TimeUnit::Second) => ints!(Time32SecondType),
        Time32(_) => ints!(Time32MillisecondType),
        Time64(TimeUnit::Microsecond) => ints!(Time64MicrosecondType),
        Time64(_) => ints!(Time64NanosecondType),
        Timestamp(TimeUnit::Second, _) => ints!(TimestampSecondType),
        Timestamp(TimeUnit::Millisecond, _) => ints!(TimestampMillisecondType),
        Timestamp(TimeUnit::Microsecond, _) => ints!(TimestampMicrosecondType),
        Timestamp(TimeUnit::Nanosecond, _) => ints!(TimestampNanosecondType),
        Duration(TimeUnit::Second) => ints!(DurationSecondType),
        Duration(TimeUnit::Millisecond) => ints!(DurationMillisecondType),
        Duration(TimeUnit::Microsecond) => ints!(DurationMicrosecondType),
        Duration(TimeUnit::Nanosecond) => ints!(DurationNanosecondType),
        Interval(IntervalUnit::YearMonth) => ints!(IntervalYearMonthType),
        Decimal32(_, _) => fill(out, array.as_primitive::<Decimal32Type>().iter(), |v| {
            decimal(i128::from(v))
        }),
        Decimal64(_, _) => fill(out, array.as_primitive::<Decimal64Type>().iter(), |v| {
            decimal(i128::from(v))
        }),
        Decimal128(_, _) => fill(out, array.as_primitive::<Decimal128Type>().iter(), decimal),
        Decimal256(_, _) => fill(out, array.as_primitive::<Decimal256Type>().iter(), |v| {
            fnv1a(&v.to_le_bytes())
        }),
        Utf8 => fill(out, array.as_string::<i32>().iter(), |v| {
            fnv1a(v.as_bytes())
        }),
        LargeUtf8 => fill(out, array.as_string::<i64>().iter(), |v| {
            fnv1a(v.as_bytes())
        }),
        Utf8View => fill(out, array.as_string_view().iter(), |v| fnv1a(v.as_bytes())),
        Binary => fill(out, array.as_binary::<i32>().iter(), fnv1a),
        LargeBinary => fill(out, array.as_binary::<i64>().iter(), fnv1a),
        BinaryView => fill(out, array.as_binary_view().iter(), fnv1a),
        FixedSizeBinary(_) => fill(out, array.as_fixed_size_binary().iter(), fnv1a),
        Dictionary(_, _) => {
            let dictionary = array.as_any_dictionary();
            let values = dictionary.values();
            let mut value_hashes_of_dictionary = vec![0u64; values.len()];
            value_hashes(values.as_ref(), &mut value_hashes_of_dictionary)?;
            let keys = dictionary.normalized_keys();
            // Null keys and keys pointing at null values are both null rows.
            let nulls = array.logical_nulls();
            for (row, (slot, key)) in out.iter_mut().zip(keys).enumerate() {
                let valid = nulls.as_ref().is_none_or(|n| n.is_valid(row));
                *slot = match value_hashes_of_dictionary.get(key) {
                    Some(&h) if valid => h,
                    _ => NULL_VALUE,
                };
            }
        }
        other => {
            return Err(ArrowError::InvalidArgumentError(format!(
                "cannot hash a key column of type {other}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{StringDictionaryBuilder, StringViewBuilder};
    use arrow_array::{
        ArrayRef, BooleanArray, Date32Array, Decimal128Array, DictionaryArray, Float64Array,
        Int32Array, Int64Array, LargeStringArray, StringArray, StringViewArray, UInt8Array,
    };
    use arrow_schema::Field;

    use super::*;

    fn hashes(columns: Vec<(&str, ArrayRef)>, seed: u64) -> Vec<u64> {
        let names: Vec<String> = columns.iter().map(|(n, _)| n.to_string()).collect();
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let hasher = KeyHasher::new(&batch.schema(), &names, seed).unwrap();
        let mut out = Vec::new();
        hasher.hash_rows(&batch, &mut out).unwrap();
        out
    }

    fn one(array: ArrayRef) -> Vec<u64> {
        hashes(vec![("k", array)], PARTITION_SEED)
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    /// Pinned values: if one of these changes, every existing output changes partition.
    #[test]
    fn hash_values_are_pinned() {
        let ints = one(Arc::new(Int64Array::from(vec![0, 1, 42, -1])));
        let strings = one(Arc::new(StringArray::from(vec!["", "hello", "l_orderkey"])));
        // Computed once with an independent implementation of the module docs' definition.
        let pinned_ints: [u64; 4] = [
            0x7bd3_144f_29c0_cc9e,
            0x4a3a_3a4b_a652_3826,
            0xa624_5a5d_cf27_8758,
            0x6a92_c022_8678_c02e,
        ];
        let pinned_strings: [u64; 3] = [
            0xefd0_1f60_ba99_2926,
            0xe9c5_62c0_fdb2_3244,
            0xf705_ba56_35d4_33c9,
        ];
        assert_eq!(ints, pinned_ints, "{ints:#x?}");
        assert_eq!(strings, pinned_strings, "{strings:#x?}");
        // and the partitions they give
        let parts: Vec<u32> = ints.iter().map(|&h| partition_of(h, 64)).collect();
        assert_eq!(parts, [30, 38, 24, 46]);
    }

    #[test]
    fn equal_strings_hash_equally_in_every_layout() {
        let values = ["", "short", "a string longer than twelve bytes", "ünïcödé"];
        let utf8 = one(Arc::new(StringArray::from(values.to_vec())));
        let large = one(Arc::new(LargeStringArray::from(values.to_vec())));
        let view = one(Arc::new(StringViewArray::from(values.to_vec())));
        let mut dict = StringDictionaryBuilder::<Int32Type>::new();
        for v in values.iter().rev() {
            dict.append_value(v); // dictionary order differs from row order
        }
        let dict = dict.finish();
        let reversed: Vec<u64> = one(Arc::new(dict)).into_iter().rev().collect();
        assert_eq!(utf8, large);
        assert_eq!(utf8, view);
        assert_eq!(utf8, reversed);
        // a view array built in blocks, sliced, still hashes by value
        let mut b = StringViewBuilder::new().with_fixed_block_size(64);
        for v in values.iter().chain(values.iter()) {
            b.append_value(v);
        }
        let sliced = b.finish().slice(4, 4);
        assert_eq!(one(Arc::new(sliced)), utf8);
    }

    #[test]
    fn integers_hash_by_value_whatever_their_width() {
        let narrow = one(Arc::new(Int32Array::from(vec![-7, 0, 5])));
        let wide = one(Arc::new(Int64Array::from(vec![-7, 0, 5])));
        assert_eq!(narrow, wide);
        let dates = one(Arc::new(Date32Array::from(vec![-7, 0, 5])));
        assert_eq!(dates, wide);
    }

    #[test]
    fn dictionaries_hash_their_values_not_their_keys() {
        let values: ArrayRef = Arc::new(StringArray::from(vec!["x", "y"]));
        let a = DictionaryArray::new(Int32Array::from(vec![0, 1]), values.clone());
        let b = DictionaryArray::new(
            Int32Array::from(vec![1, 0]),
            Arc::new(StringArray::from(vec!["y", "x"])) as ArrayRef,
        );
        assert_eq!(one(Arc::new(a)), one(Arc::new(b)));
        let narrow_keys = DictionaryArray::new(UInt8Array::from(vec![0, 1]), values);
        assert_eq!(
            one(Arc::new(StringArray::from(vec!["x", "y"]))),
            one(Arc::new(narrow_keys))
        );
    }

    #[test]
    fn nulls_go_to_partition_zero() {
        let ints = one(Arc::new(Int64Array::from(vec![None, Some(3), None])));
        assert_eq!(ints[0], 0);
        assert_eq!(ints[2], 0);
        assert_ne!(ints[1], 0);
        // a null value in a dictionary, and a null key, are both null
        let dict = DictionaryArray::new(
            Int32Array::from(vec![Some(0), None, Some(1)]),
            Arc::new(StringArray::from(vec![None, Some("z")])) as ArrayRef,
        );
        let h = one(Arc::new(dict));
        assert_eq!(&h[..2], &[0, 0]);
        assert_eq!(h[2], one(Arc::new(StringArray::from(vec!["z"])))[0]);
        // with two key columns, only an all-null key is 0; a partly null key is hashed
        let two = hashes(
            vec![
                (
                    "a",
                    Arc::new(Int64Array::from(vec![None, None, Some(1)])) as ArrayRef,
                ),
                (
                    "b",
                    Arc::new(StringArray::from(vec![None, Some("q"), None])) as ArrayRef,
                ),
            ],
            PARTITION_SEED,
        );
        assert_eq!(two[0], 0);
        assert_ne!(two[1], 0);
        assert_ne!(two[2], 0);
        assert_ne!(two[1], two[2]);
    }

    #[test]
    fn column_order_and_seed_matter() {
        let a: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let b: ArrayRef = Arc::new(Int64Array::from(vec![2, 1]));
        let ab = hashes(vec![("a", a.clone()), ("b", b.clone())], PARTITION_SEED);
        assert_ne!(ab[0], ab[1], "(1,2) and (2,1) must differ");
        let verify = hashes(vec![("a", a.clone()), ("b", b)], VERIFY_SEED);
        assert_ne!(ab, verify);
    }

    #[test]
    fn floats_booleans_and_decimals() {
        let f = one(Arc::new(Float64Array::from(vec![
            0.0,
            -0.0,
            f64::NAN,
            -f64::NAN,
            1.5,
        ])));
        assert_eq!(f[0], f[1]);
        assert_eq!(f[2], f[3]);
        assert_ne!(f[0], f[4]);
        let b = one(Arc::new(BooleanArray::from(vec![true, false, true])));
        assert_eq!(b[0], b[2]);
        assert_ne!(b[0], b[1]);
        let d = one(Arc::new(
            Decimal128Array::from(vec![100, 100, 200])
                .with_precision_and_scale(10, 2)
                .unwrap(),
        ));
        assert_eq!(d[0], d[1]);
        assert_ne!(d[0], d[2]);
    }

    #[test]
    fn unknown_and_unsupported_keys_are_named() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new_list("l", Field::new_list_field(DataType::Int64, true), true),
        ]);
        let err = KeyHasher::new(&schema, &["zz".into()], 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown key column \"zz\"; the input has columns: a, l"
        );
        let err = KeyHasher::new(&schema, &["l".into()], 0).unwrap_err();
        assert!(matches!(err, CliError::UnsupportedKeyType { .. }), "{err}");
        assert!(err.to_string().contains("\"l\""));
    }

    #[test]
    fn partitions_are_in_range_and_spread() {
        let hashes = one(Arc::new(Int64Array::from_iter_values(0..10_000)));
        let mut counts = [0u32; 16];
        for h in hashes {
            counts[partition_of(h, 16) as usize] += 1;
        }
        // 625 expected per partition; a decent hash stays well within +-20%
        assert!(
            counts.iter().all(|&c| (500..750).contains(&c)),
            "{counts:?}"
        );
    }
}
