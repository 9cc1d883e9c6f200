//! Where a write's rows go: copied into their partition's open batch, copied there in place
//! (a scattered batch's rows straight from the batch as written), or stored whole. One rule
//! ([`route`]) for every write form, decided outside the buffer's lock before the write is
//! tried: `write` and its forms route their batch ([`route_batch`]), `write_partitioned` and its
//! forms route each partition's rows and choose the in-place copy ([`route_scattered`]).
//!
//! A copy's route carries the compaction settings ([`Route::Copy`], [`Scatter::InPlace`]), so
//! "copy without compaction" cannot be expressed: the insert under the lock takes its settings
//! from the route, not from an `expect` on the buffer's.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::compact::{CompactConfig, copy_bytes, is_flat};

/// How some rows of one write reach their partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Copied into the partition's open batch, with these compaction settings.
    Copy(CompactConfig),
    /// Stored as they are: compaction off, at or above a compaction target, or nested columns
    /// whose types differ from the buffer's (pieces of different types cannot be concatenated).
    Whole,
}

/// How the rows of a batch scattered over many partitions reach them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scatter {
    /// Every partition's rows are copied straight from the batch as written into its open
    /// batch (`compact/direct.rs`): no reordering copy.
    InPlace(CompactConfig),
    /// The batch is reordered by partition (unless one partition has all its rows) and each
    /// partition's range takes its route, in range order.
    Reorder(Vec<Route>),
}

/// The rule: `len` rows holding `bytes` of their own data are copied into their partition's
/// open batch when compaction is on, they are below both its targets and their columns can be
/// copied (`compactable`); otherwise they are stored whole. `bytes` and `compactable` are asked
/// only when the rows are below the row target.
pub(crate) fn route(
    compact: Option<CompactConfig>,
    len: usize,
    bytes: impl FnOnce() -> usize,
    compactable: impl FnOnce() -> bool,
) -> Route {
    match compact {
        Some(config)
            if len < config.target_rows && bytes() < config.target_bytes && compactable() =>
        {
            Route::Copy(config)
        }
        _ => Route::Whole,
    }
}

/// The route of a batch written to one partition: all its rows, their bytes measured exactly
/// ([`copy_bytes`]).
pub(crate) fn route_batch(
    compact: Option<CompactConfig>,
    schema: &SchemaRef,
    batch: &RecordBatch,
) -> Route {
    route(
        compact,
        batch.num_rows(),
        || copy_bytes(batch),
        || compactable(schema, batch),
    )
}

/// The routes of `batch`'s rows grouped into `ranges` (`(partition, start, len)`, ascending by
/// partition). Each range is routed by [`route`] on its rows alone: its bytes are not measured,
/// because a range of a column copied as pieces (nested, dictionary) would count the whole
/// batch's buffers, which sent every range of a 2 MiB all-types shuffle whole (and then to
/// disk); an open batch is cut when it reaches the byte target anyway. The copy is made in
/// place when every range is copied, there are at least two and every column is flat
/// ([`all_flat`]); otherwise the batch is reordered and each range takes its own route.
pub(crate) fn route_scattered(
    compact: Option<CompactConfig>,
    schema: &SchemaRef,
    batch: &RecordBatch,
    ranges: &[(u32, usize, usize)],
) -> Scatter {
    let mut copies = None;
    let mut copies_of = || *copies.get_or_insert_with(|| compactable(schema, batch));
    let routes: Vec<Route> = ranges
        .iter()
        .map(|&(_, _, len)| route(compact, len, || 0, &mut copies_of))
        .collect();
    match compact {
        Some(config)
            if ranges.len() > 1
                && routes.iter().all(|r| matches!(r, Route::Copy(_)))
                && all_flat(schema) =>
        {
            Scatter::InPlace(config)
        }
        _ => Scatter::Reorder(routes),
    }
}

/// Whether a batch of `schema` can be copied into an open batch: nested columns only when their
/// types are exactly the buffer's (the schema check lets nested nullability differ, and pieces of
/// different types cannot be concatenated).
pub(crate) fn compactable(schema: &SchemaRef, batch: &RecordBatch) -> bool {
    schema
        .fields()
        .iter()
        .zip(batch.columns())
        .all(|(f, a)| is_flat(f.data_type()) || f.data_type() == a.data_type())
}

/// Whether every column of `schema` is of a flat type, which an open column copies itself: a
/// scattered batch of such a schema may be copied in place (`OpenBatch::append_tagged`).
pub(crate) fn all_flat(schema: &SchemaRef) -> bool {
    schema.fields().iter().all(|f| is_flat(f.data_type()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{Int32Builder, ListBuilder};
    use arrow_array::{ArrayRef, Int64Array, StringArray};

    use super::*;

    fn config(target_rows: usize, target_bytes: usize) -> Option<CompactConfig> {
        Some(CompactConfig {
            target_rows,
            target_bytes,
            stream_bytes: target_bytes,
        })
    }

    fn flat(rows: i64) -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "i",
                Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef,
            ),
            (
                "s",
                Arc::new(StringArray::from_iter_values(
                    (0..rows).map(|i| i.to_string()),
                )),
            ),
        ])
        .unwrap()
    }

    fn nested(rows: i32) -> RecordBatch {
        let mut lists = ListBuilder::new(Int32Builder::new());
        for i in 0..rows {
            lists.values().append_value(i);
            lists.append(true);
        }
        RecordBatch::try_from_iter([("n", Arc::new(lists.finish()) as ArrayRef)]).unwrap()
    }

    #[test]
    fn a_batch_is_copied_only_below_both_targets_and_with_compaction() {
        let batch = flat(100);
        let schema = batch.schema();
        let bytes = copy_bytes(&batch);
        let on = config(1000, 1 << 20);
        assert_eq!(route_batch(on, &schema, &batch), Route::Copy(on.unwrap()));
        assert_eq!(route_batch(None, &schema, &batch), Route::Whole);
        assert_eq!(
            route_batch(config(100, 1 << 20), &schema, &batch),
            Route::Whole
        );
        assert_eq!(
            route_batch(config(1000, bytes), &schema, &batch),
            Route::Whole
        );
        let c = config(1000, bytes + 1);
        assert_eq!(route_batch(c, &schema, &batch), Route::Copy(c.unwrap()));
    }

    #[test]
    fn nested_columns_of_another_type_are_stored_whole() {
        let batch = nested(10);
        let other = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "n",
            arrow_schema::DataType::List(Arc::new(arrow_schema::Field::new(
                "item",
                arrow_schema::DataType::Int32,
                false,
            ))),
            true,
        )]));
        let on = config(1000, 1 << 20);
        assert_eq!(route_batch(on, &other, &batch), Route::Whole);
        assert_eq!(
            route_batch(on, &batch.schema(), &batch),
            Route::Copy(on.unwrap())
        );
    }

    #[test]
    fn small_ranges_of_flat_columns_are_copied_in_place() {
        let batch = flat(100);
        let schema = batch.schema();
        let ranges = [(0, 0, 40), (3, 40, 60)];
        let on = config(1000, 1 << 20);
        assert_eq!(
            route_scattered(on, &schema, &batch, &ranges),
            Scatter::InPlace(on.unwrap())
        );
        // one range: nothing to gain from the in-place copy
        assert_eq!(
            route_scattered(on, &schema, &batch, &[(2, 0, 100)]),
            Scatter::Reorder(vec![Route::Copy(on.unwrap())])
        );
        assert_eq!(
            route_scattered(None, &schema, &batch, &ranges),
            Scatter::Reorder(vec![Route::Whole, Route::Whole])
        );
    }

    #[test]
    fn a_range_at_the_row_target_is_stored_whole_and_the_others_copied_after_a_reorder() {
        let batch = flat(100);
        let schema = batch.schema();
        let ranges = [(0, 0, 40), (3, 40, 60)];
        let rows = config(50, 1 << 20);
        assert_eq!(
            route_scattered(rows, &schema, &batch, &ranges),
            Scatter::Reorder(vec![Route::Copy(rows.unwrap()), Route::Whole])
        );
        // ranges are routed by their rows alone, whatever the byte target
        let bytes = config(1000, 1);
        let copy = Route::Copy(bytes.unwrap());
        assert_eq!(
            route_scattered(bytes, &schema, &batch, &ranges),
            Scatter::InPlace(bytes.unwrap())
        );
        assert_eq!(route(bytes, 999, || 0, || true), copy);
    }

    #[test]
    fn nested_columns_are_never_copied_in_place() {
        let batch = nested(10);
        let on = config(1000, 1 << 20);
        let copy = Route::Copy(on.unwrap());
        assert_eq!(
            route_scattered(on, &batch.schema(), &batch, &[(0, 0, 4), (1, 4, 6)]),
            Scatter::Reorder(vec![copy, copy])
        );
    }
}
