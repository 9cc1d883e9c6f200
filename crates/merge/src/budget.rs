//! What a read may reserve: whether a segment fits under the pool's limit, and the reservation
//! made before a segment is read (see [`crate::Merger`]'s memory section).

use std::sync::Arc;

use arrow_shards_memory::{MemoryPool, MemoryReservation};
use arrow_shards_spill::SegmentRef;

/// True if reserving `bytes` keeps `pool` within its limit (always, without a limit). A read
/// that fits needs no room made for it; see [`crate::Merger`]'s memory section.
pub(crate) fn fits(pool: &Arc<dyn MemoryPool>, bytes: usize) -> bool {
    pool.limit()
        .is_none_or(|limit| pool.reserved().saturating_add(bytes) <= limit)
}

/// Reserves a segment's expected size before reading it; see [`crate::Merger`]'s memory section.
pub(crate) fn reserve_segment(
    pool: &Arc<dyn MemoryPool>,
    segment: &SegmentRef,
) -> MemoryReservation {
    let mut reservation = MemoryReservation::new(pool);
    reservation.grow(segment.memory_bytes());
    reservation
}
