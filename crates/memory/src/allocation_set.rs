//! Counting allocations once across many batches.
//!
//! After hash partitioning, the shards written to a buffer are often slices of one input batch,
//! or `take` outputs that share dictionary values or view data buffers. Charging each shard its
//! own [`batch_memory_size`](crate::sizing::batch_memory_size) would count the shared parent once
//! per shard (1024 times at 1024 partitions); charging only the slice's share would ignore that the
//! whole parent stays alive. An [`AllocationSet`] holds a reference count per allocation, so the
//! owner charges an allocation when the first batch using it arrives and releases it when the last
//! one leaves: the pool tracks what the process really holds.

use rustc_hash::FxHashMap;

use crate::sizing::Allocation;

/// Allocations referenced by a set of batches, each with the number of batches using it.
#[derive(Debug, Default)]
pub struct AllocationSet {
    /// Keyed by allocation address with a fast non-cryptographic hash (addresses are not
    /// attacker-chosen): SipHash was a fifth of the write path's instructions.
    refs: FxHashMap<usize, (usize, usize)>,
    bytes: usize,
}

impl AllocationSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes that [`AllocationSet::insert`] of `allocations` would add: those not held yet.
    pub fn added_bytes(&self, allocations: &[Allocation]) -> usize {
        allocations
            .iter()
            .filter(|a| !self.refs.contains_key(&a.ptr))
            .map(|a| a.capacity)
            .sum()
    }

    /// Adds one reference to each allocation; returns the bytes newly held.
    pub fn insert(&mut self, allocations: &[Allocation]) -> usize {
        let mut added = 0;
        for a in allocations {
            let entry = self.refs.entry(a.ptr).or_insert_with(|| {
                added += a.capacity;
                (a.capacity, 0)
            });
            entry.1 += 1;
        }
        self.bytes += added;
        added
    }

    /// Drops one reference from each allocation; returns the bytes no longer held.
    ///
    /// `allocations` must be what an earlier `insert` added.
    pub fn remove(&mut self, allocations: &[Allocation]) -> usize {
        let mut freed = 0;
        for a in allocations {
            if let Some(entry) = self.refs.get_mut(&a.ptr) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    freed += entry.0;
                    self.refs.remove(&a.ptr);
                }
            } else {
                debug_assert!(
                    false,
                    "removing allocation {:#x} that was never inserted",
                    a.ptr
                );
            }
        }
        self.bytes -= freed;
        freed
    }

    /// Bytes held by all allocations in the set.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Distinct allocations held.
    pub fn len(&self) -> usize {
        self.refs.len()
    }

    /// True if nothing is held.
    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
    }
}

/// What removing some batches' allocations from an [`AllocationSet`] would free, tallied as
/// batches are added: the allocations that only those batches hold (a parent shared with
/// batches outside them stays). What spilling a group of partitions really releases.
#[derive(Debug, Default)]
pub struct Exclusive {
    held: FxHashMap<usize, usize>,
    bytes: usize,
}

impl Exclusive {
    /// Nothing tallied yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one batch's `allocations` (as inserted into `set`) to the tally.
    pub fn add(&mut self, set: &AllocationSet, allocations: &[Allocation]) {
        for a in allocations {
            let count = self.held.entry(a.ptr).or_default();
            *count += 1;
            if let Some(&(capacity, refs)) = set.refs.get(&a.ptr)
                && refs == *count
            {
                self.bytes += capacity;
            }
        }
    }

    /// Bytes held by the tallied batches alone.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_bytes_leave_out_what_others_share() {
        let a = |ptr, capacity| Allocation { ptr, capacity };
        let (one, two) = ([a(0x10, 1000), a(0x20, 10)], [a(0x10, 1000), a(0x30, 20)]);
        let mut set = AllocationSet::new();
        // batches one and two share the parent at 0x10
        set.insert(&one);
        set.insert(&two);
        let mut tally = Exclusive::new();
        tally.add(&set, &one);
        assert_eq!(tally.bytes(), 10, "the parent is still held by two");
        tally.add(&set, &two);
        assert_eq!(tally.bytes(), 1030, "both: the parent goes too");
        // a third batch elsewhere holds the parent: only the two children go
        set.insert(&[a(0x10, 1000)]);
        let mut tally = Exclusive::new();
        tally.add(&set, &one);
        tally.add(&set, &two);
        assert_eq!(tally.bytes(), 30);
    }
    use crate::sizing::{batch_allocations, batch_memory_size};
    use arrow_array::{Int64Array, RecordBatch};
    use std::sync::Arc;

    #[test]
    fn slices_of_one_batch_are_charged_once() {
        let batch = RecordBatch::try_from_iter([(
            "a",
            Arc::new(Int64Array::from_iter_values(0..10_000)) as _,
        )])
        .unwrap();
        let whole = batch_memory_size(&batch);
        let mut set = AllocationSet::new();
        let slices: Vec<_> = (0..10)
            .map(|i| batch_allocations(&batch.slice(i * 1000, 1000)))
            .collect();
        let added: usize = slices.iter().map(|s| set.insert(s)).sum();
        assert_eq!(added, whole);
        let freed: Vec<usize> = slices.iter().map(|s| set.remove(s)).collect();
        assert_eq!(&freed[..9], &[0; 9]);
        assert_eq!(freed[9], whole);
        assert!(set.is_empty());
        assert_eq!(set.bytes(), 0);
    }

    #[test]
    fn added_bytes_previews_insert() {
        let a = RecordBatch::try_from_iter([("a", Arc::new(Int64Array::from(vec![1, 2])) as _)])
            .unwrap();
        let mut set = AllocationSet::new();
        let allocs = batch_allocations(&a);
        let preview = set.added_bytes(&allocs);
        assert_eq!(set.insert(&allocs), preview);
        assert_eq!(set.added_bytes(&allocs), 0);
    }
}
