//! Joining small batches into batches of a target row count, with dictionaries kept as
//! written.
//!
//! arrow-select's `BatchCoalescer` copies primitives and views into preallocated buffers, and
//! concatenates every other type with arrow's `concat`, which duplicates or drops dictionary
//! values (see `arrow_shards_spill::concat`). So a schema with a dictionary anywhere is
//! coalesced here instead: the batches are gathered, the one crossing the target is sliced,
//! and each full group is concatenated with `arrow_shards_spill::concat_batches`. A schema
//! without one keeps `BatchCoalescer`.

use std::collections::VecDeque;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use arrow_select::coalesce::BatchCoalescer;
use arrow_shards_spill::{concat_batches, has_dictionary};

/// `BatchCoalescer`'s interface, the part the output uses: full batches of exactly the
/// target, a shorter one on `finish_buffered_batch`.
#[derive(Debug)]
pub(crate) enum Coalescer {
    /// No dictionary in the schema.
    Arrow(BatchCoalescer),
    /// A dictionary somewhere in the schema.
    Dictionaries(Gathering),
}

/// Batches gathered until they hold the target.
#[derive(Debug)]
pub(crate) struct Gathering {
    schema: SchemaRef,
    target: usize,
    gathered: Vec<RecordBatch>,
    rows: usize,
    completed: VecDeque<RecordBatch>,
}

impl Coalescer {
    /// Makes batches of `target` rows (more than 0) of `schema`.
    pub(crate) fn new(schema: SchemaRef, target: usize) -> Self {
        debug_assert!(
            target > 0,
            "a target of 0 rows would never complete a batch"
        );
        if schema
            .fields()
            .iter()
            .any(|f| has_dictionary(f.data_type()))
        {
            Self::Dictionaries(Gathering {
                schema,
                target,
                gathered: Vec::new(),
                rows: 0,
                completed: VecDeque::new(),
            })
        } else {
            Self::Arrow(BatchCoalescer::new(schema, target))
        }
    }

    /// The schema of the batches made.
    pub(crate) fn schema(&self) -> SchemaRef {
        match self {
            Self::Arrow(c) => c.schema(),
            Self::Dictionaries(g) => SchemaRef::clone(&g.schema),
        }
    }

    /// Takes `batch`; every batch of the target it completes is ready afterwards.
    pub(crate) fn push_batch(&mut self, batch: RecordBatch) -> Result<(), ArrowError> {
        match self {
            Self::Arrow(c) => c.push_batch(batch),
            Self::Dictionaries(g) => g.push(batch),
        }
    }

    /// Makes a batch of the rows buffered, if any (shorter than the target).
    pub(crate) fn finish_buffered_batch(&mut self) -> Result<(), ArrowError> {
        match self {
            Self::Arrow(c) => c.finish_buffered_batch(),
            Self::Dictionaries(g) => g.complete(),
        }
    }

    /// The next batch made, in order.
    pub(crate) fn next_completed_batch(&mut self) -> Option<RecordBatch> {
        match self {
            Self::Arrow(c) => c.next_completed_batch(),
            Self::Dictionaries(g) => g.completed.pop_front(),
        }
    }

    /// Rows taken but in no batch yet.
    pub(crate) fn get_buffered_rows(&self) -> usize {
        match self {
            Self::Arrow(c) => c.get_buffered_rows(),
            Self::Dictionaries(g) => g.rows,
        }
    }

    /// True if nothing is buffered and no batch is ready.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Self::Arrow(c) => c.is_empty(),
            Self::Dictionaries(g) => g.rows == 0 && g.completed.is_empty(),
        }
    }
}

impl Gathering {
    fn push(&mut self, mut batch: RecordBatch) -> Result<(), ArrowError> {
        while self.rows + batch.num_rows() >= self.target {
            let take = self.target - self.rows;
            self.gathered.push(batch.slice(0, take));
            self.rows += take;
            self.complete()?;
            batch = batch.slice(take, batch.num_rows() - take);
        }
        if batch.num_rows() > 0 {
            self.rows += batch.num_rows();
            self.gathered.push(batch);
        }
        Ok(())
    }

    fn complete(&mut self) -> Result<(), ArrowError> {
        if self.rows > 0 {
            let batch = concat_batches(&self.schema, &self.gathered)?;
            self.completed.push_back(batch);
        }
        self.gathered.clear();
        self.rows = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, DictionaryArray, Int32Array, StringArray};

    use super::*;

    fn batch(values: &[&str], keys: Vec<i32>) -> RecordBatch {
        let values: ArrayRef = Arc::new(StringArray::from(values.to_vec()));
        let keys = Int32Array::from(keys);
        let d = DictionaryArray::<Int32Type>::try_new(keys, values).unwrap();
        RecordBatch::try_from_iter([("d", Arc::new(d) as ArrayRef)]).unwrap()
    }

    fn values(batch: &RecordBatch) -> Vec<&str> {
        let d = batch.column(0).as_dictionary::<Int32Type>();
        d.values().as_string::<i32>().iter().flatten().collect()
    }

    #[test]
    fn dictionaries_come_out_as_the_union_in_batches_of_the_target() {
        let a = batch(&["x", "unused"], vec![0, 0, 0]);
        let mut c = Coalescer::new(a.schema(), 4);
        assert!(matches!(c, Coalescer::Dictionaries(_)));
        c.push_batch(a).unwrap();
        c.push_batch(batch(&["y", "x"], vec![0, 1, 0, 1, 0, 1]))
            .unwrap();
        assert_eq!(c.get_buffered_rows(), 1);
        c.finish_buffered_batch().unwrap();
        let first = c.next_completed_batch().unwrap();
        let (second, third) = (c.next_completed_batch().unwrap(), c.next_completed_batch());
        assert_eq!((first.num_rows(), second.num_rows()), (4, 4));
        assert_eq!(values(&first), ["x", "unused", "y"]);
        // the second takes slices of the second input only: its dictionary as it is
        assert_eq!(values(&second), ["y", "x"]);
        assert_eq!(third.unwrap().num_rows(), 1);
        assert!(c.is_empty());
    }

    #[test]
    fn a_schema_without_dictionaries_keeps_arrows_coalescer() {
        let ints = Arc::new(Int32Array::from(vec![1])) as ArrayRef;
        let b = RecordBatch::try_from_iter([("i", ints)]).unwrap();
        assert!(matches!(Coalescer::new(b.schema(), 4), Coalescer::Arrow(_)));
    }
}
