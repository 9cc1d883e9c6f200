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

use arrow_array::{RecordBatch, UInt32Array};
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
    let mut groups: Vec<Building> = Vec::new();
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
        let group = match groups.iter().position(|g| g.fields == *schema.fields()) {
            Some(found) => found,
            None => {
                groups.push(Building::new(&schema, at, columns)?);
                groups.len() - 1
            }
        };
        let group = &mut groups[group];
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
            group.partitions.extend(values.iter().map(|&p| p as u32));
            let mut arrays = batch.project(&group.keep)?.columns().to_vec();
            arrays.push(Arc::new(UInt32Array::from(vec![id; batch.num_rows()])));
            group.batches.push(RecordBatch::try_new(
                SchemaRef::clone(&group.schema),
                arrays,
            )?);
        }
    }
    Ok(groups
        .into_iter()
        .map(|g| Group {
            schema: g.schema,
            batches: g.batches,
            partitions: UInt32Array::from(g.partitions),
        })
        .collect())
}

/// A group while shards are added to it.
struct Building {
    /// The shards' fields, which a shard must equal to join the group.
    fields: Fields,
    /// The columns kept from each shard (all but a dropped partition column).
    keep: Vec<usize>,
    /// The kept fields and the id column, the first shard's metadata.
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    partitions: Vec<u32>,
}

impl Building {
    fn new(schema: &Schema, partition_at: usize, columns: &Columns<'_>) -> Result<Self, Refusal> {
        let keep: Vec<usize> = (0..schema.fields().len())
            .filter(|&i| !(columns.drop_partition && i == partition_at))
            .collect();
        let kept = schema.project(&keep)?;
        let mut fields: Vec<Arc<Field>> = kept.fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(
            columns.input_partition_id,
            DataType::UInt32,
            true,
        )));
        Ok(Building {
            fields: schema.fields().clone(),
            keep,
            schema: SchemaRef::new(Schema::new_with_metadata(fields, kept.metadata().clone())),
            batches: Vec::new(),
            partitions: Vec::new(),
        })
    }
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
