//! One test per refusal: the error names the problem and the batch comes back untouched.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use arrow_shards::{ConfigError, Error, SchemaMismatch, ShardBuffer};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
    ]))
}

fn batch(rows: i64) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows)),
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| format!("value {i}")),
            )),
        ],
    )
    .unwrap()
}

fn buffer(partitions: u32) -> ShardBuffer {
    ShardBuffer::builder(schema(), partitions).build().unwrap()
}

#[test]
fn partition_out_of_range() {
    let b = batch(3);
    let err = buffer(4).write_blocking(4, b.clone()).unwrap_err();
    assert!(matches!(
        err.error(),
        Error::PartitionOutOfRange {
            partition: 4,
            num_partitions: 4
        }
    ));
    assert!(
        err.to_string().contains("partition 4 is out of range"),
        "{err}"
    );
    assert_eq!(err.into_batch(), b);
}

#[test]
fn schema_mismatch_names_field_and_types() {
    let other = RecordBatch::try_from_iter([
        ("k", Arc::new(Int32Array::from(vec![1])) as ArrayRef),
        ("v", Arc::new(StringArray::from(vec!["x"])) as ArrayRef),
    ])
    .unwrap();
    let err = buffer(2).try_write(0, other.clone()).unwrap_err();
    let msg = err.to_string();
    let Error::SchemaMismatch(mismatch) = err.error() else {
        panic!("expected a schema mismatch, got {:?}", err.error());
    };
    match &**mismatch {
        SchemaMismatch::DataType {
            index,
            field,
            expected,
            found,
            ..
        } => {
            assert_eq!((*index, field.as_str()), (0, "k"));
            assert_eq!((expected, found), (&DataType::Int64, &DataType::Int32));
        }
        other => panic!("expected a typed data-type mismatch, got {other:?}"),
    }
    assert!(
        msg.contains("`k`") && msg.contains("Int64") && msg.contains("Int32"),
        "{msg}"
    );
    assert_eq!(err.into_batch(), other);
}

#[test]
fn batch_with_a_stricter_field_is_accepted_and_read_with_the_buffer_schema() {
    let strict = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Utf8, false),
    ]));
    let b = RecordBatch::try_new(strict, batch(2).columns().to_vec()).unwrap();
    let buf = buffer(1);
    buf.write_blocking(0, b).unwrap();
    buf.finish().unwrap();
    let read = buf.read(0).unwrap().concat().unwrap();
    assert_eq!(read.schema(), schema());
}

#[test]
fn write_after_finish() {
    let buf = buffer(2);
    buf.finish().unwrap();
    buf.finish().unwrap(); // idempotent
    let err = buf.write_blocking(1, batch(2)).unwrap_err();
    assert!(matches!(err.error(), Error::Finished));
    assert_eq!(err.into_batch(), batch(2));
}

#[test]
fn write_to_a_sealed_partition() {
    let buf = buffer(2);
    buf.seal(1).unwrap();
    let err = buf.try_write(1, batch(2)).unwrap_err();
    assert!(matches!(err.error(), Error::Sealed { partition: 1 }));
    assert_eq!(err.batch(), &batch(2));
    buf.write_blocking(0, batch(2)).unwrap(); // other partitions still take writes
}

#[test]
fn memory_exhausted_reports_needed_reserved_and_limit() {
    let buf = ShardBuffer::builder(schema(), 2)
        .with_memory_limit(100_000)
        .with_spill(false)
        .build()
        .unwrap();
    buf.write_blocking(0, batch(1000)).unwrap();
    let reserved = buf.metrics().reserved;
    let big = batch(10_000);
    let err = buf.write_blocking(1, big.clone()).unwrap_err();
    match err.error() {
        Error::MemoryExhausted {
            needed,
            reserved: r,
            limit,
        } => {
            assert!(*needed > 100_000);
            assert_eq!((*r, *limit), (reserved, 100_000));
        }
        other => panic!("unexpected {other}"),
    }
    assert!(err.to_string().contains("100000"), "{err}");
    assert_eq!(err.into_batch(), big);
    assert_eq!(
        buf.metrics().reserved,
        reserved,
        "a refused write reserves nothing"
    );
}

#[test]
fn write_after_close() {
    let buf = buffer(1);
    buf.close().unwrap();
    buf.close().unwrap(); // harmless
    let err = buf.write_blocking(0, batch(1)).unwrap_err();
    assert!(matches!(err.error(), Error::Closed));
    assert_eq!(err.into_batch(), batch(1));
    assert!(matches!(buf.read(0), Err(Error::Closed)));
}

#[test]
fn zero_row_batch_is_accepted_and_stored_nowhere() {
    let buf = buffer(1);
    buf.write_blocking(0, batch(0)).unwrap();
    assert_eq!(buf.metrics().batches_written, 0);
    buf.finish().unwrap();
    assert_eq!(buf.read(0).unwrap().count(), 0);
    // still checked: a zero-row batch with the wrong schema is refused
    let bad = RecordBatch::try_from_iter([(
        "x",
        Arc::new(Int64Array::from(Vec::<i64>::new())) as ArrayRef,
    )])
    .unwrap();
    assert!(matches!(
        buffer(1).try_write(0, bad).unwrap_err().error(),
        Error::SchemaMismatch(_)
    ));
}

#[test]
fn read_before_complete_and_read_twice() {
    let buf = buffer(2);
    buf.write_blocking(0, batch(5)).unwrap();
    assert!(matches!(
        buf.read(0),
        Err(Error::NotComplete { partition: 0 })
    ));
    buf.seal(0).unwrap();
    assert_eq!(buf.read(0).unwrap().concat().unwrap(), batch(5));
    let err = buf.read(0).unwrap_err();
    assert!(matches!(err, Error::AlreadyRead { partition: 0 }));
    assert!(err.to_string().contains("exactly once"));
    assert!(matches!(
        buf.read(9),
        Err(Error::PartitionOutOfRange { .. })
    ));
}

#[test]
fn partition_without_data_reads_as_empty_with_the_schema() {
    let buf = buffer(3);
    buf.finish().unwrap();
    let reader = buf.read(2).unwrap();
    assert_eq!(arrow_array::RecordBatchReader::schema(&reader), schema());
    let all = reader.concat().unwrap();
    assert_eq!((all.num_rows(), all.schema()), (0, schema()));
}

#[test]
fn builder_refuses_bad_settings() {
    assert!(matches!(
        ShardBuffer::builder(schema(), 0).build().unwrap_err(),
        ConfigError::NoPartitions
    ));
    let pool: Arc<dyn arrow_shards::MemoryPool> = Arc::new(arrow_shards::BoundedPool::new(10));
    let err = ShardBuffer::builder(schema(), 1)
        .with_memory_limit(5)
        .with_memory_pool(pool)
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::LimitAndPool));
}

#[test]
fn errors_cross_into_arrow_and_downcast_back() {
    let arrow: arrow_schema::ArrowError = Error::AlreadyRead { partition: 3 }.into();
    let arrow_schema::ArrowError::ExternalError(inner) = arrow else {
        panic!()
    };
    assert!(matches!(
        inner.downcast_ref::<Error>(),
        Some(Error::AlreadyRead { partition: 3 })
    ));
}

#[test]
fn the_builder_refuses_spill_settings_that_could_not_act() {
    let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
        "k",
        arrow_schema::DataType::Int64,
        false,
    )]));
    let builder = || ShardBuffer::builder(schema.clone(), 2);
    let off = builder()
        .with_memory_limit(1 << 20)
        .with_spill(false)
        .with_spill_dir(std::env::temp_dir())
        .build()
        .unwrap_err();
    assert!(
        matches!(
            off,
            ConfigError::Conflict {
                setting: "with_spill_dir",
                ..
            }
        ),
        "{off}"
    );
    let unlimited = builder()
        .with_spill_segment_bytes(1 << 10)
        .build()
        .unwrap_err();
    assert!(
        matches!(
            unlimited,
            ConfigError::Conflict {
                setting: "with_spill_segment_bytes",
                ..
            }
        ),
        "{unlimited}"
    );
    assert!(
        unlimited.to_string().contains("memory limit"),
        "{unlimited}"
    );
    let zstd = builder()
        .with_memory_limit(1 << 20)
        .with_compression(arrow_shards::Compression::Zstd { level: 1000 })
        .build()
        .unwrap_err();
    assert!(
        matches!(zstd, ConfigError::InvalidCompression { .. }),
        "{zstd}"
    );
    assert!(
        std::error::Error::source(&zstd).is_some(),
        "the IPC writer's reason is the source"
    );
    // defaults given explicitly are no contradiction
    builder()
        .with_compression(arrow_shards::Compression::None)
        .with_spill(true)
        .build()
        .unwrap();
}

#[test]
fn errors_keep_their_cause() {
    let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
        "k",
        arrow_schema::DataType::Int64,
        false,
    )]));
    let buffer = ShardBuffer::builder(schema.clone(), 1).build().unwrap();
    buffer.finish().unwrap();
    let batch = RecordBatch::try_new(
        schema,
        vec![Arc::new(arrow_array::Int64Array::from(vec![1])) as _],
    )
    .unwrap();
    let refused = buffer.write_blocking(0, batch).unwrap_err();
    let source = std::error::Error::source(&refused).expect("the buffer's error is the source");
    assert_eq!(source.to_string(), Error::Finished.to_string());
}
