//! One schema rule for every layer: a batch the buffer accepts is accepted by the
//! spill writer, by the spill reader and by the merge, as it is (not only after the buffer
//! re-labelled it); a batch the buffer refuses is refused by each of them too.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder, StringDictionaryBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, StructArray};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use arrow_shards::{Error, ShardBuffer};
use arrow_shards_memory::{MemoryPool, MemoryReservation, UnboundedPool};
use arrow_shards_merge::{MergeOptions, Merger, PartitionSources};
use arrow_shards_spill::{SpillDir, SpillError, SpillOptions};

const ROWS: usize = 40;

fn metadata(key: &str) -> HashMap<String, String> {
    HashMap::from([(key.to_string(), "v".to_string())])
}

fn struct_fields() -> Fields {
    Fields::from(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ])
}

fn dictionary_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// The buffer's schema: with schema and field metadata, a nullable string, a dictionary, a list
/// and a struct.
fn buffer_schema() -> SchemaRef {
    Arc::new(
        Schema::new(vec![
            Field::new("id", DataType::Int64, false).with_metadata(metadata("buffer-id")),
            Field::new("name", DataType::Utf8, true),
            Field::new("tag", dictionary_type(), true),
            Field::new("list", DataType::new_list(DataType::Int32, true), true),
            Field::new("s", DataType::Struct(struct_fields()), true),
        ])
        .with_metadata(metadata("buffer")),
    )
}

fn columns(items: Field) -> Vec<ArrayRef> {
    let ids = Int64Array::from_iter_values(0..ROWS as i64);
    let names: StringArray = (0..ROWS).map(|i| Some(format!("n{i}"))).collect();
    let mut tags = StringDictionaryBuilder::<Int32Type>::new();
    let mut list = ListBuilder::new(Int32Builder::new()).with_field(items);
    for i in 0..ROWS {
        tags.append_value(["x", "y"][i % 2]);
        list.values().append_value(i as i32);
        list.append(true);
    }
    let s = StructArray::new(
        struct_fields(),
        vec![
            Arc::new(Int32Array::from_iter_values(0..ROWS as i32)),
            Arc::new(StringArray::from_iter_values(
                (0..ROWS).map(|i| i.to_string()),
            )),
        ],
        None,
    );
    vec![
        Arc::new(ids),
        Arc::new(names),
        Arc::new(tags.finish()),
        Arc::new(list.finish()),
        Arc::new(s),
    ]
}

fn nullable_items() -> Field {
    Field::new_list_field(DataType::Int32, true)
}

/// A batch whose schema is `buffer_schema()` changed by `edit`, over columns with list items
/// `items`.
fn batch_with(items: Field, edit: impl FnOnce(&mut Vec<Field>, &mut Schema)) -> RecordBatch {
    let columns = columns(items);
    let mut fields: Vec<Field> = buffer_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields[3] = Field::new("list", columns[3].data_type().clone(), true);
    let mut schema = Schema::empty();
    edit(&mut fields, &mut schema);
    let schema = Schema::new(fields).with_metadata(schema.metadata().clone());
    RecordBatch::try_new(Arc::new(schema), columns).unwrap()
}

/// Batches that differ from the buffer's schema in ways the rule allows.
fn allowed() -> Vec<(&'static str, RecordBatch)> {
    let schema = buffer_schema();
    let exact = RecordBatch::try_new(Arc::clone(&schema), columns(nullable_items())).unwrap();
    vec![
        ("the buffer's own schema", exact.clone()),
        ("an equal schema, another Arc", {
            let copy = Arc::new(schema.as_ref().clone());
            exact.clone().with_schema(copy).unwrap()
        }),
        (
            "other schema and field metadata",
            batch_with(nullable_items(), |fields, schema| {
                fields[0] = Field::new("id", DataType::Int64, false).with_metadata(metadata("b"));
                fields[1] = fields[1].clone().with_metadata(metadata("batch-name"));
                *schema = Schema::empty().with_metadata(metadata("batch"));
            }),
        ),
        (
            "non-nullable where the buffer is nullable",
            batch_with(nullable_items(), |fields, _| {
                fields[1] = Field::new("name", DataType::Utf8, false);
                fields[4] = Field::new("s", DataType::Struct(struct_fields()), false);
            }),
        ),
        (
            "another dictionary id",
            batch_with(nullable_items(), |fields, _| {
                #[expect(deprecated, reason = "dictionary ids are what this case is about")]
                let tag = Field::new_dict("tag", dictionary_type(), true, 42, false);
                fields[2] = tag;
            }),
        ),
        ("zero rows", exact.slice(0, 0)),
        ("a slice", exact.slice(3, 11)),
    ]
}

/// Batches the rule refuses.
fn refused() -> Vec<(&'static str, RecordBatch)> {
    vec![
        (
            "a renamed field",
            batch_with(nullable_items(), |fields, _| {
                fields[1] = Field::new("label", DataType::Utf8, true);
            }),
        ),
        (
            "nullable where the buffer is not",
            batch_with(nullable_items(), |fields, _| {
                fields[0] = Field::new("id", DataType::Int64, true);
            }),
        ),
        (
            "non-nullable list items where the buffer's are nullable",
            batch_with(Field::new_list_field(DataType::Int32, false), |_, _| {}),
        ),
        ("a missing field", {
            let batch = batch_with(nullable_items(), |_, _| {});
            batch.project(&[0, 1, 2, 3]).unwrap()
        }),
    ]
}

fn pool() -> Arc<dyn MemoryPool> {
    Arc::new(UnboundedPool::new())
}

/// The merge over `batch` as a memory batch: its rows, or the error.
fn merge_memory(schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch, String> {
    let pool = pool();
    let sources = PartitionSources::new(Arc::clone(schema))
        .with_memory(vec![batch], MemoryReservation::new(&pool));
    Merger::new(sources, MergeOptions::new(), pool)
        .concat()
        .map_err(|e| e.to_string())
}

/// Every layer below the buffer, given `batch` as the caller wrote it: the spill writer, the
/// spill reader and the merge of the read segment and of the batch in memory.
fn through_the_layers(schema: &SchemaRef, batch: &RecordBatch) -> Result<(), String> {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let mut writer = dir.run_writer(Arc::clone(schema), SpillOptions::default());
    writer
        .append(0, std::slice::from_ref(batch))
        .map_err(|e| e.to_string())?;
    let segments = writer.finish().map_err(|e| e.to_string())?;
    let read = segments[0].read().map_err(|e| e.to_string())?;
    let rows: usize = read.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, batch.num_rows());
    for decoded in &read {
        assert!(
            Arc::ptr_eq(decoded.schema_ref(), schema),
            "read with the run's schema"
        );
    }
    let pool = pool();
    let sources = PartitionSources::new(Arc::clone(schema)).with_segments(segments);
    let merged = Merger::new(sources, MergeOptions::new(), pool)
        .concat()
        .map_err(|e| e.to_string())?;
    assert_eq!(merged.num_rows(), batch.num_rows());
    let merged = merge_memory(schema, batch.clone())?;
    assert!(
        Arc::ptr_eq(merged.schema_ref(), schema),
        "merged with the partition's schema"
    );
    assert_eq!(merged.columns(), batch.columns());
    dir.close().unwrap();
    Ok(())
}

fn buffer(schema: &SchemaRef) -> ShardBuffer {
    ShardBuffer::builder(Arc::clone(schema), 1).build().unwrap()
}

#[test]
fn a_batch_the_buffer_accepts_is_accepted_by_spill_and_merge() {
    let schema = buffer_schema();
    for (case, batch) in allowed() {
        buffer(&schema)
            .try_write(0, batch.clone())
            .unwrap_or_else(|e| panic!("{case}: the buffer refused it: {e}"));
        through_the_layers(&schema, &batch)
            .unwrap_or_else(|e| panic!("{case}: accepted by the buffer, refused below: {e}"));
    }
}

#[test]
fn a_batch_the_buffer_refuses_is_refused_by_spill_and_merge() {
    let schema = buffer_schema();
    for (case, batch) in refused() {
        let error = buffer(&schema).try_write(0, batch.clone()).unwrap_err();
        assert!(
            matches!(error.error(), Error::SchemaMismatch(_)),
            "{case}: {error}"
        );

        let root = tempfile::tempdir().unwrap();
        let dir = SpillDir::create(root.path()).unwrap();
        let mut writer = dir.run_writer(Arc::clone(&schema), SpillOptions::default());
        let spill = writer.append(0, std::slice::from_ref(&batch)).unwrap_err();
        assert!(
            matches!(spill, SpillError::SchemaMismatch { .. }),
            "{case}: {spill}"
        );
        // the same rule, so the same reason
        let buffer_reason = error.to_string();
        let spill_reason = std::error::Error::source(&spill).unwrap().to_string();
        assert!(
            buffer_reason.contains(&spill_reason),
            "{case}: {buffer_reason} / {spill_reason}"
        );

        let merge = merge_memory(&schema, batch).unwrap_err();
        assert!(merge.contains(&spill_reason), "{case}: {merge}");
    }
}

/// End to end under memory pressure: every accepted kind of batch is spilled and read back,
/// with the buffer's schema.
#[test]
fn accepted_batches_spill_and_read_back_with_the_buffer_schema() {
    let schema = buffer_schema();
    let root = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(Arc::clone(&schema), 2)
        .with_memory_limit(64 * 1024)
        .with_spill_dir(root.path())
        .build()
        .unwrap();
    let mut written = 0;
    for round in 0..20 {
        for (case, batch) in allowed() {
            written += batch.num_rows();
            buffer
                .write_blocking(round % 2, batch)
                .unwrap_or_else(|e| panic!("{case}: {e}"));
        }
    }
    buffer.finish().unwrap();
    let mut read = 0;
    for partition in 0..2 {
        for batch in buffer.read(partition).unwrap() {
            let batch = batch.unwrap();
            assert_eq!(batch.schema_ref().as_ref(), schema.as_ref());
            assert_eq!(batch.schema().metadata(), schema.metadata());
            read += batch.num_rows();
        }
    }
    assert_eq!(read, written);
    let metrics = buffer.close().unwrap();
    assert!(metrics.spill_runs > 0, "the batches were spilled");
}
