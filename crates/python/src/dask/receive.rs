//! The receive side's decode: the shards a peer sent, as batches ready for the scatter write.
//!
//! Dask's `buffers_to_table` (distributed 2026.8, `shuffle/_arrow.py`) opens a pyarrow IPC
//! reader per received shard, appends the input partition id column (a numpy array per
//! batch), concatenates the tables, and the run then casts the output partition column to the
//! buffer's `uint32` ids; each step is a Python call with the GIL held between them. Here all
//! of a message's shards are decoded in one pass with the GIL released: each shard's Arrow IPC
//! stream is read with arrow's `StreamDecoder` straight from the received frame (zero-copy:
//! the batches point into the frame, realigned by a copy only if the frame is not 8-byte
//! aligned), its rows get the id column, and the output partition column becomes the ids of
//! the scatter write. Shards whose schemas differ (pandas `object` columns infer their type
//! per input partition) come back as one group per distinct set of fields; the first shard's
//! schema metadata (pandas') is kept for its group, as `concat_tables` keeps the first
//! table's.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_buffer::Buffer;
use arrow_ipc::reader::StreamDecoder;
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};

use super::refusal::Refusal;
use super::split::integers;

/// One received shard: its input partition and its Arrow IPC stream.
pub(crate) struct Shard {
    pub(crate) input_partition: u32,
    pub(crate) frame: Buffer,
}

/// Received shards of one schema: batches with the id column, and each row's output
/// partition (the scatter write's ids), in order.
pub(crate) struct Group {
    pub(crate) schema: SchemaRef,
    pub(crate) batches: Vec<RecordBatch>,
    pub(crate) partitions: UInt32Array,
}

/// What decoding asks of the shards: the output partition column, whether it is dropped from
/// the batches, and the name of the input partition id column appended to them.
pub(crate) struct Columns<'a> {
    pub(crate) partition: &'a str,
    pub(crate) drop_partition: bool,
    pub(crate) input_partition_id: &'a str,
}

/// Decodes `shards` in order into groups of equal fields (in order of first appearance).
/// A shard without rows adds nothing. A frame that is not an Arrow IPC stream, or a partition
/// column that is missing, not integers, has nulls or values outside `0..2^32`, is refused
/// with a message naming the shard's input partition.
pub(crate) fn decode(shards: Vec<Shard>, columns: &Columns<'_>) -> Result<Vec<Group>, Refusal> {
    let mut groups: Vec<(Fields, Group, Vec<u32>)> = Vec::new();
    for shard in shards {
        let id = shard.input_partition;
        let (schema, batches) = read_stream(shard.frame)
            .map_err(|e| Refusal::Value(format!("the shard of input partition {id}: {e}")))?;
        if batches.iter().all(|b| b.num_rows() == 0) {
            continue;
        }
        let at = schema.index_of(columns.partition).map_err(|_| {
            Refusal::Value(format!(
                "the shard of input partition {id} has no column {:?}",
                columns.partition
            ))
        })?;
        let group = match groups.iter().position(|(f, _, _)| f == schema.fields()) {
            Some(found) => found,
            None => {
                let out = out_schema(&schema, at, columns);
                groups.push((
                    schema.fields().clone(),
                    Group {
                        schema: out,
                        batches: Vec::new(),
                        partitions: UInt32Array::from(Vec::<u32>::new()),
                    },
                    Vec::new(),
                ));
                groups.len() - 1
            }
        };
        let (_, group, partitions) = &mut groups[group];
        for batch in batches.into_iter().filter(|b| b.num_rows() > 0) {
            let mut values = Vec::with_capacity(batch.num_rows());
            integers(batch.column(at), columns.partition, &mut values)
                .map_err(|e| e.for_input_partition(id))?;
            if let Some(bad) = values.iter().find(|&&p| u32::try_from(p).is_err()) {
                return Err(Refusal::Value(format!(
                    "the shard of input partition {id}: output partition {bad} in {:?} is \
                     outside 0..2^32",
                    columns.partition
                )));
            }
            partitions.extend(values.iter().map(|&p| p as u32));
            let mut arrays: Vec<ArrayRef> = batch
                .columns()
                .iter()
                .enumerate()
                .filter(|&(i, _)| !(columns.drop_partition && i == at))
                .map(|(_, a)| Arc::clone(a))
                .collect();
            arrays.push(Arc::new(UInt32Array::from(vec![id; batch.num_rows()])));
            group.batches.push(RecordBatch::try_new(
                SchemaRef::clone(&group.schema),
                arrays,
            )?);
        }
    }
    Ok(groups
        .into_iter()
        .map(|(_, mut group, partitions)| {
            group.partitions = UInt32Array::from(partitions);
            group
        })
        .collect())
}

/// The schema of a group: the shard's fields (the partition column dropped if asked) and the
/// id column, the shard's metadata.
fn out_schema(schema: &Schema, partition_at: usize, columns: &Columns<'_>) -> SchemaRef {
    let mut fields: Vec<Arc<Field>> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|&(i, _)| !(columns.drop_partition && i == partition_at))
        .map(|(_, f)| Arc::clone(f))
        .collect();
    fields.push(Arc::new(Field::new(
        columns.input_partition_id,
        DataType::UInt32,
        true,
    )));
    SchemaRef::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Reads one whole Arrow IPC stream from `frame`: its schema and batches.
fn read_stream(mut frame: Buffer) -> Result<(SchemaRef, Vec<RecordBatch>), String> {
    let mut decoder = StreamDecoder::new();
    let mut batches = Vec::new();
    while !frame.is_empty() {
        if let Some(batch) = decoder.decode(&mut frame).map_err(not_a_stream)? {
            batches.push(batch);
        }
    }
    decoder.finish().map_err(not_a_stream)?;
    let schema = decoder
        .schema()
        .ok_or_else(|| "not an Arrow IPC stream: it has no schema".to_owned())?;
    Ok((schema, batches))
}

fn not_a_stream(e: arrow_schema::ArrowError) -> String {
    format!("not a whole Arrow IPC stream: {e}")
}
