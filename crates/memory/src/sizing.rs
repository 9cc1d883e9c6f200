//! Counting the bytes a batch keeps alive, by distinct allocation.
//!
//! [`batch_allocations`] is the one place in the workspace that walks a batch's memory: every
//! buffer of every array, its null buffer, its children and dictionary values, keyed by the start
//! of the allocation the buffer lives in (`Buffer::data_ptr`) and charged at that allocation's
//! capacity. So:
//! - a 10-row slice of a 1M-row batch costs the whole parent allocation, because that is what it
//!   keeps alive;
//! - an array used twice in one batch costs once;
//! - a batch decoded from one IPC message, whose arrays are all slices of one body buffer, costs
//!   that body once;
//! - a view array costs its views buffer plus each data buffer once.
//!
//! `RecordBatch::get_array_memory_size` is not used: it counts every slice as its parent and
//! counts shared arrays twice (see `docs/memory-accounting.md`).

use arrow_array::cast::AsArray;
use arrow_array::types::{ByteArrayType, ByteViewType};
use arrow_array::{
    Array, GenericByteArray, GenericByteViewArray, RecordBatch, downcast_primitive_array,
};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_schema::DataType;

/// One allocation a batch keeps alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Allocation {
    /// Address of the allocation's first byte; the identity of the allocation.
    pub ptr: usize,
    /// Its capacity in bytes.
    pub capacity: usize,
}

/// The distinct allocations `batch` keeps alive, each listed once.
pub fn batch_allocations(batch: &RecordBatch) -> Vec<Allocation> {
    let mut seen = Vec::with_capacity(batch.num_columns() * 3);
    for column in batch.columns() {
        visit_array(column.as_ref(), &mut seen);
    }
    distinct(seen)
}

/// The distinct allocations `array` keeps alive, each listed once.
pub fn array_allocations(array: &dyn Array) -> Vec<Allocation> {
    let mut seen = Vec::new();
    visit_array(array, &mut seen);
    distinct(seen)
}

/// The bytes `batch` keeps alive: the sum of [`batch_allocations`].
pub fn batch_memory_size(batch: &RecordBatch) -> usize {
    batch_allocations(batch).iter().map(|a| a.capacity).sum()
}

/// The bytes of data `batch`'s own rows hold: for each array the part of its buffers its slice
/// covers (values, offsets, validity), list children only where the offsets point, view data
/// only for the long values its views point at, dictionary values whole. This is what writing the batch to an Arrow IPC stream
/// writes (before padding and metadata), unlike [`batch_memory_size`], which counts what the
/// batch keeps alive: a 10-row slice of a 1M-row batch holds 10 rows of data but keeps the
/// parent's allocations alive.
pub fn batch_data_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|column| data_bytes(&column.to_data()))
        .sum()
}

/// [`batch_data_bytes`] of one array.
pub fn array_data_bytes(array: &dyn Array) -> usize {
    data_bytes(&array.to_data())
}

fn data_bytes(data: &ArrayData) -> usize {
    let nulls = data.nulls().map_or(0, |_| data.len().div_ceil(8));
    let list = |width: usize, start: usize, end: usize| {
        let child = &data.child_data()[0];
        let end = end.min(child.len());
        let start = start.min(end);
        nulls + width * (data.len() + 1) + data_bytes(&child.slice(start, end - start))
    };
    match data.data_type() {
        DataType::List(_) | DataType::Map(_, _) => {
            let offsets = data.buffer::<i32>(0);
            let (first, last) = (offsets[0].max(0), offsets[data.len()].max(0));
            list(4, first as usize, last as usize)
        }
        DataType::LargeList(_) => {
            let offsets = data.buffer::<i64>(0);
            let (first, last) = (offsets[0].max(0), offsets[data.len()].max(0));
            list(8, first as usize, last as usize)
        }
        DataType::FixedSizeList(_, size) => {
            let size = usize::try_from(*size).unwrap_or(0);
            let start = data.offset() * size;
            list(0, start, start + data.len() * size)
        }
        // A `StructArray`'s data holds its children sliced already; other struct data may
        // hold them whole, with the struct's offset.
        DataType::Struct(_) => {
            let rows = |child: &ArrayData| match child.len() > data.len() {
                true => data_bytes(&child.slice(data.offset(), data.len())),
                false => data_bytes(child),
            };
            nulls + data.child_data().iter().map(rows).sum::<usize>()
        }
        // The spill writer compacts views (a slice's views may point into buffers holding
        // every other row's values too): only the long values its rows point at count.
        DataType::Utf8View | DataType::BinaryView => {
            let long: usize = data.buffer::<u128>(0)[..data.len()]
                .iter()
                .map(|view| *view as u32 as usize)
                .filter(|&len| len > 12)
                .sum();
            nulls + 16 * data.len() + long
        }
        // Everything else (primitives, bytes, dictionaries) arrow measures itself; on a
        // malformed array, its buffers' lengths.
        _ => data
            .get_slice_memory_size()
            .unwrap_or_else(|_| data.buffers().iter().map(Buffer::len).sum()),
    }
}

/// Fixed bytes a batch held in memory costs beyond its buffers' capacities: the batch's column
/// list, one `Arc`'d array struct per column, one `Arc`'d `Bytes` header per allocation, the
/// allocator's header on each of those, and a holder's per-batch bookkeeping (an entry in its
/// batch list, the batch's allocation list, one allocation-set entry per allocation).
///
/// The constants are calibrated by the counting-allocator test
/// `crates/arrow-shards/tests/alloc_accounting.rs` (see `docs/memory-accounting.md`); for a
/// 16-column, 8-row batch they are most of what it costs.
pub fn batch_overhead(batch: &RecordBatch, allocations: usize) -> usize {
    fixed_overhead(batch.num_columns(), allocations)
}

/// [`batch_overhead`] of a batch of `columns` columns and `allocations` allocations.
pub fn fixed_overhead(columns: usize, allocations: usize) -> usize {
    BATCH_OVERHEAD + columns * COLUMN_OVERHEAD + allocations * ALLOCATION_OVERHEAD
}

/// Per batch: the holder's entry (~120 bytes with vector slack) and the column list.
pub const BATCH_OVERHEAD: usize = 160;
/// Per column: an `Arc<dyn Array>` (arrays are 96-150 bytes) with its allocator header.
pub const COLUMN_OVERHEAD: usize = 160;
/// Per allocation: the `Arc<Bytes>` header and the allocation-set entry (the allocation list is
/// counted at its capacity by the holder).
pub const ALLOCATION_OVERHEAD: usize = 96;

/// Sorting and deduplicating a short list beats hashing it: a batch has a few buffers per column.
fn distinct(mut seen: Vec<Allocation>) -> Vec<Allocation> {
    seen.sort_unstable_by_key(|a| a.ptr);
    seen.dedup_by_key(|a| a.ptr);
    seen
}

/// Reads the buffers of the common flat types directly; `Array::to_data` (which clones the
/// array's layout into a new `ArrayData`, several allocations per column) only for the rest.
/// This is the write path's hot spot: see `examples/write_cost.rs`.
fn visit_array(array: &dyn Array, seen: &mut Vec<Allocation>) {
    let data_type = array.data_type();
    let flat = match data_type {
        DataType::Utf8 => bytes(array.as_string::<i32>(), seen),
        DataType::LargeUtf8 => bytes(array.as_string::<i64>(), seen),
        DataType::Binary => bytes(array.as_binary::<i32>(), seen),
        DataType::LargeBinary => bytes(array.as_binary::<i64>(), seen),
        DataType::Utf8View => views(array.as_string_view(), seen),
        DataType::BinaryView => views(array.as_binary_view(), seen),
        DataType::Boolean => {
            record(array.as_boolean().values().inner(), seen);
            true
        }
        t if t.is_primitive() => {
            downcast_primitive_array!(
                array => {
                    record(array.values().inner(), seen);
                    true
                }
                _ => false
            )
        }
        _ => false,
    };
    if flat {
        if let Some(nulls) = array.nulls() {
            record(nulls.buffer(), seen);
        }
    } else {
        visit_data(&array.to_data(), seen);
    }
}

fn bytes<T: ByteArrayType>(array: &GenericByteArray<T>, seen: &mut Vec<Allocation>) -> bool {
    record(array.offsets().inner().inner(), seen);
    record(array.values(), seen);
    true
}

fn views<T: ByteViewType + ?Sized>(
    array: &GenericByteViewArray<T>,
    seen: &mut Vec<Allocation>,
) -> bool {
    record(array.views().inner(), seen);
    for buffer in array.data_buffers().iter() {
        record(buffer, seen);
    }
    true
}

fn visit_data(data: &ArrayData, seen: &mut Vec<Allocation>) {
    for buffer in data.buffers() {
        record(buffer, seen);
    }
    if let Some(nulls) = data.nulls() {
        record(nulls.buffer(), seen);
    }
    for child in data.child_data() {
        visit_data(child, seen);
    }
}

fn record(buffer: &Buffer, seen: &mut Vec<Allocation>) {
    let capacity = buffer.capacity();
    if capacity > 0 {
        seen.push(Allocation {
            ptr: buffer.data_ptr().as_ptr() as usize,
            capacity,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::builder::{ListBuilder, StringDictionaryBuilder, StringViewBuilder};
    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, Int64Array, StringArray, StructArray};
    use arrow_schema::{DataType, Field};

    /// A slice holds its rows' data, not its parent's: values, offsets, list children where
    /// the offsets point, long view values it points at, struct children's rows.
    #[test]
    fn data_bytes_count_a_slices_own_rows() {
        let batch_of = |array: ArrayRef| RecordBatch::try_from_iter([("a", array)]).unwrap();
        // int64: 8 bytes a row
        let parent = batch_of(ints(1000));
        assert_eq!(batch_data_bytes(&parent), 8000);
        assert_eq!(batch_data_bytes(&parent.slice(10, 100)), 800);
        // utf8: offsets (rows + 1) and the value bytes of its rows
        let strings: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..1000).map(|i| if i < 500 { "ab" } else { "abcdef" }),
        ));
        let parent = batch_of(strings);
        assert_eq!(batch_data_bytes(&parent.slice(0, 10)), 4 * 11 + 20);
        assert_eq!(batch_data_bytes(&parent.slice(600, 10)), 4 * 11 + 60);
        // list<int64>: offsets and the child values its offsets point at
        let mut list = ListBuilder::new(arrow_array::builder::Int64Builder::new());
        for i in 0..100 {
            list.values().append_slice(&[i; 3]);
            list.append(true);
        }
        let parent = batch_of(Arc::new(list.finish()));
        assert_eq!(batch_data_bytes(&parent.slice(50, 10)), 4 * 11 + 8 * 30);
        // views: 16 bytes a row plus the long (> 12 bytes) values its rows point at
        let mut views = StringViewBuilder::new();
        for i in 0..100 {
            views.append_value(if i % 2 == 0 {
                "short"
            } else {
                "a value of 20 bytes."
            });
        }
        let parent = batch_of(Arc::new(views.finish()));
        assert_eq!(batch_data_bytes(&parent.slice(0, 10)), 16 * 10 + 5 * 20);
        // dictionary: keys of its rows, the values whole (an IPC stream writes them whole)
        let mut dict = StringDictionaryBuilder::<Int32Type>::new();
        for i in 0..100 {
            dict.append_value(["x", "yy", "zzz"][i % 3]);
        }
        let parent = batch_of(Arc::new(dict.finish()));
        assert_eq!(batch_data_bytes(&parent.slice(0, 10)), 4 * 10 + 4 * 4 + 6);
        // struct: its children's rows
        let fields = vec![Field::new("i", DataType::Int64, false)];
        let array = StructArray::new(fields.into(), vec![ints(100)], None);
        let parent = batch_of(Arc::new(array));
        assert_eq!(batch_data_bytes(&parent.slice(20, 10)), 80);
    }

    fn ints(n: i64) -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(0..n))
    }

    #[test]
    fn slice_costs_its_parent_allocation() {
        let batch = RecordBatch::try_from_iter([("a", ints(100_000))]).unwrap();
        let whole = batch_memory_size(&batch);
        assert!(whole >= 800_000);
        assert_eq!(batch_memory_size(&batch.slice(10, 10)), whole);
    }

    #[test]
    fn array_used_twice_costs_once() {
        let a = ints(1000);
        let once = RecordBatch::try_from_iter([("a", a.clone())]).unwrap();
        let twice = RecordBatch::try_from_iter([("a", a.clone()), ("b", a)]).unwrap();
        assert_eq!(batch_memory_size(&once), batch_memory_size(&twice));
    }

    #[test]
    fn nulls_and_offsets_and_values_are_all_counted() {
        let s: ArrayRef = Arc::new(StringArray::from_iter(
            (0..1000).map(|i| (i % 3 != 0).then(|| format!("value-{i}"))),
        ));
        let batch = RecordBatch::try_from_iter([("s", s)]).unwrap();
        // offsets 4004 bytes + values ~8 KB + validity 125 bytes, rounded up to 64-byte blocks
        let size = batch_memory_size(&batch);
        assert!(size > 4004 + 5000 + 125, "{size}");
        assert_eq!(batch_allocations(&batch).len(), 3);
    }

    #[test]
    fn dictionaries_count_keys_and_values() {
        let mut b = StringDictionaryBuilder::<Int32Type>::new();
        for i in 0..1000 {
            b.append_value(format!("k{}", i % 10));
        }
        let batch = RecordBatch::try_from_iter([("d", Arc::new(b.finish()) as ArrayRef)]).unwrap();
        // keys, dictionary offsets, dictionary values
        assert_eq!(batch_allocations(&batch).len(), 3);
        assert!(batch_memory_size(&batch) >= 4000);
    }

    #[test]
    fn views_count_views_and_each_data_buffer_once() {
        let mut b = StringViewBuilder::new().with_fixed_block_size(8192);
        for i in 0..2000 {
            b.append_value(format!("a string longer than twelve bytes {i}"));
        }
        let array = b.finish();
        let blocks = array.data_buffers().len();
        assert!(blocks > 1);
        let a: ArrayRef = Arc::new(array);
        let batch = RecordBatch::try_from_iter([("v", a.clone()), ("w", a)]).unwrap();
        assert_eq!(batch_allocations(&batch).len(), blocks + 1);
        assert!(batch_memory_size(&batch) >= 2000 * 16 + blocks * 8192 / 2);
    }

    #[test]
    fn nested_types_count_children() {
        let mut lb = ListBuilder::new(arrow_array::builder::Int64Builder::new());
        for i in 0..100 {
            lb.values().append_slice(&[i, i + 1, i + 2]);
            lb.append(true);
        }
        let list: ArrayRef = Arc::new(lb.finish());
        let strukt: ArrayRef = Arc::new(StructArray::from(vec![
            (
                Arc::new(Field::new("l", list.data_type().clone(), true)),
                list.clone(),
            ),
            (Arc::new(Field::new("i", DataType::Int64, false)), ints(100)),
        ]));
        let batch = RecordBatch::try_from_iter([("s", strukt)]).unwrap();
        // list offsets + list values + ints
        assert_eq!(batch_allocations(&batch).len(), 3);
        assert!(batch_memory_size(&batch) >= 101 * 4 + 300 * 8 + 100 * 8);
    }

    #[test]
    fn ipc_decoded_batch_counts_its_message_body_once() {
        let batch = RecordBatch::try_from_iter([
            ("a", ints(10_000)),
            ("b", ints(10_000)),
            (
                "c",
                Arc::new(StringArray::from_iter_values(
                    (0..10_000).map(|i| i.to_string()),
                )) as _,
            ),
        ])
        .unwrap();
        let mut bytes = Vec::new();
        {
            let mut w =
                arrow_ipc::writer::StreamWriter::try_new(&mut bytes, &batch.schema()).unwrap();
            w.write(&batch).unwrap();
            w.finish().unwrap();
        }
        let decoded = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let size = batch_memory_size(&decoded);
        let naive = decoded.get_array_memory_size();
        // the honest count is close to the data size, far below the naive per-buffer count
        assert!(size < batch_memory_size(&batch) * 2, "{size}");
        assert!(naive > size * 2, "naive {naive} vs {size}");
    }

    /// The direct paths for flat types must list exactly what the generic `ArrayData` walk lists.
    #[test]
    fn fast_paths_agree_with_the_array_data_walk() {
        use arrow_array::{BinaryArray, BooleanArray, Float32Array, LargeStringArray};
        let mut views = StringViewBuilder::new().with_fixed_block_size(4096);
        (0..500).for_each(|i| {
            views.append_option((i % 7 != 0).then(|| format!("long view string {i}")))
        });
        let columns: Vec<ArrayRef> = vec![
            ints(1000),
            Arc::new(Float32Array::from_iter(
                (0..1000).map(|i| (i % 3 != 0).then_some(i as f32)),
            )),
            Arc::new(StringArray::from_iter(
                (0..1000).map(|i| (i % 5 != 0).then(|| i.to_string())),
            )),
            Arc::new(LargeStringArray::from_iter_values(
                (0..1000).map(|i| i.to_string()),
            )),
            Arc::new(BinaryArray::from_iter_values(
                (0..1000).map(|i: i32| i.to_le_bytes()),
            )),
            Arc::new(BooleanArray::from_iter(
                (0..1000).map(|i| (i % 2 == 0).then_some(i % 3 == 0)),
            )),
            Arc::new(views.finish()),
        ];
        for column in columns {
            for array in [column.clone(), column.slice(3, 400)] {
                let mut generic = Vec::new();
                visit_data(&array.to_data(), &mut generic);
                assert_eq!(
                    array_allocations(array.as_ref()),
                    distinct(generic),
                    "{}",
                    array.data_type()
                );
            }
        }
    }

    #[test]
    fn empty_batch_costs_nothing_beyond_its_buffers() {
        let batch = RecordBatch::try_from_iter([("a", ints(0))]).unwrap();
        assert_eq!(batch_memory_size(&batch), 0);
    }
}
