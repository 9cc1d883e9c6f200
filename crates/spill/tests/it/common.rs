//! Helpers shared by the integration tests: seeded batches of every Arrow type we spill.

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, BinaryViewBuilder, FixedSizeBinaryBuilder, FixedSizeListBuilder, Int16Builder,
    Int32Builder, Int64Builder, LargeListBuilder, LargeStringBuilder, ListBuilder, MapBuilder,
    StringBuilder, StringDictionaryBuilder, StringViewBuilder,
};
use arrow_array::types::{Int32Type, IntervalMonthDayNano};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Decimal256Array,
    DurationMillisecondArray, Float64Array, Int8Array, Int64Array, IntervalMonthDayNanoArray,
    LargeBinaryArray, RecordBatch, StringArray, StructArray, Time64NanosecondArray,
    TimestampMicrosecondArray, UInt64Array,
};
use arrow_buffer::{NullBuffer, i256};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};

/// A batch of `rows` rows: ids from `start` and strings derived from them.
pub(crate) fn ints_and_strings(start: i64, rows: usize) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(start..start + rows as i64));
    let names: ArrayRef = Arc::new(StringArray::from_iter(
        (start..start + rows as i64).map(|i| (i % 7 != 0).then(|| format!("name-{i}"))),
    ));
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]);
    RecordBatch::try_new(Arc::new(schema), vec![ids, names]).unwrap()
}

/// Concatenation of `batches` (an empty batch of `schema` if there are none).
pub(crate) fn concat(schema: &SchemaRef, batches: &[RecordBatch]) -> RecordBatch {
    arrow_select::concat::concat_batches(schema, batches).unwrap()
}

/// A small seeded generator (xorshift64*).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    /// True with probability `percent`/100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn string(&mut self) -> String {
        // mix short (inlined in views) and long strings
        let len = if self.chance(50) {
            self.below(12)
        } else {
            13 + self.below(40)
        };
        (0..len)
            .map(|_| (b'a' + self.below(26) as u8) as char)
            .collect()
    }
}

/// The column types the tests cover.
pub(crate) const KINDS: usize = 27;

/// An array of kind `kind` with `len` rows, about `nulls` percent null. Arrays of one kind
/// always have the same data type.
pub(crate) fn array(kind: usize, rng: &mut Rng, len: usize, nulls: u64) -> ArrayRef {
    let valid = |rng: &mut Rng| !rng.chance(nulls);
    let n = len;
    match kind {
        0 => Arc::new(Int8Array::from_iter(
            (0..n).map(|_| valid(rng).then(|| rng.next() as i8)),
        )),
        1 => Arc::new(Int64Array::from_iter(
            (0..n).map(|_| valid(rng).then(|| rng.next() as i64)),
        )),
        2 => Arc::new(UInt64Array::from_iter(
            (0..n).map(|_| valid(rng).then(|| rng.next())),
        )),
        3 => Arc::new(Float64Array::from_iter(
            (0..n).map(|_| valid(rng).then(|| (rng.next() as i64) as f64 / 1e3)),
        )),
        4 => Arc::new(BooleanArray::from_iter(
            (0..n).map(|_| valid(rng).then(|| rng.chance(50))),
        )),
        5 => Arc::new(
            Decimal128Array::from_iter(
                (0..n).map(|_| valid(rng).then(|| rng.next() as i128 % 10i128.pow(20))),
            )
            .with_precision_and_scale(20, 3)
            .unwrap(),
        ),
        6 => Arc::new(
            Decimal256Array::from_iter(
                (0..n).map(|_| valid(rng).then(|| i256::from_i128(rng.next() as i128 * 1_000_003))),
            )
            .with_precision_and_scale(40, 5)
            .unwrap(),
        ),
        7 => Arc::new(
            TimestampMicrosecondArray::from_iter(
                (0..n).map(|_| valid(rng).then(|| rng.next() as i64 >> 8)),
            )
            .with_timezone("+02:00"),
        ),
        8 => Arc::new(
            TimestampMicrosecondArray::from_iter(
                (0..n).map(|_| valid(rng).then(|| rng.next() as i64 >> 8)),
            )
            .with_timezone("America/New_York"),
        ),
        9 => Arc::new(Date32Array::from_iter(
            (0..n).map(|_| valid(rng).then(|| rng.below(40_000) as i32)),
        )),
        10 => {
            Arc::new(Time64NanosecondArray::from_iter((0..n).map(|_| {
                valid(rng).then(|| rng.below(86_400_000_000_000) as i64)
            })))
        }
        11 => Arc::new(DurationMillisecondArray::from_iter(
            (0..n).map(|_| valid(rng).then(|| rng.next() as i64)),
        )),
        12 => Arc::new(IntervalMonthDayNanoArray::from_iter((0..n).map(|_| {
            valid(rng).then(|| {
                IntervalMonthDayNano::new(rng.next() as i32, rng.next() as i32, rng.next() as i64)
            })
        }))),
        13 => Arc::new(StringArray::from_iter(
            (0..n).map(|_| valid(rng).then(|| rng.string())),
        )),
        14 => {
            let mut b = LargeStringBuilder::new();
            for _ in 0..n {
                if valid(rng) {
                    b.append_value(rng.string())
                } else {
                    b.append_null()
                }
            }
            Arc::new(b.finish())
        }
        15 => {
            let mut b = StringViewBuilder::new();
            for _ in 0..n {
                if valid(rng) {
                    b.append_value(rng.string())
                } else {
                    b.append_null()
                }
            }
            Arc::new(b.finish())
        }
        16 => Arc::new(BinaryArray::from_iter(
            (0..n).map(|_| valid(rng).then(|| rng.string().into_bytes())),
        )),
        17 => Arc::new(LargeBinaryArray::from_iter(
            (0..n).map(|_| valid(rng).then(|| rng.string().into_bytes())),
        )),
        18 => {
            let mut b = BinaryViewBuilder::new();
            for _ in 0..n {
                if valid(rng) {
                    b.append_value(rng.string().into_bytes())
                } else {
                    b.append_null()
                }
            }
            Arc::new(b.finish())
        }
        19 => {
            let mut b = FixedSizeBinaryBuilder::new(5);
            for _ in 0..n {
                if valid(rng) {
                    b.append_value(&rng.next().to_le_bytes()[..5]).unwrap()
                } else {
                    b.append_null()
                }
            }
            Arc::new(b.finish())
        }
        20 => {
            // a different dictionary in every array
            let mut b = StringDictionaryBuilder::<Int32Type>::new();
            let salt = rng.next() % 1000;
            for _ in 0..n {
                if valid(rng) {
                    b.append_value(format!("d{salt}-{}", rng.below(8)))
                } else {
                    b.append_null()
                }
            }
            Arc::new(b.finish())
        }
        21 => {
            let mut b = ListBuilder::new(Int32Builder::new());
            for _ in 0..n {
                if valid(rng) {
                    for _ in 0..rng.below(4) {
                        if rng.chance(80) {
                            b.values().append_value(rng.next() as i32)
                        } else {
                            b.values().append_null()
                        }
                    }
                    b.append(true);
                } else {
                    b.append(false);
                }
            }
            Arc::new(b.finish())
        }
        22 => {
            let mut b = LargeListBuilder::new(StringBuilder::new());
            for _ in 0..n {
                if valid(rng) {
                    for _ in 0..rng.below(3) {
                        b.values().append_value(rng.string());
                    }
                    b.append(true);
                } else {
                    b.append(false);
                }
            }
            Arc::new(b.finish())
        }
        23 => {
            let mut b = FixedSizeListBuilder::new(Int16Builder::new(), 3);
            for _ in 0..n {
                let ok = valid(rng);
                for _ in 0..3 {
                    if rng.chance(80) {
                        b.values().append_value(rng.next() as i16)
                    } else {
                        b.values().append_null()
                    }
                }
                b.append(ok);
            }
            Arc::new(b.finish())
        }
        24 => {
            let a: ArrayRef = Arc::new(Int64Array::from_iter(
                (0..n).map(|_| rng.chance(80).then(|| rng.next() as i64)),
            ));
            let s: ArrayRef = Arc::new(StringArray::from_iter(
                (0..n).map(|_| rng.chance(80).then(|| rng.string())),
            ));
            let fields = Fields::from(vec![
                Field::new("a", DataType::Int64, true),
                Field::new("s", DataType::Utf8, true),
            ]);
            let nulls = (nulls > 0).then(|| NullBuffer::from_iter((0..n).map(|_| valid(rng))));
            Arc::new(StructArray::try_new(fields, vec![a, s], nulls).unwrap())
        }
        25 => {
            let mut b = MapBuilder::new(None, StringBuilder::new(), Int64Builder::new());
            for _ in 0..n {
                if valid(rng) {
                    for k in 0..rng.below(3) {
                        b.keys().append_value(format!("k{k}"));
                        b.values()
                            .append_option(rng.chance(80).then(|| rng.next() as i64));
                    }
                    b.append(true).unwrap();
                } else {
                    b.append(false).unwrap();
                }
            }
            Arc::new(b.finish())
        }
        _ => {
            // a list of structs with a view column inside
            let mut inner = StringViewBuilder::new();
            let mut offsets = vec![0i32];
            let mut list_valid = Vec::new();
            for _ in 0..n {
                let ok = valid(rng);
                if ok {
                    for _ in 0..rng.below(3) {
                        inner.append_value(rng.string());
                    }
                }
                offsets.push(inner.len() as i32);
                list_valid.push(ok);
            }
            let values: ArrayRef = Arc::new(inner.finish());
            let field = Arc::new(Field::new("item", DataType::Utf8View, true));
            Arc::new(
                arrow_array::ListArray::try_new(
                    field,
                    arrow_buffer::OffsetBuffer::new(offsets.into()),
                    values,
                    Some(NullBuffer::from(list_valid)),
                )
                .unwrap(),
            )
        }
    }
}

/// A schema with one column per kind in `kinds`.
pub(crate) fn schema(kinds: &[usize]) -> SchemaRef {
    let mut rng = Rng::new(0);
    let fields: Vec<Field> = kinds
        .iter()
        .enumerate()
        .map(|(i, &kind)| {
            Field::new(
                format!("c{i}_{kind}"),
                array(kind, &mut rng, 0, 0).data_type().clone(),
                true,
            )
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// A batch of `schema` (made by [`schema`] from `kinds`) with `rows` rows, each column built
/// `extra` rows longer and sliced, to exercise sliced arrays.
pub(crate) fn batch(
    schema: &SchemaRef,
    kinds: &[usize],
    rng: &mut Rng,
    rows: usize,
    extra: usize,
    nulls: u64,
) -> RecordBatch {
    let columns: Vec<ArrayRef> = kinds
        .iter()
        .map(|&kind| {
            let full = array(kind, rng, rows + extra, nulls);
            let offset = rng.below(extra as u64 + 1) as usize;
            full.slice(offset, rows)
        })
        .collect();
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options).unwrap()
}
