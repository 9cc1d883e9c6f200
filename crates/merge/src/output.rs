//! The output side: coalescing small batches, passing big ones through, and releasing each
//! input's charge when the output holding its last row is handed over.

use std::collections::VecDeque;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use arrow_shards_memory::MemoryReservation;

use crate::coalescer::Coalescer;
use crate::input::Charged;
use crate::read_budget::Overdraft;

/// Batches on their way out, in order.
#[derive(Debug)]
pub(crate) struct Output {
    /// `None` in pass-through mode.
    coalescer: Option<Coalescing>,
    ready: VecDeque<Ready>,
}

#[derive(Debug)]
struct Coalescing {
    coalescer: Coalescer,
    target: usize,
    /// Charges of batches pushed into the coalescer, with the running row count at their last
    /// row: a charge (and an overdraft with it) is released once that many coalesced rows have
    /// been handed over.
    staged: VecDeque<(u64, MemoryReservation, Option<Overdraft>)>,
    pushed_rows: u64,
    emitted_rows: u64,
}

#[derive(Debug)]
enum Ready {
    /// An input batch handed over as it is, with its charge.
    Whole(Charged),
    /// A batch built by the coalescer.
    Coalesced(RecordBatch),
}

impl Output {
    /// Coalesces to `target_rows` rows, or passes everything through when `None`.
    pub(crate) fn new(schema: &SchemaRef, target_rows: Option<usize>) -> Self {
        let coalescer = target_rows.filter(|t| *t > 0).map(|target| Coalescing {
            coalescer: Coalescer::new(SchemaRef::clone(schema), target),
            target,
            staged: VecDeque::new(),
            pushed_rows: 0,
            emitted_rows: 0,
        });
        Self {
            coalescer,
            ready: VecDeque::new(),
        }
    }

    /// Switches to pass-through if nothing is buffered; for callers about to concatenate
    /// everything anyway.
    pub(crate) fn pass_through_if_idle(&mut self) {
        if self.ready.is_empty()
            && self
                .coalescer
                .as_ref()
                .is_some_and(|c| c.coalescer.is_empty())
        {
            self.coalescer = None;
        }
    }

    /// Takes one input batch. A batch with at least the target rows passes through whole,
    /// after the rows buffered before it are flushed as one shorter batch: copying it into
    /// target-sized pieces would cost a full copy for nothing.
    pub(crate) fn push(&mut self, input: Charged) -> Result<(), ArrowError> {
        let Some(c) = &mut self.coalescer else {
            self.ready.push_back(Ready::Whole(input));
            return Ok(());
        };
        let rows = input.batch.num_rows();
        if rows >= c.target {
            c.flush(&mut self.ready)?;
            self.ready.push_back(Ready::Whole(input));
            return Ok(());
        }
        c.pushed_rows += rows as u64;
        c.staged
            .push_back((c.pushed_rows, input.charge, input.overdraft));
        c.coalescer.push_batch(input.batch)?;
        c.drain(&mut self.ready);
        Ok(())
    }

    /// True if the coalescer holds rows that are in no batch yet.
    pub(crate) fn has_buffered_rows(&self) -> bool {
        self.coalescer
            .as_ref()
            .is_some_and(|c| c.coalescer.get_buffered_rows() > 0)
    }

    /// True if rows buffered in the coalescer hold the read budget's overdraft (it goes when
    /// the batch holding the overdrawn segment's last row is handed over).
    pub(crate) fn holds_overdraft(&self) -> bool {
        self.coalescer
            .as_ref()
            .is_some_and(|c| c.staged.iter().any(|(_, _, o)| o.is_some()))
    }

    /// Flushes buffered rows as a shorter batch: the last one, or one cut short for memory.
    pub(crate) fn finish(&mut self) -> Result<(), ArrowError> {
        match &mut self.coalescer {
            Some(c) => c.flush(&mut self.ready),
            None => Ok(()),
        }
    }

    /// Drops everything not handed over yet, releasing its charges.
    pub(crate) fn clear(&mut self) {
        self.ready.clear();
        if let Some(c) = &mut self.coalescer {
            c.staged.clear();
            (c.pushed_rows, c.emitted_rows) = (0, 0);
            c.coalescer = Coalescer::new(c.coalescer.schema(), c.target);
        }
    }

    /// The next batch to hand over; releases the charges it completes.
    pub(crate) fn pop(&mut self) -> Option<RecordBatch> {
        match self.ready.pop_front()? {
            Ready::Whole(Charged {
                batch,
                charge,
                overdraft,
            }) => {
                drop((charge, overdraft));
                Some(batch)
            }
            Ready::Coalesced(batch) => {
                if let Some(c) = &mut self.coalescer {
                    c.emitted_rows += batch.num_rows() as u64;
                    while c
                        .staged
                        .front()
                        .is_some_and(|(end, _, _)| *end <= c.emitted_rows)
                    {
                        c.staged.pop_front();
                    }
                }
                Some(batch)
            }
        }
    }
}

impl Coalescing {
    fn flush(&mut self, ready: &mut VecDeque<Ready>) -> Result<(), ArrowError> {
        self.coalescer.finish_buffered_batch()?;
        self.drain(ready);
        Ok(())
    }

    fn drain(&mut self, ready: &mut VecDeque<Ready>) {
        while let Some(batch) = self.coalescer.next_completed_batch() {
            ready.push_back(Ready::Coalesced(batch));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int32Array, RecordBatch};
    use arrow_shards_memory::{MemoryPool, UnboundedPool};

    use super::*;

    fn input(pool: &Arc<dyn MemoryPool>, first: i32, rows: i32, bytes: usize) -> Charged {
        let values = Int32Array::from_iter_values(first..first + rows);
        let batch = RecordBatch::try_from_iter([("v", Arc::new(values) as _)]).unwrap();
        let mut charge = MemoryReservation::new(pool);
        charge.grow(bytes);
        Charged {
            batch,
            charge,
            overdraft: None,
        }
    }

    #[test]
    fn charges_follow_the_last_row_of_each_input() {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedPool::new());
        let first = input(&pool, 0, 3, 1);
        let mut out = Output::new(first.batch.schema_ref(), Some(4));
        out.push(first).unwrap();
        out.push(input(&pool, 3, 3, 10)).unwrap();
        out.push(input(&pool, 6, 2, 100)).unwrap();
        assert_eq!(pool.reserved(), 111);
        // rows 0..4 hold all of the first input and part of the second
        assert_eq!(out.pop().unwrap().num_rows(), 4);
        assert_eq!(pool.reserved(), 110);
        // rows 4..8 finish the second and the third
        assert_eq!(out.pop().unwrap().num_rows(), 4);
        assert_eq!(pool.reserved(), 0);
        assert!(out.pop().is_none());
    }

    #[test]
    fn a_big_batch_flushes_what_is_buffered_then_passes_whole() {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedPool::new());
        let small = input(&pool, 0, 3, 1);
        let mut out = Output::new(small.batch.schema_ref(), Some(4));
        out.push(small).unwrap();
        let big = input(&pool, 3, 9, 10);
        let big_column = Arc::clone(big.batch.column(0));
        out.push(big).unwrap();
        assert_eq!(out.pop().unwrap().num_rows(), 3);
        assert_eq!(pool.reserved(), 10);
        let passed = out.pop().unwrap();
        assert!(Arc::ptr_eq(passed.column(0), &big_column));
        assert_eq!(pool.reserved(), 0);
        out.finish().unwrap();
        assert!(out.pop().is_none());
    }

    #[test]
    fn pass_through_switch_waits_for_buffered_rows() {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedPool::new());
        let a = input(&pool, 0, 3, 0);
        let mut out = Output::new(a.batch.schema_ref(), Some(4));
        out.push(a).unwrap();
        out.pass_through_if_idle();
        assert!(out.coalescer.is_some());
        out.push(input(&pool, 3, 1, 0)).unwrap();
        assert_eq!(out.pop().unwrap().num_rows(), 4);
        out.pass_through_if_idle();
        assert!(out.coalescer.is_none());
    }

    #[test]
    fn clear_releases_buffered_and_ready_charges() {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedPool::new());
        let a = input(&pool, 0, 3, 5);
        let mut out = Output::new(a.batch.schema_ref(), Some(4));
        out.push(a).unwrap();
        out.push(input(&pool, 3, 8, 7)).unwrap();
        assert_eq!(pool.reserved(), 12);
        out.clear();
        assert_eq!(pool.reserved(), 0);
        assert!(out.pop().is_none());
    }
}
