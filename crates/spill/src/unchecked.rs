//! Arrays built without validating them again, and spilled segments decoded the same way: the
//! one module of the workspace where `unsafe` is allowed.
//!
//! `ArrayDataBuilder::build()` checks every array it builds, and for `Utf8` and `Utf8View` that
//! is a pass over every byte (UTF-8) and every view. The buffer copies rows from arrays that
//! were valid already, and reads back segments it wrote itself from valid arrays; checking
//! them again cost 5-14% of the DataFusion exchange's CPU and 5-8% of the CLI's at 1,024
//! partitions (docs/benchmarks.md). arrow-rs does the same for its own kernels (`take`,
//! `interleave`, `MutableArrayData::freeze` build unchecked), as do DataFusion's spill reader
//! and Comet's shuffle reader (`with_skip_validation` on IPC they wrote).
//!
//! What is here, each behind a safe interface whose own code keeps the invariant the
//! `unsafe` relies on:
//!
//! - [`CopiedBytes`]: the offsets and values of a `Utf8`/`Binary` column (or their `Large`
//!   forms) being filled. Its buffers are private and change only by appending *whole values*
//!   of a valid array, so the offsets start at 0, ascend and end at the values' length, and
//!   every value of a string column is a whole value of a valid string array.
//! - [`CopiedViews`]: the views and one data buffer of a `Utf8View`/`BinaryView` column, filled
//!   the same way: a short view is copied as it is, a long value's bytes are copied into the
//!   data buffer and its view rewritten to point there (same length and prefix).
//! - [`SegmentDecoder`]: decodes a segment's IPC messages, without validation only for a
//!   segment this process wrote (its `SegmentRef`) and only after its CRC32C matched
//!   (`decode/`); bytes from anywhere else are validated as always.
//!
//! A string column that was ever given binary rows, an array whose type is not the column's,
//! or lengths that disagree are built with `build()` (validated) or refused, never unchecked.
//! In debug builds (every test, proptest and fuzz run) each array built here, and each batch
//! decoded unchecked, is also checked with `validate_full()`: a violation is an error there.

#![expect(
    unsafe_code,
    reason = "the workspace's one audited module: arrays known valid are built unchecked"
)]

use arrow_array::types::{ByteArrayType, ByteViewType};
use arrow_array::{
    Array, ArrayRef, GenericByteArray, GenericByteViewArray, OffsetSizeTrait, RecordBatch,
};
use std::collections::HashMap;
use std::sync::Arc;

use arrow_buffer::{ArrowNativeType, Buffer, MutableBuffer, NullBuffer};
use arrow_data::{ArrayData, ArrayDataBuilder, ByteView, UnsafeFlag};
use arrow_ipc::MessageHeader;
use arrow_ipc::reader::{RecordBatchDecoder, read_dictionary_impl};
use arrow_schema::{ArrowError, DataType, Schema, SchemaRef};

/// The offsets and values of a byte column being filled from valid arrays (see the module
/// docs), built into an array without validating it again ([`finish`](Self::finish)).
#[derive(Debug)]
pub struct CopiedBytes {
    /// i64 offsets (`LargeUtf8`, `LargeBinary`) rather than i32.
    large: bool,
    /// Empty, or one offset per row plus one: 0 first, ascending, the last `values.len()`.
    offsets: MutableBuffer,
    values: MutableBuffer,
    /// Whether rows of a binary array were copied in (their bytes may not be UTF-8).
    binary: bool,
}

impl CopiedBytes {
    /// An empty column with i64 offsets if `large`, i32 otherwise; allocates nothing.
    pub fn new(large: bool) -> Self {
        Self {
            large,
            offsets: MutableBuffer::new(0),
            values: MutableBuffer::new(0),
            binary: false,
        }
    }

    /// Whether its offsets are i64.
    pub fn is_large(&self) -> bool {
        self.large
    }

    /// The offsets buffer (its length and capacity, for sizing).
    pub fn offsets(&self) -> &MutableBuffer {
        &self.offsets
    }

    /// The values buffer (its length and capacity, for sizing).
    pub fn values(&self) -> &MutableBuffer {
        &self.values
    }

    /// Grows the offsets and values buffers to at least these capacities (one exact
    /// allocation each, the contents copied over), so that appends up to them never
    /// reallocate.
    pub fn grow_to(&mut self, offsets_capacity: usize, values_capacity: usize) {
        grow_to(&mut self.offsets, offsets_capacity);
        grow_to(&mut self.values, values_capacity);
    }

    /// Appends `array[start..start + len]` (one copy of its value bytes, its offsets rebased).
    pub fn append_range<T: ByteArrayType>(
        &mut self,
        array: &GenericByteArray<T>,
        start: usize,
        len: usize,
    ) -> Result<(), ArrowError> {
        self.check_source::<T>()?;
        let source = array.value_offsets();
        let end = start
            .checked_add(len)
            .filter(|end| *end < source.len())
            .ok_or_else(|| out_of_bounds(start, len, array.len()))?;
        let (first, last) = (source[start].as_usize(), source[end].as_usize());
        let base = self.values.len();
        offset_of::<T>(base + (last - first))?;
        self.start_offsets::<T>();
        self.values
            .extend_from_slice(&array.value_data()[first..last]);
        self.offsets.extend(
            source[start + 1..=end]
                .iter()
                .map(|o| T::Offset::usize_as(base + o.as_usize() - first)),
        );
        Ok(())
    }

    /// Appends every row of `array` to `targets[range_of_row[row]]`, in row order. Refuses
    /// before copying anything if a target cannot take `array`'s type, or if `range_of_row`
    /// does not name a target for every row.
    pub fn append_tagged<T: ByteArrayType>(
        targets: &mut [&mut CopiedBytes],
        array: &GenericByteArray<T>,
        range_of_row: &[u32],
    ) -> Result<(), ArrowError> {
        check_tags(targets.len(), array.len(), range_of_row)?;
        for target in targets.iter_mut() {
            target.check_source::<T>()?;
            target.start_offsets::<T>();
        }
        let data = array.value_data();
        let source = array.value_offsets();
        for (i, &k) in range_of_row.iter().enumerate() {
            let target = &mut *targets[k as usize];
            let value = &data[source[i].as_usize()..source[i + 1].as_usize()];
            let end = offset_of::<T>(target.values.len() + value.len())?;
            target.values.extend_from_slice(value);
            target.offsets.push(end);
        }
        Ok(())
    }

    /// Refuses an array this column cannot take (other offsets), and notes binary rows.
    fn check_source<T: ByteArrayType>(&mut self) -> Result<(), ArrowError> {
        if T::Offset::IS_LARGE != self.large {
            return Err(ArrowError::SchemaError(format!(
                "a {} array does not match its open column",
                T::DATA_TYPE
            )));
        }
        self.binary |= matches!(T::DATA_TYPE, DataType::Binary | DataType::LargeBinary);
        Ok(())
    }

    /// Writes the leading 0 offset before the first row.
    fn start_offsets<T: ByteArrayType>(&mut self) {
        if self.offsets.is_empty() {
            self.offsets.push(T::Offset::usize_as(0));
        }
    }

    /// The column's rows as an array of `data_type` with validity `nulls`: built unchecked,
    /// unless a string column was given binary rows (then validated).
    pub fn finish(
        mut self,
        data_type: &DataType,
        nulls: Option<NullBuffer>,
    ) -> Result<ArrayRef, ArrowError> {
        let (large, utf8) = match data_type {
            DataType::Utf8 => (false, true),
            DataType::LargeUtf8 => (true, true),
            DataType::Binary => (false, false),
            DataType::LargeBinary => (true, false),
            other => return Err(wrong_type(other, "byte")),
        };
        if large != self.large {
            return Err(wrong_type(data_type, "byte"));
        }
        if self.offsets.is_empty() {
            if large {
                self.offsets.push(0i64);
            } else {
                self.offsets.push(0i32);
            }
        }
        let width = if large { 8 } else { 4 };
        let rows = self.offsets.len() / width - 1;
        let builder = ArrayData::builder(data_type.clone())
            .len(rows)
            .add_buffer(self.offsets.into())
            .add_buffer(self.values.into());
        let trusted = !(utf8 && self.binary);
        build(builder, nulls, rows, trusted)
    }
}

/// The views and data of a view column being filled from valid arrays (see the module docs),
/// built into an array without validating it again ([`finish`](Self::finish)).
#[derive(Debug)]
pub struct CopiedViews {
    /// One view per row: short values inline, long ones pointing into `data` (buffer 0).
    views: MutableBuffer,
    data: MutableBuffer,
    /// Whether rows of a binary view array were copied in.
    binary: bool,
}

impl Default for CopiedViews {
    fn default() -> Self {
        Self::new()
    }
}

impl CopiedViews {
    /// An empty column; allocates nothing.
    pub fn new() -> Self {
        Self {
            views: MutableBuffer::new(0),
            data: MutableBuffer::new(0),
            binary: false,
        }
    }

    /// The views buffer (its length and capacity, for sizing).
    pub fn views(&self) -> &MutableBuffer {
        &self.views
    }

    /// The data buffer of long values (its length and capacity, for sizing).
    pub fn data(&self) -> &MutableBuffer {
        &self.data
    }

    /// Grows the views and data buffers to at least these capacities (see
    /// [`CopiedBytes::grow_to`]).
    pub fn grow_to(&mut self, views_capacity: usize, data_capacity: usize) {
        grow_to(&mut self.views, views_capacity);
        grow_to(&mut self.data, data_capacity);
    }

    /// Appends `array[start..start + len]`.
    pub fn append_range<T: ByteViewType + ?Sized>(
        &mut self,
        array: &GenericByteViewArray<T>,
        start: usize,
        len: usize,
    ) -> Result<(), ArrowError> {
        let end = start
            .checked_add(len)
            .filter(|end| *end <= array.len())
            .ok_or_else(|| out_of_bounds(start, len, array.len()))?;
        self.binary |= !T::IS_UTF8;
        let buffers = array.data_buffers();
        for &view in &array.views()[start..end] {
            push_view(self, buffers, view)?;
        }
        Ok(())
    }

    /// Appends every row of `array` to `targets[range_of_row[row]]`, in row order (see
    /// [`CopiedBytes::append_tagged`]).
    pub fn append_tagged<T: ByteViewType + ?Sized>(
        targets: &mut [&mut CopiedViews],
        array: &GenericByteViewArray<T>,
        range_of_row: &[u32],
    ) -> Result<(), ArrowError> {
        check_tags(targets.len(), array.len(), range_of_row)?;
        for target in targets.iter_mut() {
            target.binary |= !T::IS_UTF8;
        }
        let buffers = array.data_buffers();
        for (&view, &k) in array.views().iter().zip(range_of_row) {
            push_view(targets[k as usize], buffers, view)?;
        }
        Ok(())
    }

    /// The column's rows as an array of `data_type` with validity `nulls`: built unchecked,
    /// unless a string column was given binary rows (then validated).
    pub fn finish(
        self,
        data_type: &DataType,
        nulls: Option<NullBuffer>,
    ) -> Result<ArrayRef, ArrowError> {
        let utf8 = match data_type {
            DataType::Utf8View => true,
            DataType::BinaryView => false,
            other => return Err(wrong_type(other, "view")),
        };
        let rows = self.views.len() / 16;
        let builder = ArrayData::builder(data_type.clone())
            .len(rows)
            .add_buffer(self.views.into());
        let builder = if self.data.is_empty() {
            builder
        } else {
            builder.add_buffer(self.data.into())
        };
        build(builder, nulls, rows, !(utf8 && self.binary))
    }
}

/// Appends one view of a valid array whose data buffers are `buffers`: a short one as it is, a
/// long one's bytes copied to the end of `target.data`, its view pointing there.
#[inline]
fn push_view(target: &mut CopiedViews, buffers: &[Buffer], view: u128) -> Result<(), ArrowError> {
    let length = view as u32;
    if length <= 12 {
        target.views.push(view);
        return Ok(());
    }
    let v = ByteView::from(view);
    let from = v.offset as usize;
    let bytes = buffers
        .get(v.buffer_index as usize)
        .and_then(|b| b.get(from..from + length as usize))
        .ok_or_else(|| ArrowError::InvalidArgumentError("a view points past its data".into()))?;
    let offset = u32::try_from(target.data.len())
        .ok()
        .filter(|o| o.checked_add(length).is_some())
        .ok_or_else(|| {
            ArrowError::ComputeError("an open view column would pass 4 GiB of data".into())
        })?;
    target.data.extend_from_slice(bytes);
    target.views.push(
        ByteView {
            buffer_index: 0,
            offset,
            ..v
        }
        .as_u128(),
    );
    Ok(())
}

/// Builds `builder` with `nulls` as an array of `rows` rows: unchecked if `trusted` (and then
/// fully validated in debug builds), validated otherwise.
fn build(
    builder: ArrayDataBuilder,
    nulls: Option<NullBuffer>,
    rows: usize,
    trusted: bool,
) -> Result<ArrayRef, ArrowError> {
    if nulls.as_ref().is_some_and(|n| n.len() != rows) {
        return Err(ArrowError::InvalidArgumentError(format!(
            "an open column has {rows} rows but validity for {}",
            nulls.map_or(0, |n| n.len())
        )));
    }
    let builder = builder.nulls(nulls);
    let data = if trusted {
        // SAFETY: the builder comes from `CopiedBytes::finish` or `CopiedViews::finish`, whose
        // buffers changed only through their appends: whole values of valid arrays of the
        // column's kind (a string column given binary rows is not `trusted`), offsets from 0
        // ascending to the values' length, i32 offsets checked to fit, long views pointing at
        // their copied bytes within u32 range. `rows` is the number of offsets less one (views
        // over 16), and the validity, if any, was checked above to have `rows` bits.
        let data = unsafe { builder.build_unchecked() };
        if cfg!(debug_assertions) {
            data.validate_full()?;
        }
        data
    } else {
        builder.build()?
    };
    Ok(arrow_array::make_array(data))
}

/// Decodes one segment's IPC messages, one at a time, as the verifying pass split them
/// (`decode/verify.rs`): a schema, dictionaries, record batches, the end marker. Validation is
/// skipped only when `written_here`: the segment was written by this process's `RunWriter` from
/// valid arrays (its `SegmentRef` says so) and each body was checked against the CRC32C
/// computed then before it reaches [`decode`](Self::decode) (`decode/mod.rs`, both passes);
/// [`check_decoded`] then validates its batches fully in debug builds. Any other bytes (the
/// fuzz targets' forged payloads) are validated by arrow-ipc as usual.
///
/// Our own message loop rather than arrow-ipc's `StreamDecoder`: its `with_skip_validation`
/// reaches dictionaries but not record batches (arrow-ipc 60.1, `reader/stream.rs`), which were
/// still validated, UTF-8 of every string included.
#[derive(Debug)]
pub(crate) struct SegmentDecoder {
    schema: Option<SchemaRef>,
    dictionaries: HashMap<i64, ArrayRef>,
    skip_validation: UnsafeFlag,
    ended: bool,
}

impl SegmentDecoder {
    pub(crate) fn new(written_here: bool) -> Self {
        let mut skip_validation = UnsafeFlag::new();
        if written_here {
            // SAFETY: the flag is set only for a segment this process's writer encoded from
            // valid arrays (`IndexEntry::written_here`), and `decode/mod.rs` hands `decode` only
            // messages whose bytes matched, CRC32C for CRC32C, what that writer wrote.
            unsafe { skip_validation.set(true) };
        }
        Self {
            schema: None,
            dictionaries: HashMap::new(),
            skip_validation,
            ended: false,
        }
    }

    /// The schema the stream declared, once its schema message was decoded.
    pub(crate) fn schema(&self) -> Option<SchemaRef> {
        self.schema.clone()
    }

    /// Decodes one message: `meta` is its 8-byte prefix and flatbuffer, `body` its body; a
    /// record batch message gives its batch.
    pub(crate) fn decode(
        &mut self,
        meta: &[u8],
        body: &Buffer,
    ) -> Result<Option<RecordBatch>, ArrowError> {
        let Some(flatbuffer) = meta.get(8..).filter(|f| !f.is_empty()) else {
            self.ended = true;
            return Ok(None);
        };
        if self.ended {
            return Err(ArrowError::IpcError(
                "a message after the end of the stream".into(),
            ));
        }
        let message = arrow_ipc::root_as_message(flatbuffer)
            .map_err(|e| ArrowError::IpcError(format!("unable to read a message: {e:?}")))?;
        let version = message.version();
        let missing = || ArrowError::IpcError("a batch before the schema".into());
        let header = || ArrowError::IpcError("a message without its header".into());
        match message.header_type() {
            MessageHeader::Schema => {
                let schema = message.header_as_schema().ok_or_else(header)?;
                self.schema = Some(Arc::new(schema_of(schema)?));
                self.dictionaries.clear();
            }
            MessageHeader::DictionaryBatch => {
                let dictionary = message.header_as_dictionary_batch().ok_or_else(header)?;
                let schema = self.schema.as_deref().ok_or_else(missing)?;
                read_dictionary_impl(
                    body,
                    dictionary,
                    schema,
                    &mut self.dictionaries,
                    &version,
                    false,
                    self.skip_validation.clone(),
                )?;
            }
            MessageHeader::RecordBatch => {
                let batch = message.header_as_record_batch().ok_or_else(header)?;
                let schema = self.schema.clone().ok_or_else(missing)?;
                let decoded =
                    RecordBatchDecoder::try_new(body, batch, schema, &self.dictionaries, &version)?
                        .with_require_alignment(false)
                        .with_skip_validation(self.skip_validation.clone())
                        .read_record_batch()?;
                check_decoded(&decoded)?;
                return Ok(Some(decoded));
            }
            MessageHeader::NONE => {}
            other => {
                return Err(ArrowError::IpcError(format!(
                    "a message of type {other:?} in a segment"
                )));
            }
        }
        Ok(None)
    }
}

/// The schema of a schema message (arrow-ipc 60 checks it; 59 panics on a bad one, which the
/// decoder's `catch_unwind` turns into a `Corrupt` error).
fn schema_of(schema: arrow_ipc::Schema<'_>) -> Result<Schema, ArrowError> {
    #[cfg(feature = "arrow_60")]
    return arrow_ipc::convert::try_fb_to_schema(schema);
    #[cfg(not(feature = "arrow_60"))]
    return Ok(arrow_ipc::convert::fb_to_schema(schema));
}

/// In debug builds, validates every column of a batch decoded by a [`SegmentDecoder`] fully.
fn check_decoded(batch: &RecordBatch) -> Result<(), ArrowError> {
    if cfg!(debug_assertions) {
        for column in batch.columns() {
            column.to_data().validate_full()?;
        }
    }
    Ok(())
}

/// Grows `buffer` to at least `capacity` bytes with one exact allocation (contents kept).
fn grow_to(buffer: &mut MutableBuffer, capacity: usize) {
    if capacity > buffer.capacity() {
        let mut larger = MutableBuffer::with_capacity(capacity);
        larger.extend_from_slice(buffer.as_slice());
        *buffer = larger;
    }
}

/// `end` as an offset of `T`, or an error if it does not fit (i32 offsets past 2 GiB).
#[inline]
fn offset_of<T: ByteArrayType>(end: usize) -> Result<T::Offset, ArrowError> {
    T::Offset::from_usize(end).ok_or_else(|| {
        ArrowError::ComputeError(format!(
            "an open {} column would pass its offsets' range",
            T::DATA_TYPE
        ))
    })
}

/// Refuses tags that do not name one of `targets` for each of `rows` rows.
fn check_tags(targets: usize, rows: usize, range_of_row: &[u32]) -> Result<(), ArrowError> {
    if range_of_row.len() != rows || range_of_row.iter().any(|&k| k as usize >= targets) {
        return Err(ArrowError::InvalidArgumentError(
            "rows tagged with no open column".into(),
        ));
    }
    Ok(())
}

fn out_of_bounds(start: usize, len: usize, rows: usize) -> ArrowError {
    ArrowError::InvalidArgumentError(format!("rows {start}..{start}+{len} of an array of {rows}"))
}

fn wrong_type(data_type: &DataType, kind: &str) -> ArrowError {
    ArrowError::SchemaError(format!("a {kind} column cannot be built as {data_type}"))
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::{BinaryArray, LargeStringArray, StringArray, StringViewArray};

    use super::*;

    fn long(i: usize) -> String {
        format!("a value longer than twelve bytes, number {i}")
    }

    #[test]
    fn a_range_of_a_sliced_array_rebases_its_offsets() {
        let source = StringArray::from(vec!["a", "bb", "ccc", "dddd", "eeeee"]);
        let sliced = source.slice(1, 4);
        let mut column = CopiedBytes::new(false);
        column.append_range(&sliced, 1, 2).unwrap();
        column.append_range(&sliced, 0, 1).unwrap();
        let array = column.finish(&DataType::Utf8, None).unwrap();
        assert_eq!(
            array.as_ref(),
            &StringArray::from(vec!["ccc", "dddd", "bb"]) as &dyn Array
        );
    }

    #[test]
    fn tagged_rows_go_to_their_targets_in_row_order() {
        let source = LargeStringArray::from(vec!["x", "yy", "zzz", "w"]);
        let (mut a, mut b) = (CopiedBytes::new(true), CopiedBytes::new(true));
        CopiedBytes::append_tagged(&mut [&mut a, &mut b], &source, &[1, 0, 1, 0]).unwrap();
        let a = a.finish(&DataType::LargeUtf8, None).unwrap();
        let b = b.finish(&DataType::LargeUtf8, None).unwrap();
        assert_eq!(
            a.as_string::<i64>().iter().flatten().collect::<Vec<_>>(),
            ["yy", "w"]
        );
        assert_eq!(
            b.as_string::<i64>().iter().flatten().collect::<Vec<_>>(),
            ["x", "zzz"]
        );
    }

    #[test]
    fn bad_tags_and_other_offsets_are_refused_before_copying() {
        let source = StringArray::from(vec!["x", "y"]);
        let mut a = CopiedBytes::new(false);
        assert!(CopiedBytes::append_tagged(&mut [&mut a], &source, &[0, 1]).is_err());
        assert!(CopiedBytes::append_tagged(&mut [&mut a], &source, &[0]).is_err());
        let mut large = CopiedBytes::new(true);
        assert!(large.append_range(&source, 0, 2).is_err());
        assert!(a.append_range(&source, 1, 2).is_err());
        assert_eq!(a.finish(&DataType::Utf8, None).unwrap().len(), 0);
    }

    #[test]
    fn a_string_column_given_binary_rows_is_validated() {
        let mut column = CopiedBytes::new(false);
        let bad = BinaryArray::from(vec![&[0xffu8, 0xfe][..]]);
        column.append_range(&bad, 0, 1).unwrap();
        assert!(column.finish(&DataType::Utf8, None).is_err());
        let mut column = CopiedBytes::new(false);
        column
            .append_range(&BinaryArray::from(vec![&b"ok"[..]]), 0, 1)
            .unwrap();
        assert_eq!(column.finish(&DataType::Utf8, None).unwrap().len(), 1);
    }

    #[test]
    fn views_copy_long_values_into_one_buffer() {
        let values: Vec<String> = (0..6)
            .map(|i| if i % 2 == 0 { long(i) } else { format!("s{i}") })
            .collect();
        let source = StringViewArray::from_iter_values(&values);
        let (mut a, mut b) = (CopiedViews::new(), CopiedViews::new());
        CopiedViews::append_tagged(&mut [&mut a, &mut b], &source, &[0, 1, 1, 0, 0, 1]).unwrap();
        a.append_range(&source, 1, 2).unwrap();
        let nulls = NullBuffer::from(vec![true, false, true, true, true]);
        let a = a.finish(&DataType::Utf8View, Some(nulls)).unwrap();
        let got: Vec<Option<&str>> = a.as_string_view().iter().collect();
        let want = [
            Some(long(0)),
            None,
            Some(long(4)),
            Some("s1".into()),
            Some(long(2)),
        ];
        assert_eq!(got, want.iter().map(|s| s.as_deref()).collect::<Vec<_>>());
        assert_eq!(a.as_string_view().data_buffers().len(), 1);
        let b = b.finish(&DataType::Utf8View, None).unwrap();
        assert_eq!(b.len(), 3);
    }

    #[test]
    fn validity_of_another_length_is_refused() {
        let mut column = CopiedViews::new();
        column
            .append_range(&StringViewArray::from(vec!["a", "b"]), 0, 2)
            .unwrap();
        let nulls = NullBuffer::from(vec![true]);
        assert!(column.finish(&DataType::Utf8View, Some(nulls)).is_err());
        let column = CopiedViews::new();
        assert!(column.finish(&DataType::Utf8, None).is_err());
    }
}
