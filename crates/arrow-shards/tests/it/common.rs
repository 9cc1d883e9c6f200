//! Random schemas and batches, and the check that a partition reads back what was written.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{
    Decimal128Builder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
    StringDictionaryBuilder, StringViewBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, StructArray};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use arrow_shards::ShardBuffer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Column kinds the random schemas draw from.
pub(crate) const KINDS: usize = 8;

/// Column 0 is `producer` (Int64) and column 1 is `seq` (Int64, per producer and partition):
/// together they identify every row. The rest are drawn from `kinds`.
pub(crate) fn schema(kinds: &[usize]) -> SchemaRef {
    let mut fields = vec![
        Field::new("producer", DataType::Int64, false),
        Field::new("seq", DataType::Int64, false),
    ];
    for (i, kind) in kinds.iter().enumerate() {
        let name = format!("c{i}");
        let dt = match kind % KINDS {
            0 => DataType::Int64,
            1 => DataType::Utf8,
            2 => DataType::Utf8View,
            3 => DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            4 => DataType::new_list(DataType::Int32, true),
            5 => DataType::Struct(struct_fields()),
            6 => DataType::Decimal128(20, 3),
            _ => DataType::Timestamp(TimeUnit::Microsecond, Some("Europe/Paris".into())),
        };
        fields.push(Field::new(name, dt, true));
    }
    Arc::new(Schema::new(fields))
}

fn struct_fields() -> Fields {
    Fields::from(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ])
}

/// A batch of `rows` random rows for `schema`; `seq` counts up from `first_seq`.
pub(crate) fn batch(
    schema: &SchemaRef,
    rng: &mut StdRng,
    producer: i64,
    first_seq: i64,
    rows: usize,
) -> RecordBatch {
    let columns = schema
        .fields()
        .iter()
        .map(|f| match f.name().as_str() {
            "producer" => Arc::new(arrow_array::Int64Array::from(vec![producer; rows])) as ArrayRef,
            "seq" => Arc::new(arrow_array::Int64Array::from_iter_values(
                first_seq..first_seq + rows as i64,
            )),
            _ => column(f.data_type(), rng, rows),
        })
        .collect();
    RecordBatch::try_new(schema.clone(), columns).unwrap()
}

fn null(rng: &mut StdRng) -> bool {
    rng.random_ratio(1, 5)
}

fn word(rng: &mut StdRng) -> String {
    let len = rng.random_range(0..30);
    (0..len)
        .map(|_| rng.random_range(b'a'..=b'z') as char)
        .collect()
}

fn column(dt: &DataType, rng: &mut StdRng, rows: usize) -> ArrayRef {
    match dt {
        DataType::Int64 => {
            let mut b = Int64Builder::new();
            (0..rows).for_each(|_| b.append_option((!null(rng)).then(|| rng.random())));
            Arc::new(b.finish())
        }
        DataType::Utf8 => {
            let mut b = StringBuilder::new();
            (0..rows).for_each(|_| b.append_option((!null(rng)).then(|| word(rng))));
            Arc::new(b.finish())
        }
        DataType::Utf8View => {
            let mut b = StringViewBuilder::new();
            (0..rows).for_each(|_| b.append_option((!null(rng)).then(|| word(rng))));
            Arc::new(b.finish())
        }
        DataType::Dictionary(_, _) => {
            let mut b = StringDictionaryBuilder::<Int32Type>::new();
            let distinct = rng.random_range(1..6);
            (0..rows).for_each(|_| {
                if null(rng) {
                    b.append_null()
                } else {
                    b.append_value(format!("v{}", rng.random_range(0..distinct)))
                }
            });
            Arc::new(b.finish())
        }
        DataType::List(_) => {
            let mut b = ListBuilder::new(Int32Builder::new());
            for _ in 0..rows {
                if null(rng) {
                    b.append(false);
                } else {
                    for _ in 0..rng.random_range(0..4) {
                        b.values().append_option((!null(rng)).then(|| rng.random()));
                    }
                    b.append(true);
                }
            }
            Arc::new(b.finish())
        }
        DataType::Struct(fields) => {
            let a = column(&DataType::Int32, rng, rows);
            let b = column(&DataType::Utf8, rng, rows);
            let nulls: BooleanArray = (0..rows).map(|_| Some(!null(rng))).collect();
            Arc::new(StructArray::new(
                fields.clone(),
                vec![a, b],
                Some(nulls.values().clone().into()),
            ))
        }
        DataType::Int32 => {
            let mut b = Int32Builder::new();
            (0..rows).for_each(|_| b.append_option((!null(rng)).then(|| rng.random())));
            Arc::new(b.finish())
        }
        DataType::Decimal128(p, s) => {
            let mut b = Decimal128Builder::new()
                .with_precision_and_scale(*p, *s)
                .unwrap();
            (0..rows).for_each(|_| {
                b.append_option(
                    (!null(rng)).then(|| rng.random_range(-1_000_000_000i128..1_000_000_000)),
                )
            });
            Arc::new(b.finish())
        }
        DataType::Timestamp(_, tz) => {
            let mut b = TimestampMicrosecondBuilder::new().with_timezone_opt(tz.clone());
            (0..rows).for_each(|_| {
                b.append_option((!null(rng)).then(|| rng.random_range(0..2_000_000_000_000_000)))
            });
            Arc::new(b.finish())
        }
        other => unreachable!("no generator for {other}"),
    }
}

/// What one producer wrote, per partition, in order.
pub(crate) type Written = HashMap<(i64, u32), Vec<RecordBatch>>;

/// Writes `batches_per_producer` random batches from each of `producers` threads to random
/// partitions, and returns what each producer wrote to each partition, in order.
pub(crate) fn write_concurrently(
    buffer: &ShardBuffer,
    seed: u64,
    producers: usize,
    batches_per_producer: usize,
    max_rows: usize,
) -> Written {
    let schema = buffer.schema().clone();
    let partitions = buffer.num_partitions();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..producers)
            .map(|w| {
                let (buffer, schema) = (buffer.clone(), schema.clone());
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed ^ (w as u64) << 32);
                    let mut written = Written::new();
                    let mut seq: HashMap<u32, i64> = HashMap::new();
                    for _ in 0..batches_per_producer {
                        let p = rng.random_range(0..partitions);
                        let rows = rng.random_range(0..=max_rows);
                        let next = seq.entry(p).or_default();
                        let b = batch(&schema, &mut rng, w as i64, *next, rows);
                        *next += rows as i64;
                        buffer.write_blocking(p, b.clone()).expect("write fits");
                        written.entry((w as i64, p)).or_default().push(b);
                    }
                    written
                })
            })
            .collect();
        let mut all = Written::new();
        for h in handles {
            all.extend(h.join().unwrap());
        }
        all
    })
}

/// Checks that `read` (everything read from `partition`) holds exactly the rows each producer
/// wrote there, in that producer's order.
pub(crate) fn assert_partition(read: &RecordBatch, partition: u32, written: &Written) {
    let schema = read.schema();
    let producers = read.column(0).as_primitive::<Int64Type>();
    let mut expected_rows = 0;
    for ((w, p), batches) in written {
        if *p != partition {
            continue;
        }
        let expected = arrow_select::concat::concat_batches(&schema, batches).unwrap();
        expected_rows += expected.num_rows();
        let mask: BooleanArray = producers.iter().map(|v| Some(v == Some(*w))).collect();
        let got = arrow_select::filter::filter_record_batch(read, &mask).unwrap();
        assert_eq!(got, expected, "partition {partition}, producer {w}");
    }
    assert_eq!(
        read.num_rows(),
        expected_rows,
        "partition {partition} holds rows nobody wrote"
    );
}
