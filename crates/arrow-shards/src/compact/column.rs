//! One column of an open batch: rows copied in from written batches, grown geometrically,
//! charged at its capacity.
//!
//! This file owns the column's variants, what it is charged (capacities) and holds (lengths),
//! the growth an append will cause and the growth made before it, and the cut into an array.
//! Rows are copied in by `copy.rs` (`append`, `append_tagged`); which schemas are copied at
//! all is `crate::route`'s (`compactable`, `all_flat`).
//!
//! Flat types (fixed-width primitives, booleans, `Utf8`/`Binary` and their large and view
//! forms) are appended with a copy of the rows' bytes into buffers this column owns, so a
//! written shard's own arrays (and any parent they were sliced from) are released as soon as
//! the write returns. Other types (nested, dictionaries, ...) are copied row range by row range
//! with `MutableArrayData` into pieces that are concatenated when the batch is cut.
//!
//! Capacities grow as `sizing.rs` says: by doubling, capped at what the batch will hold when it
//! is cut (`Hint`), so a cut batch wastes little and thousands of open batches start small.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, make_array};
use arrow_buffer::{BooleanBufferBuilder, MutableBuffer, NullBufferBuilder};
use arrow_data::ArrayData;
use arrow_schema::{ArrowError, DataType};
use arrow_shards_spill::{CopiedBytes, CopiedViews};

use super::measure::{share_bytes, var_range_bytes};
use super::sizing::{
    Hint, bits_growth, capacity_for, ensure, growth_of, nulls_growth, offsets_needed,
};

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
    /// `Utf8`, `Binary` and their `Large` forms: offsets and values filled by whole values and
    /// built without re-validation ([`CopiedBytes`]).
    Bytes {
        bytes: CopiedBytes,
        nulls: NullBufferBuilder,
    },
    /// `Utf8View`, `BinaryView`: long values are copied into one data buffer of our own
    /// ([`CopiedViews`]).
    Views {
        views: CopiedViews,
        nulls: NullBufferBuilder,
    },
    /// Everything else: copied row ranges, concatenated on cut.
    Pieces { pieces: Vec<ArrayRef>, bytes: usize },
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
                    bytes: CopiedBytes::new(matches!(
                        data_type,
                        DataType::LargeUtf8 | DataType::LargeBinary
                    )),
                    nulls,
                }
            }
            DataType::Utf8View | DataType::BinaryView => OpenColumn::Views {
                views: CopiedViews::new(),
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

    /// Whether the copy kernels can copy an array of `data_type` into this column: it has the
    /// variant (and width) [`new`](Self::new) makes for that type, and is not
    /// [`Pieces`](OpenColumn::Pieces).
    pub(crate) fn takes(&self, data_type: &DataType) -> bool {
        self.is_like(&Self::new(data_type))
    }

    /// The error of a column that does not take `array` ([`takes`](Self::takes)).
    pub(crate) fn mismatch(array: &dyn Array) -> ArrowError {
        ArrowError::SchemaError(format!(
            "a {} column does not match its open column",
            array.data_type()
        ))
    }

    /// Whether this column and `other` are of the same flat kind (variant and width), so that
    /// whatever the kernels copy into one they can copy into the other.
    pub(crate) fn is_like(&self, other: &OpenColumn) -> bool {
        match (self, other) {
            (OpenColumn::Fixed { width: a, .. }, OpenColumn::Fixed { width: b, .. }) => a == b,
            (OpenColumn::Bytes { bytes: a, .. }, OpenColumn::Bytes { bytes: b, .. }) => {
                a.is_large() == b.is_large()
            }
            (OpenColumn::Boolean { .. }, OpenColumn::Boolean { .. })
            | (OpenColumn::Views { .. }, OpenColumn::Views { .. }) => true,
            _ => false,
        }
    }

    /// Bytes this column holds (capacities).
    pub(crate) fn bytes(&self) -> usize {
        self.sum(
            |b| b.capacity(),
            |v| v.capacity() / 8,
            NullBufferBuilder::allocated_size,
        )
    }

    /// Bytes of data held (buffer lengths).
    pub(crate) fn len_bytes(&self) -> usize {
        self.sum(
            MutableBuffer::len,
            |v| v.len().div_ceil(8),
            |n| n.as_slice().map_or(0, <[u8]>::len),
        )
    }

    /// The sum over this column's buffers of `buffer`, `bits` and `nulls` (a piece's bytes for
    /// [`Pieces`](OpenColumn::Pieces)).
    fn sum(
        &self,
        buffer: impl Fn(&MutableBuffer) -> usize,
        bits: impl Fn(&BooleanBufferBuilder) -> usize,
        nulls: impl Fn(&NullBufferBuilder) -> usize,
    ) -> usize {
        match self {
            OpenColumn::Fixed {
                values, nulls: n, ..
            } => buffer(values) + nulls(n),
            OpenColumn::Boolean { values, nulls: n } => bits(values) + nulls(n),
            OpenColumn::Bytes { bytes, nulls: n } => {
                buffer(bytes.offsets()) + buffer(bytes.values()) + nulls(n)
            }
            OpenColumn::Views { views, nulls: n } => {
                buffer(views.views()) + buffer(views.data()) + nulls(n)
            }
            OpenColumn::Pieces { bytes, .. } => *bytes,
        }
    }

    /// Bytes of variable-length data held (0 for other columns).
    pub(crate) fn var_len(&self) -> usize {
        match self {
            OpenColumn::Bytes { bytes, .. } => bytes.values().len(),
            OpenColumn::Views { views, .. } => views.data().len(),
            _ => 0,
        }
    }

    /// Bytes [`append`](Self::append) of `array[start..start + len]` would add to
    /// [`bytes`](Self::bytes) (exact for the buffers, an upper bound for validity).
    pub(crate) fn growth(&self, array: &dyn Array, start: usize, len: usize, hint: Hint) -> usize {
        if let OpenColumn::Pieces { .. } = self {
            // A copy of the range: its share of the array's bytes, at least one allocation per
            // buffer. Reconciled with the real size after the copy.
            return share_bytes(array, len) + 64 * (1 + array.to_data().buffers().len());
        }
        let var = var_range_bytes(array, start, len);
        self.growth_of_rows(len, var, array.null_count() > 0, hint)
    }

    /// Bytes appending `len` rows with `var` bytes of variable-length data (see
    /// `measure::var_bytes`) would add to [`bytes`](Self::bytes), `has_nulls` if the rows' array
    /// has nulls; 0 for a [`Pieces`](OpenColumn::Pieces) column, which only
    /// [`growth`](Self::growth) can size.
    pub(crate) fn growth_of_rows(
        &self,
        len: usize,
        var: usize,
        has_nulls: bool,
        hint: Hint,
    ) -> usize {
        let (buffers, nulls) = match self {
            OpenColumn::Fixed {
                width: w,
                values,
                nulls,
            } => (growth_of(values, len * w, hint.per_row(*w)), nulls),
            OpenColumn::Boolean { values, nulls } => {
                (bits_growth(values.len(), values.capacity() / 8, len), nulls)
            }
            OpenColumn::Bytes { bytes, nulls } => {
                let (offsets, values) = (bytes.offsets(), bytes.values());
                let width = if bytes.is_large() { 8 } else { 4 };
                let needed = offsets_needed(offsets, len, width);
                let grown = growth_of(offsets, needed, hint.offsets(width));
                (grown + growth_of(values, var, hint.var_data()), nulls)
            }
            OpenColumn::Views { views, nulls } => {
                let grown = growth_of(views.views(), len * 16, hint.per_row(16));
                (grown + growth_of(views.data(), var, hint.var_data()), nulls)
            }
            OpenColumn::Pieces { .. } => return 0,
        };
        buffers + nulls_growth(nulls, has_nulls, len)
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
            OpenColumn::Bytes { bytes, .. } => {
                let width = if bytes.is_large() { 8 } else { 4 };
                let needed = offsets_needed(bytes.offsets(), len, width);
                bytes.grow_to(
                    capacity_for(bytes.offsets(), needed, hint.offsets(width)),
                    capacity_for(bytes.values(), var, hint.var_data()),
                );
            }
            OpenColumn::Views { views, .. } => {
                views.grow_to(
                    capacity_for(views.views(), len * 16, hint.per_row(16)),
                    capacity_for(views.data(), var, hint.var_data()),
                );
            }
            OpenColumn::Pieces { .. } => {}
        }
    }

    /// The column's rows as an array of `data_type` (`rows` of them); the column is empty after.
    pub(crate) fn finish(
        &mut self,
        data_type: &DataType,
        rows: usize,
    ) -> Result<ArrayRef, ArrowError> {
        let builder = ArrayData::builder(data_type.clone()).len(rows);
        let data = match std::mem::replace(self, OpenColumn::new(data_type)) {
            OpenColumn::Fixed {
                values, mut nulls, ..
            } => builder.add_buffer(values.into()).nulls(nulls.finish()),
            OpenColumn::Boolean {
                mut values,
                mut nulls,
            } => builder
                .add_buffer(values.finish().into_inner())
                .nulls(nulls.finish()),
            OpenColumn::Bytes { bytes, mut nulls } => {
                return bytes.finish(data_type, nulls.finish());
            }
            OpenColumn::Views { views, mut nulls } => {
                return views.finish(data_type, nulls.finish());
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
