//! Partitions held only in memory: order, batch sizes, zero-copy hand-over, and releasing the
//! caller's reservation.

use std::sync::Arc;

use arrow_array::{Int32Array, RecordBatch};
use arrow_schema::{ArrowError, Schema};
use arrow_shards_memory::sizing::batch_memory_size;
use arrow_shards_memory::{AllocationSet, MemoryReservation};
use arrow_shards_merge::{MergeError, MergeOptions, Merger, PartitionSources};
use futures::StreamExt;
use proptest::prelude::*;

use crate::common::*;

/// Output sizes the documented rule gives for `inputs` at `target`.
pub(crate) fn expected_sizes(inputs: &[usize], target: Option<usize>) -> Vec<usize> {
    let Some(target) = target else {
        return inputs.iter().copied().filter(|&n| n > 0).collect();
    };
    let (mut out, mut pending) = (Vec::new(), 0);
    for &n in inputs.iter().filter(|&&n| n > 0) {
        if n >= target {
            if pending > 0 {
                out.push(pending);
            }
            out.push(n);
            pending = 0;
        } else {
            pending += n;
            if pending >= target {
                out.push(target);
                pending -= target;
            }
        }
    }
    if pending > 0 {
        out.push(pending);
    }
    out
}

fn memory_merger(sizes: &[usize], options: MergeOptions) -> (Vec<RecordBatch>, Merger) {
    let schema = schema();
    let input = batches(&schema, sizes);
    let pool = pool();
    let sources = PartitionSources::new(schema).with_memory(input.clone(), charge(&pool, &input));
    (input, Merger::new(sources, options, pool))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn memory_batches_come_back_in_order_in_documented_sizes(
        sizes in prop::collection::vec(0usize..300, 0..20),
        target in prop::option::of(1usize..200),
    ) {
        let options = match target {
            Some(t) => MergeOptions::new().with_target_rows(t),
            None => MergeOptions::new().with_pass_through(),
        };
        let (input, merger) = memory_merger(&sizes, options);
        let out: Vec<RecordBatch> = merger.collect::<Result<_, _>>().unwrap();
        let got: Vec<usize> = out.iter().map(RecordBatch::num_rows).collect();
        prop_assert_eq!(got, expected_sizes(&sizes, target));
        prop_assert_eq!(concat(&schema(), &out), concat(&schema(), &input));
    }
}

#[test]
fn small_batches_coalesce_to_exactly_the_target_except_the_last() {
    let sizes = [7, 30, 1, 99, 42, 64, 5, 5, 5, 80, 13];
    let (input, merger) = memory_merger(&sizes, MergeOptions::new().with_target_rows(100));
    let out: Vec<_> = merger.collect::<Result<Vec<_>, _>>().unwrap();
    let rows: Vec<_> = out.iter().map(RecordBatch::num_rows).collect();
    assert_eq!(rows, [100, 100, 100, 51]);
    assert_eq!(concat(&schema(), &out), concat(&schema(), &input));
}

#[test]
fn batches_at_or_above_the_target_pass_through_uncopied() {
    let sizes = [30, 250, 40, 100, 100, 10];
    let (input, merger) = memory_merger(&sizes, MergeOptions::new().with_target_rows(100));
    let out: Vec<_> = merger.collect::<Result<Vec<_>, _>>().unwrap();
    let rows: Vec<_> = out.iter().map(RecordBatch::num_rows).collect();
    assert_eq!(rows, [30, 250, 40, 100, 100, 10]);
    // the big ones are the very same arrays; the small ones were copied by the coalescer
    for i in [1, 3, 4] {
        assert!(same_arrays(&out[i], &input[i]), "output {i} was copied");
        assert_eq!(
            first_buffer_ptr(out[i].column(0)),
            first_buffer_ptr(input[i].column(0))
        );
    }
    assert_ne!(
        first_buffer_ptr(out[0].column(0)),
        first_buffer_ptr(input[0].column(0))
    );
}

#[test]
fn pass_through_hands_over_the_same_arrays() {
    let sizes = [3, 0, 8192, 1, 20_000];
    let (input, merger) = memory_merger(&sizes, MergeOptions::new().with_pass_through());
    let out: Vec<_> = merger.collect::<Result<Vec<_>, _>>().unwrap();
    let non_empty: Vec<_> = input.iter().filter(|b| b.num_rows() > 0).collect();
    assert_eq!(out.len(), non_empty.len());
    for (o, i) in out.iter().zip(non_empty) {
        assert!(same_arrays(o, i));
    }
}

#[test]
fn empty_sources_give_nothing_and_concat_gives_zero_rows() {
    let schema = schema();
    let pool = pool();
    let merger = Merger::new(
        PartitionSources::new(schema.clone()),
        MergeOptions::new(),
        pool,
    );
    assert_eq!(merger.count(), 0);

    let merger = Merger::new(
        PartitionSources::new(schema.clone()),
        MergeOptions::new(),
        self::pool(),
    );
    let all = merger.concat().unwrap();
    assert_eq!(all.num_rows(), 0);
    assert_eq!(all.schema(), schema);

    // only zero-row batches: still nothing, and their reservation is released
    let pool = self::pool();
    let empty = vec![batch(&schema, 0, 0), batch(&schema, 0, 0)];
    let mut charged = MemoryReservation::new(&pool);
    charged.grow(64);
    let sources = PartitionSources::new(schema.clone()).with_memory(empty, charged);
    assert_eq!(sources.num_rows(), 0);
    assert_eq!(
        Merger::new(sources, MergeOptions::new(), pool.clone()).count(),
        0
    );
    assert_eq!(pool.reserved(), 0);
}

#[test]
fn concat_returns_every_row_in_order() {
    let sizes = [5, 9000, 17, 0, 3];
    let (input, merger) = memory_merger(&sizes, MergeOptions::new());
    assert_eq!(merger.concat().unwrap(), concat(&schema(), &input));
}

#[test]
fn concat_after_partial_reading_returns_the_rest() {
    let sizes = [10, 10, 10, 10];
    let (input, mut merger) = memory_merger(&sizes, MergeOptions::new().with_target_rows(15));
    let first = merger.next().unwrap().unwrap();
    assert_eq!(first.num_rows(), 15);
    let rest = merger.concat().unwrap();
    assert_eq!(rest, concat(&schema(), &input).slice(15, 25));
}

#[test]
fn pass_through_releases_each_batch_as_it_is_handed_over() {
    let schema = schema();
    let pool = pool();
    let input = batches(&schema, &[100, 200, 300]);
    let sizes: Vec<usize> = input.iter().map(batch_memory_size).collect();
    let sources = PartitionSources::new(schema).with_memory(input.clone(), charge(&pool, &input));
    let mut merger = Merger::new(
        sources,
        MergeOptions::new().with_pass_through(),
        pool.clone(),
    );
    assert_eq!(pool.reserved(), sizes.iter().sum::<usize>());
    merger.next().unwrap().unwrap();
    assert_eq!(pool.reserved(), sizes[1] + sizes[2]);
    merger.next().unwrap().unwrap();
    assert_eq!(pool.reserved(), sizes[2]);
    merger.next().unwrap().unwrap();
    assert_eq!(pool.reserved(), 0);
    assert!(merger.next().is_none());
}

#[test]
fn coalesced_inputs_stay_charged_until_their_last_row_is_handed_over() {
    let schema = schema();
    let pool = pool();
    // target 100: output 1 = a + b + 30 rows of c, output 2 = 20 rows of c + d
    let input = batches(&schema, &[40, 30, 50, 20]);
    let sizes: Vec<usize> = input.iter().map(batch_memory_size).collect();
    let sources = PartitionSources::new(schema).with_memory(input.clone(), charge(&pool, &input));
    drop(input);
    let mut merger = Merger::new(
        sources,
        MergeOptions::new().with_target_rows(100),
        pool.clone(),
    );
    let first = merger.next().unwrap().unwrap();
    assert_eq!(first.num_rows(), 100);
    assert_eq!(pool.reserved(), sizes[2] + sizes[3]);
    let second = merger.next().unwrap().unwrap();
    assert_eq!(second.num_rows(), 40);
    assert_eq!(pool.reserved(), 0);
}

#[test]
fn shared_allocations_are_released_when_their_last_user_leaves() {
    let schema = schema();
    let pool = pool();
    let parent = batch(&schema, 0, 1000);
    let whole = batch_memory_size(&parent);
    let slices: Vec<_> = (0..4).map(|i| parent.slice(i * 250, 250)).collect();
    drop(parent);
    // the buffer charges the parent once, as an AllocationSet does
    let mut set = AllocationSet::new();
    let mut charged = MemoryReservation::new(&pool);
    for s in &slices {
        charged.grow(set.insert(&arrow_shards_memory::sizing::batch_allocations(s)));
    }
    assert_eq!(charged.size(), whole);
    let sources = PartitionSources::new(schema).with_memory(slices, charged);
    let mut merger = Merger::new(
        sources,
        MergeOptions::new().with_pass_through(),
        pool.clone(),
    );
    for _ in 0..3 {
        merger.next().unwrap().unwrap();
        assert_eq!(pool.reserved(), whole, "released while slices still held");
    }
    merger.next().unwrap().unwrap();
    assert_eq!(pool.reserved(), 0);
}

#[test]
fn dropping_half_way_releases_every_reservation() {
    let schema = schema();
    let pool = pool();
    let mut unrelated = MemoryReservation::new(&pool);
    unrelated.grow(12_345);
    let before = pool.reserved();
    for target in [None, Some(64)] {
        let input = batches(&schema, &[50, 50, 50, 50, 50]);
        let charged = charge(&pool, &input);
        let sources = PartitionSources::new(schema.clone()).with_memory(input, charged);
        let options = MergeOptions::new().with_target_rows(target.unwrap_or(0));
        let mut merger = Merger::new(sources, options, pool.clone());
        merger.next().unwrap().unwrap();
        assert!(pool.reserved() > before);
        drop(merger);
        assert_eq!(pool.reserved(), before);
    }
}

#[test]
fn a_batch_with_other_fields_fails_after_the_batches_before_it() {
    let schema = schema();
    let pool = pool();
    let good = batches(&schema, &[10, 10]);
    let other = RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1, 2, 3])) as _)])
        .unwrap();
    let input = vec![
        good[0].clone(),
        good[1].clone(),
        other,
        batch(&schema, 20, 5),
    ];
    let charged = charge(&pool, &input);
    let sources = PartitionSources::new(schema.clone()).with_memory(input, charged);
    let mut merger = Merger::new(
        sources,
        MergeOptions::new().with_target_rows(100),
        pool.clone(),
    );
    let before = merger.next().unwrap().unwrap();
    assert_eq!(before, concat(&schema, &good));
    let err = merger.next().unwrap().unwrap_err();
    let ArrowError::ExternalError(inner) = &err else {
        panic!("not external: {err}")
    };
    let merge_error = inner.downcast_ref::<MergeError>().expect("a MergeError");
    assert!(
        matches!(merge_error, MergeError::SchemaMismatch { .. }),
        "{merge_error}"
    );
    assert!(err.to_string().contains("memory, batch 2"), "{err}");
    assert!(merger.next().is_none());
    assert!(merger.next().is_none());
    assert_eq!(pool.reserved(), 0);
}

#[test]
fn several_memory_groups_are_read_in_order_and_each_released() {
    let schema = schema();
    let pool_a = pool();
    let pool_b = pool();
    let input = batches(&schema, &[10, 20, 30, 40]);
    let sources = PartitionSources::new(schema.clone())
        .with_memory(input[..2].to_vec(), charge(&pool_a, &input[..2]))
        .with_memory(input[2..].to_vec(), charge(&pool_b, &input[2..]));
    assert_eq!(sources.num_rows(), 100);
    let merger = Merger::new(sources, MergeOptions::new().with_pass_through(), pool());
    assert_eq!(merger.concat().unwrap(), concat(&schema, &input));
    assert_eq!((pool_a.reserved(), pool_b.reserved()), (0, 0));
}

#[test]
fn schema_level_metadata_does_not_matter() {
    let fields = schema().fields().clone();
    let plain = Arc::new(Schema::new(fields.clone()));
    let with_metadata = Arc::new(Schema::new_with_metadata(
        fields,
        std::collections::HashMap::from([("origin".to_string(), "test".to_string())]),
    ));
    let input = vec![batch(&with_metadata, 0, 10)];
    let sources = PartitionSources::new(plain).with_memory(input, charge(&pool(), &[]));
    let out = Merger::new(sources, MergeOptions::new(), pool())
        .concat()
        .unwrap();
    assert_eq!(out.num_rows(), 10);
}

#[test]
fn the_stream_gives_the_same_batches_as_the_iterator() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    for options in [
        MergeOptions::new().with_target_rows(64),
        MergeOptions::new().with_pass_through(),
    ] {
        let sizes = [5, 100, 63, 1, 1, 200, 7];
        let (_, merger) = memory_merger(&sizes, options.clone());
        let from_iter: Vec<_> = merger.collect::<Result<Vec<_>, _>>().unwrap();
        let (_, merger) = memory_merger(&sizes, options);
        let from_stream: Vec<_> = runtime.block_on(async {
            merger
                .into_stream()
                .map(|r| r.unwrap())
                .collect::<Vec<_>>()
                .await
        });
        assert_eq!(from_iter, from_stream);
    }
}

#[test]
fn a_huge_target_gives_one_batch_without_reserving_for_it() {
    let sizes = [10, 20, 30];
    let (input, merger) = memory_merger(&sizes, MergeOptions::new().with_target_rows(usize::MAX));
    let out: Vec<_> = merger.collect::<Result<Vec<_>, _>>().unwrap();
    assert_eq!(out, [concat(&schema(), &input)]);
}

/// Allocations listed by the caller are used as given: the releases follow them exactly (here
/// the caller's list for the middle batch is empty, so handing it over releases nothing).
#[test]
fn given_allocations_are_used_instead_of_walking_the_batches() {
    let schema = schema();
    let pool = pool();
    let input = batches(&schema, &[100, 200, 300]);
    let lists: Vec<_> = input
        .iter()
        .map(arrow_shards_memory::sizing::batch_allocations)
        .collect();
    let sizes: Vec<usize> = input.iter().map(batch_memory_size).collect();
    let given = vec![
        (input[0].clone(), lists[0].clone()),
        (input[1].clone(), Vec::new()),
        (input[2].clone(), lists[2].clone()),
    ];
    let sources =
        PartitionSources::new(schema).with_memory_allocations(given, charge(&pool, &input));
    let mut merger = Merger::new(
        sources,
        MergeOptions::new().with_pass_through(),
        pool.clone(),
    );
    merger.next().unwrap().unwrap();
    assert_eq!(pool.reserved(), sizes[1] + sizes[2]);
    assert_eq!(merger.next().unwrap().unwrap(), input[1]);
    assert_eq!(
        pool.reserved(),
        sizes[1] + sizes[2],
        "nothing listed, nothing released"
    );
    merger.next().unwrap().unwrap();
    assert_eq!(pool.reserved(), 0, "the rest goes with the last batch");
}
