//! The growth policy of an open column's buffers: how far they may grow before their batch is
//! cut ([`Hint`]), how each one grows ([`Sizing`], doubling from 64 bytes, capped at what the
//! cut batch will hold), and the capacity an append makes, predicted and made by the same
//! function ([`grown`]) so that the charge taken before an append is the growth it causes.

use arrow_buffer::{MutableBuffer, NullBufferBuilder};

/// The smallest allocation a column makes (arrow rounds capacities to 64 bytes anyway).
const MIN_CAPACITY: usize = 64;

/// How far an open column may grow before its batch is cut.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hint {
    /// Rows at which the batch is cut.
    pub(crate) rows: usize,
    /// Bytes of variable-length data at which the batch is cut.
    pub(crate) bytes: usize,
    /// Rows the first allocation of a row-sized buffer is made for (see `batch::Start`).
    pub(crate) start_rows: usize,
    /// Bytes the first allocation of a variable-length data buffer takes.
    pub(crate) start_bytes: usize,
}

impl Hint {
    /// The sizing of a buffer of `width` bytes per row (values, views).
    pub(crate) fn per_row(self, width: usize) -> Sizing {
        Sizing {
            limit: self.rows * width,
            first: self.start_rows * width,
        }
    }

    /// The sizing of an offsets buffer of `width`-byte offsets (one more than the rows).
    pub(crate) fn offsets(self, width: usize) -> Sizing {
        Sizing {
            limit: (self.rows + 1) * width,
            first: (self.start_rows + 1) * width,
        }
    }

    /// The sizing of a variable-length data buffer.
    pub(crate) fn var_data(self) -> Sizing {
        Sizing {
            limit: self.bytes,
            first: self.start_bytes,
        }
    }
}

/// How one buffer of an open column grows: what `OpenColumn::growth` predicts and
/// [`ensure`] makes come from the same `Sizing`, so the charge is exact.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizing {
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
pub(crate) fn growth_of(buffer: &MutableBuffer, additional: usize, sizing: Sizing) -> usize {
    let cap = buffer.capacity();
    grown(cap, buffer.len() + additional, sizing) - cap
}

/// Grows `buffer` so it can take `additional` more bytes, to exactly the capacity [`grown`] says.
pub(crate) fn ensure(buffer: &mut MutableBuffer, additional: usize, sizing: Sizing) {
    let cap = capacity_for(buffer, additional, sizing);
    if cap > buffer.capacity() {
        let mut larger = MutableBuffer::with_capacity(cap);
        larger.extend_from_slice(buffer.as_slice());
        *buffer = larger;
    }
}

/// The capacity [`ensure`] gives `buffer` for `additional` more bytes (its own, if enough).
pub(crate) fn capacity_for(buffer: &MutableBuffer, additional: usize, sizing: Sizing) -> usize {
    grown(buffer.capacity(), buffer.len() + additional, sizing)
}

/// Bytes an offsets buffer takes for `len` more rows (the first append also writes offset 0).
pub(crate) fn offsets_needed(offsets: &MutableBuffer, len: usize, width: usize) -> usize {
    (if offsets.is_empty() { len + 1 } else { len }) * width
}

/// Bytes a boolean values buffer of `bits` bits and `capacity` bytes adds for `len` more bits:
/// `BooleanBufferBuilder` doubles its byte buffer itself (to at least the 64-byte multiple it
/// needs).
pub(crate) fn bits_growth(bits: usize, capacity: usize, len: usize) -> usize {
    let needed = (bits + len).div_ceil(8);
    if needed > capacity {
        round_up_64(needed).max(2 * capacity) - capacity
    } else {
        0
    }
}

/// Bytes a validity builder may add for `rows` more rows (an upper bound).
pub(crate) fn nulls_growth(
    nulls: &NullBufferBuilder,
    source_has_nulls: bool,
    rows: usize,
) -> usize {
    if nulls.as_slice().is_none() && !source_has_nulls {
        return 0;
    }
    // The builder materialises (or doubles) a bit buffer; bound it by twice the bits needed.
    round_up_64((nulls.len() + rows).div_ceil(8)) * 2
}

fn round_up_64(n: usize) -> usize {
    n.div_ceil(64) * 64
}
