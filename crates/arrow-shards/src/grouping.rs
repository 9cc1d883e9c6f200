//! The rows of a batch grouped by partition: its partition ids ([`PartitionIds`]) checked and
//! counted, and the stable counting sort that puts each partition's rows together
//! ([`RowsByPartition`]), in O(rows + partitions). The scatter write's grouping
//! ([`crate::scatter`]), the order of rows copied in place when they go to disk instead
//! (`compact::Direct::order`), and public for code that splits batches itself.

use arrow_array::{Array, UInt32Array};

use crate::error::Error;

/// `(partition, start, len)`: one partition's rows in a grouped order.
pub(crate) type Range = (u32, usize, usize);

/// The partition of each row of a scatter write: a `UInt32Array` (no nulls) or a `&[u32]`.
#[derive(Debug, Clone, Copy)]
pub enum PartitionIds<'a> {
    /// An Arrow array; a null id is an error.
    Array(&'a UInt32Array),
    /// Plain ids.
    Slice(&'a [u32]),
}

impl<'a> From<&'a UInt32Array> for PartitionIds<'a> {
    fn from(ids: &'a UInt32Array) -> Self {
        PartitionIds::Array(ids)
    }
}

impl<'a> From<&'a [u32]> for PartitionIds<'a> {
    fn from(ids: &'a [u32]) -> Self {
        PartitionIds::Slice(ids)
    }
}

impl<'a> From<&'a Vec<u32>> for PartitionIds<'a> {
    fn from(ids: &'a Vec<u32>) -> Self {
        PartitionIds::Slice(ids)
    }
}

/// The rows of a batch grouped by partition: a stable counting sort of their partition ids,
/// in O(rows + partitions). The scatter write's grouping, public so that code splitting batches
/// by partition itself (a benchmark's producers, an engine's own shard writer) shares it.
///
/// ```
/// use arrow_shards::RowsByPartition;
///
/// let groups = RowsByPartition::new([2u32, 0, 2, 1].as_slice().into(), 4, 3).unwrap();
/// assert_eq!(groups.ranges(), &[(0, 0, 1), (1, 1, 1), (2, 2, 2)]);
/// assert_eq!(groups.order(), Some(&[1u32, 3, 0, 2][..]));
/// ```
#[derive(Debug, Clone)]
pub struct RowsByPartition {
    order: Option<Vec<u32>>,
    ranges: Vec<(u32, usize, usize)>,
}

impl RowsByPartition {
    /// Checks `ids` (one per row of a `rows`-row batch, no nulls, each below `num_partitions`)
    /// and groups the rows by partition.
    pub fn new(ids: PartitionIds<'_>, rows: usize, num_partitions: u32) -> Result<Self, Error> {
        let (mut groups, ids) = Self::count(ids, rows, num_partitions)?;
        groups.sort(ids);
        Ok(groups)
    }

    /// `(partition, start, len)` of each non-empty partition in the grouped order, ascending by
    /// partition.
    pub fn ranges(&self) -> &[(u32, usize, usize)] {
        &self.ranges
    }

    /// The input row at each position of the grouped order (input order within a partition),
    /// or `None` when the rows need no reordering (at most one partition is non-empty).
    pub fn order(&self) -> Option<&[u32]> {
        self.order.as_deref()
    }

    /// The counting sort's first pass: checks `ids` and counts each partition's rows, giving the
    /// ranges but no order yet ([`sort`](Self::sort) makes it), and the ids as a slice.
    pub(crate) fn count<'a>(
        ids: PartitionIds<'a>,
        rows: usize,
        num_partitions: u32,
    ) -> Result<(Self, &'a [u32]), Error> {
        let ids = match ids {
            PartitionIds::Array(array) => {
                if let Some(nulls) = array.nulls().filter(|n| n.null_count() > 0) {
                    let row = nulls.iter().position(|valid| !valid).unwrap_or(0);
                    return Err(Error::NullPartitionId { row });
                }
                &array.values()[..]
            }
            PartitionIds::Slice(ids) => ids,
        };
        if ids.len() != rows {
            let ids = ids.len();
            return Err(Error::PartitionIdsLength { rows, ids });
        }
        let mut counts = vec![0usize; num_partitions as usize];
        for (row, &id) in ids.iter().enumerate() {
            match counts.get_mut(id as usize) {
                Some(count) => *count += 1,
                None => {
                    return Err(Error::PartitionIdOutOfRange {
                        row,
                        partition: id,
                        num_partitions,
                    });
                }
            }
        }
        let mut ranges = Vec::new();
        let mut next = 0;
        for (partition, &count) in counts.iter().enumerate() {
            if count > 0 {
                ranges.push((partition as u32, next, count));
            }
            next += count;
        }
        let groups = Self {
            order: None,
            ranges,
        };
        Ok((groups, ids))
    }

    /// The counting sort's second pass: the grouped order of `ids` (those [`count`](Self::count)
    /// was given), unless at most one partition has rows.
    pub(crate) fn sort(&mut self, ids: &[u32]) {
        if self.ranges.len() > 1 {
            let mut next = self.by_partition(|_, start| start);
            self.order = Some(grouped_order(ids.iter().map(|&id| id as usize), &mut next));
        }
    }

    /// Per row of `ids` (those [`count`](Self::count) was given), the index of its range.
    pub(crate) fn range_of_row(&self, ids: &[u32]) -> Vec<u32> {
        let index = self.by_partition(|k, _| k as u32);
        ids.iter().map(|&id| index[id as usize]).collect()
    }

    /// The ranges and the order, taken apart.
    pub(crate) fn into_parts(self) -> (Vec<Range>, Option<Vec<u32>>) {
        (self.ranges, self.order)
    }

    /// Per partition up to the last with rows, `value(k, start)` of its range `k` (0 for the
    /// partitions without rows).
    fn by_partition<T: Default + Clone>(&self, value: impl Fn(usize, usize) -> T) -> Vec<T> {
        let len = self.ranges.last().map_or(0, |&(p, _, _)| p as usize + 1);
        let mut out = vec![T::default(); len];
        for (k, &(partition, start, _)) in self.ranges.iter().enumerate() {
            out[partition as usize] = value(k, start);
        }
        out
    }
}

/// The input row at each position of a grouped order: a stable counting sort's placing pass.
/// `groups` yields each row's group; `next[g]` is where group `g` starts, advanced past it on
/// return. Shared by the sort of partition ids and the order of rows tagged with their ranges
/// (`compact::Direct::order`).
pub(crate) fn grouped_order(
    groups: impl ExactSizeIterator<Item = usize>,
    next: &mut [usize],
) -> Vec<u32> {
    let mut order = vec![0u32; groups.len()];
    for (row, g) in groups.enumerate() {
        let slot = &mut next[g];
        order[*slot] = row as u32;
        *slot += 1;
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_by_partition_and_by_range_tag_agree() {
        let ids: Vec<u32> = (0..500u32).map(|r| (r * 7 + r / 3) % 13 + 2).collect();
        let (mut groups, slice) = RowsByPartition::count((&ids).into(), ids.len(), 16).unwrap();
        assert!(groups.order().is_none(), "count makes no order");
        let tags = groups.range_of_row(slice);
        groups.sort(slice);
        let mut next: Vec<usize> = groups.ranges().iter().map(|r| r.1).collect();
        let by_tag = grouped_order(tags.iter().map(|&k| k as usize), &mut next);
        assert_eq!(groups.order(), Some(&by_tag[..]));
        // each range's rows are its partition's, in input order
        let order = groups.order().unwrap();
        for (k, &(partition, start, len)) in groups.ranges().iter().enumerate() {
            let rows = &order[start..start + len];
            assert!(rows.windows(2).all(|w| w[0] < w[1]));
            assert!(rows.iter().all(|&r| ids[r as usize] == partition));
            assert!(rows.iter().all(|&r| tags[r as usize] == k as u32));
        }
    }
}
