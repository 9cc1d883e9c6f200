//! Which partitions to spill: the largest in memory first.
//!
//! An ordered set of `(bytes, partition)` kept up to date on every write, read and spill, so a
//! pick costs O(log n) and no pick scans all partitions (100,000 partitions stay cheap). Only
//! partitions that can be spilled are in it: not being spilled right now, not read, with bytes
//! in memory.

use std::collections::BTreeSet;

/// Partitions that can be spilled, ordered by their bytes in memory.
#[derive(Debug, Default)]
pub(crate) struct LargestFirst {
    set: BTreeSet<(usize, u32)>,
    /// Without spilling nobody picks victims: skip the bookkeeping on the write path.
    enabled: bool,
}

impl LargestFirst {
    /// An empty index; a disabled one ignores every update.
    pub(crate) fn new(enabled: bool) -> Self {
        Self {
            set: BTreeSet::new(),
            enabled,
        }
    }

    /// Records that `partition` went from `old` to `new` spillable bytes (0 = not spillable).
    pub(crate) fn update(&mut self, partition: u32, old: usize, new: usize) {
        if old == new || !self.enabled {
            return;
        }

        if old > 0 {
            self.set.remove(&(old, partition));
        }
        if new > 0 {
            self.set.insert((new, partition));
        }
    }

    /// Takes out the largest partition, with its bytes, if it holds at least `floor` bytes (the
    /// largest partition of another buffer on the same pool, or 0).
    pub(crate) fn pop_largest(&mut self, floor: usize) -> Option<(u32, usize)> {
        if self.largest() < floor {
            return None;
        }
        self.set
            .pop_last()
            .map(|(bytes, partition)| (partition, bytes))
    }

    /// The bytes of the largest partition in the index; 0 if it is empty.
    pub(crate) fn largest(&self) -> usize {
        self.set.last().map_or(0, |(bytes, _)| *bytes)
    }

    /// Partitions in the index.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_largest_first_and_follows_updates() {
        let mut index = LargestFirst::new(true);
        index.update(1, 0, 10);
        index.update(2, 0, 30);
        index.update(3, 0, 20);
        index.update(1, 10, 40);
        index.update(3, 20, 0);
        assert_eq!(index.len(), 2);
        assert_eq!(index.largest(), 40);
        assert_eq!(index.pop_largest(0), Some((1, 40)));
        assert_eq!(
            index.pop_largest(31),
            None,
            "another buffer's partition is larger"
        );
        assert_eq!(index.pop_largest(30), Some((2, 30)));
        assert_eq!(index.pop_largest(0), None);
        assert_eq!(index.largest(), 0);
    }

    #[test]
    fn equal_sizes_are_all_kept() {
        let mut index = LargestFirst::new(true);
        for p in 0..100_000 {
            index.update(p, 0, 7);
        }
        assert_eq!(index.len(), 100_000);
        assert_eq!(index.pop_largest(0), Some((99_999, 7)));
    }
}
