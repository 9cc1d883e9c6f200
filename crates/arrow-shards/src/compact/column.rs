//! One column of an open batch: rows copied in from written batches, grown geometrically,
//! charged at its capacity.
//!
//! Flat types (fixed-width primitives, booleans, `Utf8`/`Binary` and their large and view
//! forms) are appended with a copy of the rows' bytes into buffers this column owns, so a
//! written shard's own arrays (and any parent they were sliced from) are released as soon as
//! the write returns. Other types (nested, dictionaries, ...) are copied row range by row range
//! with `MutableArrayData` into pieces that are concatenated when the batch is cut.
//!
//! Capacities grow by doubling, capped at what the batch will hold when it is cut (`hint`), so
//! a cut batch wastes little and thousands of open batches start small.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{ByteArrayType, ByteViewType};
use arrow_array::{
    Array, ArrayRef, GenericByteArray, GenericByteViewArray, downcast_primitive_array, make_array,
};
use arrow_buffer::{ArrowNativeType, BooleanBufferBuilder, MutableBuffer, NullBufferBuilder};
use arrow_data::transform::MutableArrayData;
use arrow_data::{ArrayData, ByteView};
use arrow_schema::{ArrowError, DataType};

use arrow_shards_memory::sizing::array_allocations;

/// The smallest allocation a column makes (arrow rounds capacities to 64 bytes anyway).
const MIN_CAPACITY: usize = 64;

/// How far an open column may grow before its batch is cut.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hint {
    /// Rows at which the batch is cut.
    pub(crate) rows: usize,
    /// Bytes of variable-length data at which the batch is cut.
    pub(crate) bytes: usize,
    /// Rows the first allocation of a row-sized buffer is made for (see [`super::Start`]).
    pub(crate) start_rows: usize,
    /// Bytes the first allocation of a variable-length data buffer takes.
    pub(crate) start_bytes: usize,
}

/// One column being filled.
#[derive(Debug)]
pub(crate) enum OpenColumn {
    /// Primitive types: `width` bytes per value.
    Fixed {
        width: usize,
        values: MutableBuffer,
        nulls: NullBufferBuilder,
    },
    Boolean {
        values: BooleanBufferBuilder,
        nulls: NullBufferBuilder,
    },
    /// `Utf8`, `Binary` (`large: false`, i32 offsets) and their `Large` forms (i64 offsets).
    Bytes {
        large: bool,
        offsets: MutableBuffer,
        values: MutableBuffer,
        nulls: NullBufferBuilder,
    },
    /// `Utf8View`, `BinaryView`: long values are copied into one data buffer of our own.
    Views {
        views: MutableBuffer,
        data: MutableBuffer,
        nulls: NullBufferBuilder,
    },
    /// Everything else: copied row ranges, concatenated on cut.
    Pieces { pieces: Vec<ArrayRef>, bytes: usize },
}

impl Hint {
    /// The sizing of a buffer of `width` bytes per row (values, views).
    fn per_row(self, width: usize) -> Sizing {
        Sizing {
            limit: self.rows * width,
            first: self.start_rows * width,
        }
    }

    /// The sizing of an offsets buffer of `width`-byte offsets (one more than the rows).
    fn offsets(self, width: usize) -> Sizing {
        Sizing {
            limit: (self.rows + 1) * width,
            first: (self.start_rows + 1) * width,
        }
    }

    /// The sizing of a variable-length data buffer.
    fn var_data(self) -> Sizing {
        Sizing {
            limit: self.bytes,
            first: self.start_bytes,
        }
    }
}

/// How one buffer of an open column grows: what [`OpenColumn::growth`] predicts and
/// [`ensure`] makes come from the same `Sizing`, so the charge is exact.
#[derive(Debug, Clone, Copy)]
struct Sizing {
    /// Capacity the buffer doubles up to (unless one append needs more).
    limit: usize,
    /// Capacity of its first allocation, at least.
    first: usize,
}

/// New capacity of a buffer of capacity `cap` that must hold `required` bytes: double, at
/// least `sizing.first` for the first allocation, at most `sizing.limit` unless `required` is
/// more.
fn grown(cap: usize, required: usize, sizing: Sizing) -> usize {
    if required <= cap {
        return cap;
    }
    let least = if cap == 0 { sizing.first } else { 0 };
    let doubled = (2 * cap)
        .max(MIN_CAPACITY)
        .max(least)
        .min(sizing.limit.max(required));
    round_up_64(required.max(doubled))
}

/// Bytes [`ensure`] would add to `buffer`'s capacity for `additional` more bytes.
fn growth_of(buffer: &MutableBuffer, additional: usize, sizing: Sizing) -> usize {
    let cap = buffer.capacity();
    grown(cap, buffer.len() + additional, sizing) - cap
}

/// Bytes an offsets buffer takes for `len` more rows (the first append also writes offset 0).
fn offsets_needed(offsets: &MutableBuffer, len: usize, width: usize) -> usize {
    (if offsets.is_empty() { len + 1 } else { len }) * width
}

fn round_up_64(n: usize) -> usize {
    n.div_ceil(64) * 64
}

/// Grows `buffer` so it can take `additional` more bytes, to exactly the capacity [`grown`] says.
fn ensure(buffer: &mut MutableBuffer, additional: usize, sizing: Sizing) {
    let required = buffer.len() + additional;
    let cap = grown(buffer.capacity(), required, sizing);
    if cap > buffer.capacity() {
        let mut larger = MutableBuffer::with_capacity(cap);
        larger.extend_from_slice(buffer.as_slice());
        *buffer = larger;
    }
}

/// Bytes a validity builder may add for `rows` more rows (an upper bound).
fn nulls_growth(nulls: &NullBufferBuilder, source_has_nulls: bool, rows: usize) -> usize {
    if nulls.as_slice().is_none() && !source_has_nulls {
        return 0;
    }
    // The builder materialises (or doubles) a bit buffer; bound it by twice the bits needed.
    round_up_64((nulls.len() + rows).div_ceil(8)) * 2
}

fn append_nulls(nulls: &mut NullBufferBuilder, array: &dyn Array, start: usize, len: usize) {
    match array.nulls() {
        Some(n) if n.null_count() > 0 => nulls.append_buffer(&n.slice(start, len)),
        _ => nulls.append_n_non_nulls(len),
    }
}

impl OpenColumn {
    /// An empty column for `data_type`; allocates nothing.
    pub(crate) fn new(data_type: &DataType) -> Self {
        let nulls = NullBufferBuilder::new(0);
        match data_type {
            DataType::Boolean => OpenColumn::Boolean {
                values: BooleanBufferBuilder::new(0),
                nulls,
            },
            DataType::Utf8 | DataType::Binary | DataType::LargeUtf8 | DataType::LargeBinary => {
                OpenColumn::Bytes {
                    large: matches!(data_type, DataType::LargeUtf8 | DataType::LargeBinary),
                    offsets: MutableBuffer::new(0),
                    values: MutableBuffer::new(0),
                    nulls,
                }
            }
            DataType::Utf8View | DataType::BinaryView => OpenColumn::Views {
                views: MutableBuffer::new(0),
                data: MutableBuffer::new(0),
                nulls,
            },
            t if t.is_primitive() => OpenColumn::Fixed {
                width: t.primitive_width().expect("primitive types have a width"),
                values: MutableBuffer::new(0),
                nulls,
            },
            _ => OpenColumn::Pieces {
                pieces: Vec::new(),
                bytes: 0,
            },
        }
    }

    /// Whether [`super::copy_rows`] can copy an array of `data_type` into this column: it has
    /// the variant (and width) [`new`](Self::new) makes for that type, and is not
    /// [`Pieces`](OpenColumn::Pieces).
    pub(crate) fn takes(&self, data_type: &DataType) -> bool {
        match (self, Self::new(data_type)) {
            (OpenColumn::Fixed { width: a, .. }, OpenColumn::Fixed { width: b, .. }) => *a == b,
            (OpenColumn::Bytes { large: a, .. }, OpenColumn::Bytes { large: b, .. }) => *a == b,
            (OpenColumn::Boolean { .. }, OpenColumn::Boolean { .. })
            | (OpenColumn::Views { .. }, OpenColumn::Views { .. }) => true,
            _ => false,
        }
    }

    /// Bytes this column holds (capacities).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            OpenColumn::Fixed { values, nulls, .. } => values.capacity() + nulls.allocated_size(),
            OpenColumn::Boolean { values, nulls } => values.capacity() / 8 + nulls.allocated_size(),
            OpenColumn::Bytes {
                offsets,
                values,
                nulls,
                ..
            } => offsets.capacity() + values.capacity() + nulls.allocated_size(),
            OpenColumn::Views { views, data, nulls } => {
                views.capacity() + data.capacity() + nulls.allocated_size()
            }
            OpenColumn::Pieces { bytes, .. } => *bytes,
        }
    }

    /// Bytes of data held (buffer lengths).
    pub(crate) fn len_bytes(&self) -> usize {
        let nulls = |n: &NullBufferBuilder| n.as_slice().map_or(0, <[u8]>::len);
        match self {
            OpenColumn::Fixed {
                values, nulls: n, ..
            } => values.len() + nulls(n),
            OpenColumn::Boolean { values, nulls: n } => values.len().div_ceil(8) + nulls(n),
            OpenColumn::Bytes {
                offsets,
                values,
                nulls: n,
                ..
            } => offsets.len() + values.len() + nulls(n),
            OpenColumn::Views {
                views,
                data,
                nulls: n,
            } => views.len() + data.len() + nulls(n),
            OpenColumn::Pieces { bytes, .. } => *bytes,
        }
    }

    /// Bytes of variable-length data held (0 for other columns).
    pub(crate) fn var_len(&self) -> usize {
        match self {
            OpenColumn::Bytes { values, .. } => values.len(),
            OpenColumn::Views { data, .. } => data.len(),
            _ => 0,
        }
    }

    /// Bytes [`append`](Self::append) of `array[start..start + len]` would add to
    /// [`bytes`](Self::bytes) (exact for the buffers, an upper bound for validity).
    pub(crate) fn growth(&self, array: &dyn Array, start: usize, len: usize, hint: Hint) -> usize {
        let var = match self {
            OpenColumn::Bytes { .. } => byte_range_len(array, start, len),
            OpenColumn::Views { .. } => long_view_bytes(array, start, len),
            OpenColumn::Pieces { .. } => {
                // A copy of the range: its share of the array's bytes, at least one allocation
                // per buffer. Reconciled with the real size after the copy.
                let total: usize = array_allocations(array).iter().map(|a| a.capacity).sum();
                let share = total * len / array.len().max(1);
                return share + 64 * (1 + array.to_data().buffers().len());
            }
            _ => 0,
        };
        self.growth_of_rows(len, var, array.null_count() > 0, hint)
    }

    /// Bytes appending `len` rows with `var` bytes of variable-length data (see [`var_bytes`])
    /// would add to [`bytes`](Self::bytes), `has_nulls` if the rows' array has nulls; 0 for a
    /// [`Pieces`](OpenColumn::Pieces) column, which only [`growth`](Self::growth) can size.
    pub(crate) fn growth_of_rows(
        &self,
        len: usize,
        var: usize,
        has_nulls: bool,
        hint: Hint,
    ) -> usize {
        match self {
            OpenColumn::Fixed {
                width: w,
                values,
                nulls,
            } => growth_of(values, len * w, hint.per_row(*w)) + nulls_growth(nulls, has_nulls, len),
            OpenColumn::Boolean { values, nulls } => {
                // BooleanBufferBuilder doubles its byte buffer itself.
                let needed = (values.len() + len).div_ceil(8);
                let cap = values.capacity() / 8;
                (if needed > cap {
                    round_up_64(needed).max(2 * cap)
                } else {
                    cap
                }) - cap
                    + nulls_growth(nulls, has_nulls, len)
            }
            OpenColumn::Bytes {
                large,
                offsets,
                values,
                nulls,
            } => {
                let width = if *large { 8 } else { 4 };
                growth_of(
                    offsets,
                    offsets_needed(offsets, len, width),
                    hint.offsets(width),
                ) + growth_of(values, var, hint.var_data())
                    + nulls_growth(nulls, has_nulls, len)
            }
            OpenColumn::Views { views, data, nulls } => {
                growth_of(views, len * 16, hint.per_row(16))
                    + growth_of(data, var, hint.var_data())
                    + nulls_growth(nulls, has_nulls, len)
            }
            OpenColumn::Pieces { .. } => 0,
        }
    }

    /// Grows the buffers for `len` more rows with `var` bytes of variable-length data, to the
    /// capacities [`growth_of_rows`](Self::growth_of_rows) predicts (validity grows as it is
    /// appended to).
    pub(crate) fn reserve(&mut self, len: usize, var: usize, hint: Hint) {
        match self {
            OpenColumn::Fixed { width, values, .. } => {
                ensure(values, len * *width, hint.per_row(*width));
            }
            OpenColumn::Boolean { values, .. } => values.reserve(len),
            OpenColumn::Bytes {
                large,
                offsets,
                values,
                ..
            } => {
                let width = if *large { 8 } else { 4 };
                ensure(
                    offsets,
                    offsets_needed(offsets, len, width),
                    hint.offsets(width),
                );
                ensure(values, var, hint.var_data());
            }
            OpenColumn::Views { views, data, .. } => {
                ensure(views, len * 16, hint.per_row(16));
                ensure(data, var, hint.var_data());
            }
            OpenColumn::Pieces { .. } => {}
        }
    }

    /// Copies `array[start..start + len]` in.
    pub(crate) fn append(
        &mut self,
        array: &dyn Array,
        start: usize,
        len: usize,
        hint: Hint,
    ) -> Result<(), ArrowError> {
        match self {
            OpenColumn::Fixed {
                width,
                values,
                nulls,
            } => {
                let bytes = fixed_bytes(array);
                let w = *width;
                ensure(values, len * w, hint.per_row(w));
                values.extend_from_slice(&bytes[start * w..(start + len) * w]);
                append_nulls(nulls, array, start, len);
            }
            OpenColumn::Boolean { values, nulls } => {
                let source = array.as_boolean().values();
                let from = source.offset() + start;
                values.append_packed_range(from..from + len, source.inner().as_slice());
                append_nulls(nulls, array, start, len);
            }
            OpenColumn::Bytes {
                offsets,
                values,
                nulls,
                ..
            } => {
                match array.data_type() {
                    DataType::Utf8 => {
                        append_bytes(array.as_string::<i32>(), start, len, offsets, values, hint)
                    }
                    DataType::Binary => {
                        append_bytes(array.as_binary::<i32>(), start, len, offsets, values, hint)
                    }
                    DataType::LargeUtf8 => {
                        append_bytes(array.as_string::<i64>(), start, len, offsets, values, hint)
                    }
                    _ => append_bytes(array.as_binary::<i64>(), start, len, offsets, values, hint),
                }
                append_nulls(nulls, array, start, len);
            }
            OpenColumn::Views { views, data, nulls } => {
                if let DataType::Utf8View = array.data_type() {
                    append_views(array.as_string_view(), start, len, views, data, hint)?;
                } else {
                    append_views(array.as_binary_view(), start, len, views, data, hint)?;
                }
                append_nulls(nulls, array, start, len);
            }
            OpenColumn::Pieces { pieces, bytes } => {
                let source = array.to_data();
                let mut copy = MutableArrayData::new(vec![&source], false, len);
                copy.try_extend(0, start, start + len)?;
                let piece = make_array(copy.freeze());
                *bytes += array_allocations(piece.as_ref())
                    .iter()
                    .map(|a| a.capacity)
                    .sum::<usize>();
                pieces.push(piece);
            }
        }
        Ok(())
    }

    /// The column's rows as an array of `data_type` (`rows` of them); the column is empty after.
    pub(crate) fn finish(
        &mut self,
        data_type: &DataType,
        rows: usize,
    ) -> Result<ArrayRef, ArrowError> {
        let fresh = OpenColumn::new(data_type);
        let data = match std::mem::replace(self, fresh) {
            OpenColumn::Fixed {
                values, mut nulls, ..
            } => ArrayData::builder(data_type.clone())
                .len(rows)
                .add_buffer(values.into())
                .nulls(nulls.finish()),
            OpenColumn::Boolean {
                mut values,
                mut nulls,
            } => {
                let values = values.finish();
                ArrayData::builder(data_type.clone())
                    .len(rows)
                    .add_buffer(values.into_inner())
                    .nulls(nulls.finish())
            }
            OpenColumn::Bytes {
                large,
                mut offsets,
                values,
                mut nulls,
            } => {
                if offsets.is_empty() {
                    if large {
                        offsets.push(0i64);
                    } else {
                        offsets.push(0i32);
                    }
                }
                ArrayData::builder(data_type.clone())
                    .len(rows)
                    .add_buffer(offsets.into())
                    .add_buffer(values.into())
                    .nulls(nulls.finish())
            }
            OpenColumn::Views {
                views,
                data,
                mut nulls,
            } => {
                let mut builder = ArrayData::builder(data_type.clone())
                    .len(rows)
                    .add_buffer(views.into());
                if !data.is_empty() {
                    builder = builder.add_buffer(data.into());
                }
                builder.nulls(nulls.finish())
            }
            OpenColumn::Pieces { pieces, .. } => {
                let refs: Vec<&dyn Array> = pieces.iter().map(|p| p.as_ref()).collect();
                return match refs.len() {
                    0 => Ok(arrow_array::new_empty_array(data_type)),
                    1 => Ok(Arc::clone(&pieces[0])),
                    _ => arrow_shards_spill::concat(&refs), // dictionaries kept as written
                };
            }
        };
        Ok(make_array(data.build()?))
    }
}

/// Bytes `array[start..start + len]` holds of its own (values, offsets, long view data); for
/// types copied as pieces, its share of the array's buffers.
pub(crate) fn range_bytes(array: &dyn Array, start: usize, len: usize) -> usize {
    let validity = if array.null_count() > 0 {
        len.div_ceil(8)
    } else {
        0
    };
    validity
        + match array.data_type() {
            DataType::Boolean => len.div_ceil(8),
            DataType::Utf8 | DataType::Binary => 4 * (len + 1) + byte_range_len(array, start, len),
            DataType::LargeUtf8 | DataType::LargeBinary => {
                8 * (len + 1) + byte_range_len(array, start, len)
            }
            DataType::Utf8View | DataType::BinaryView => {
                16 * len + long_view_bytes(array, start, len)
            }
            t if t.is_primitive() => len * t.primitive_width().unwrap_or(0),
            _ => {
                let total: usize = array_allocations(array).iter().map(|a| a.capacity).sum();
                total * len / array.len().max(1)
            }
        }
}

/// The value bytes of a primitive array (already offset to its first value).
fn fixed_bytes(array: &dyn Array) -> &[u8] {
    downcast_primitive_array!(
        array => array.values().inner().as_slice(),
        t => unreachable!("OpenColumn::Fixed for {t}")
    )
}

/// Value bytes of `array[start..start + len]` for the byte array types.
fn byte_range_len(array: &dyn Array, start: usize, len: usize) -> usize {
    fn range<T: ByteArrayType>(a: &GenericByteArray<T>, start: usize, len: usize) -> usize {
        let offsets = a.value_offsets();
        (offsets[start + len].as_usize()) - offsets[start].as_usize()
    }
    match array.data_type() {
        DataType::Utf8 => range(array.as_string::<i32>(), start, len),
        DataType::Binary => range(array.as_binary::<i32>(), start, len),
        DataType::LargeUtf8 => range(array.as_string::<i64>(), start, len),
        _ => range(array.as_binary::<i64>(), start, len),
    }
}

/// Bytes of the values longer than 12 bytes in `array[start..start + len]` (a view array).
fn long_view_bytes(array: &dyn Array, start: usize, len: usize) -> usize {
    let views = match array.data_type() {
        DataType::Utf8View => array.as_string_view().views(),
        _ => array.as_binary_view().views(),
    };
    views[start..start + len]
        .iter()
        .map(|v| *v as u32 as usize)
        .filter(|&l| l > 12)
        .sum()
}

/// Per range, the bytes of variable-length data its rows of `array` take in an open column
/// (value bytes of the byte types, values longer than 12 bytes of the view types), `range_of_row`
/// naming each row's range; `None` for the other types.
pub(crate) fn var_bytes(
    array: &dyn Array,
    range_of_row: &[u32],
    ranges: usize,
) -> Option<Vec<usize>> {
    fn by_offsets<T: ByteArrayType>(a: &GenericByteArray<T>, rows: &[u32], sums: &mut [usize]) {
        for (w, &k) in a.value_offsets().windows(2).zip(rows) {
            sums[k as usize] += w[1].as_usize() - w[0].as_usize();
        }
    }
    fn by_views(views: &[u128], rows: &[u32], sums: &mut [usize]) {
        for (&v, &k) in views.iter().zip(rows) {
            let len = v as u32 as usize;
            if len > 12 {
                sums[k as usize] += len;
            }
        }
    }
    let mut sums = vec![0usize; ranges];
    match array.data_type() {
        DataType::Utf8 => by_offsets(array.as_string::<i32>(), range_of_row, &mut sums),
        DataType::Binary => by_offsets(array.as_binary::<i32>(), range_of_row, &mut sums),
        DataType::LargeUtf8 => by_offsets(array.as_string::<i64>(), range_of_row, &mut sums),
        DataType::LargeBinary => by_offsets(array.as_binary::<i64>(), range_of_row, &mut sums),
        DataType::Utf8View => by_views(array.as_string_view().views(), range_of_row, &mut sums),
        DataType::BinaryView => by_views(array.as_binary_view().views(), range_of_row, &mut sums),
        _ => return None,
    }
    Some(sums)
}

fn append_bytes<T: ByteArrayType>(
    array: &GenericByteArray<T>,
    start: usize,
    len: usize,
    offsets: &mut MutableBuffer,
    values: &mut MutableBuffer,
    hint: Hint,
) {
    let width = std::mem::size_of::<T::Offset>();
    let source = array.value_offsets();
    let first = source[start].as_usize();
    let last = source[start + len].as_usize();
    ensure(
        offsets,
        offsets_needed(offsets, len, width),
        hint.offsets(width),
    );
    ensure(values, last - first, hint.var_data());
    if offsets.is_empty() {
        offsets.push(T::Offset::usize_as(0));
    }
    let base = values.len();
    for o in &source[start + 1..=start + len] {
        offsets.push(T::Offset::usize_as(o.as_usize() - first + base));
    }
    values.extend_from_slice(&array.value_data()[first..last]);
}

fn append_views<T: ByteViewType + ?Sized>(
    array: &GenericByteViewArray<T>,
    start: usize,
    len: usize,
    views: &mut MutableBuffer,
    data: &mut MutableBuffer,
    hint: Hint,
) -> Result<(), ArrowError> {
    let source = &array.views()[start..start + len];
    let long: usize = source
        .iter()
        .map(|v| *v as u32 as usize)
        .filter(|&l| l > 12)
        .sum();
    if data.len() + long > u32::MAX as usize {
        return Err(ArrowError::ComputeError(
            "an open view column would pass 4 GiB of data".into(),
        ));
    }
    ensure(views, len * 16, hint.per_row(16));
    ensure(data, long, hint.var_data());
    let buffers = array.data_buffers();
    for &view in source {
        let length = view as u32;
        if length <= 12 {
            views.push(view);
            continue;
        }
        let v = ByteView::from(view);
        let from = v.offset as usize;
        let bytes = &buffers[v.buffer_index as usize][from..from + length as usize];
        let offset = data.len() as u32;
        data.extend_from_slice(bytes);
        views.push(
            ByteView {
                buffer_index: 0,
                offset,
                ..v
            }
            .as_u128(),
        );
    }
    Ok(())
}
