//! `ShardRepartitionExec` on its own over TPC-H lineitem: plan properties equal
//! `RepartitionExec`'s, the same rows per partition, spilling under a session memory limit
//! (pool at zero and no files afterwards), and cancellation releasing memory and files.

mod common;

use std::sync::Arc;

use arrow_shards_datafusion::{ExchangeMode, ShardRepartitionExec, ShardRepartitionOptions};
use datafusion::arrow::array::{Array, Int64Array, RecordBatch};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryLimit, MemoryPool, MemoryReservation,
};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    ExecutionPlan, Partitioning, collect_partitioned, execute_stream_partitioned,
};
use futures::StreamExt;
use tpchgen::generators::LineItemGenerator;
use tpchgen_arrow::LineItemArrow;

use common::files;

const OUTPUTS: usize = 16;
/// The session pool of the spilling tests: well under lineitem's size, 8x a batch.
const LIMIT: usize = 8 << 20;

/// lineitem at the tests' scale factor, in two input partitions.
fn lineitem() -> Arc<dyn ExecutionPlan> {
    let parts: Vec<Vec<RecordBatch>> = (1..=2)
        .map(|p| {
            LineItemArrow::new(LineItemGenerator::new(common::SCALE_FACTOR, p, 2))
                .with_batch_size(2048)
                .collect::<Result<_, _>>()
                .unwrap()
        })
        .collect();
    let schema = parts[0][0].schema();
    MemorySourceConfig::try_new_exec(&parts, schema, None).expect("source")
}

fn hash_on_orderkey(input: &Arc<dyn ExecutionPlan>) -> Partitioning {
    Partitioning::Hash(vec![col("l_orderkey", &input.schema()).unwrap()], OUTPUTS)
}

/// A task context with `pool` and a disk manager writing under `root`.
fn context(pool: Arc<dyn MemoryPool>, root: &std::path::Path) -> Arc<TaskContext> {
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(pool)
        .with_disk_manager_builder(
            DiskManagerBuilder::default()
                .with_mode(DiskManagerMode::Directories(vec![root.to_path_buf()])),
        )
        .build_arc()
        .unwrap();
    Arc::new(TaskContext::default().with_runtime(runtime))
}

/// Each output partition's orderkeys, sorted, for comparing two exchanges.
fn keys(partitions: &[Vec<RecordBatch>]) -> Vec<Vec<i64>> {
    partitions
        .iter()
        .map(|batches| {
            let mut keys: Vec<i64> = batches
                .iter()
                .flat_map(|b| {
                    let column = b.column_by_name("l_orderkey").unwrap();
                    let column = column.as_any().downcast_ref::<Int64Array>().unwrap();
                    column.values().to_vec()
                })
                .collect();
            keys.sort_unstable();
            keys
        })
        .collect()
}

#[test]
fn plan_properties_equal_repartition_execs() {
    let input = lineitem();
    for partitioning in [
        hash_on_orderkey(&input),
        Partitioning::RoundRobinBatch(OUTPUTS),
    ] {
        let theirs = RepartitionExec::try_new(Arc::clone(&input), partitioning.clone()).unwrap();
        let ours = ShardRepartitionExec::try_new(Arc::clone(&input), partitioning).unwrap();
        assert_eq!(ours.schema(), theirs.schema());
        let (ours_p, theirs_p) = (ours.properties(), theirs.properties());
        assert_eq!(ours_p.output_partitioning(), theirs_p.output_partitioning());
        assert_eq!(ours_p.output_ordering(), theirs_p.output_ordering());
        assert_eq!(
            ours_p.equivalence_properties().to_string(),
            theirs_p.equivalence_properties().to_string()
        );
        assert_eq!(ours_p.emission_type, theirs_p.emission_type);
        assert_eq!(ours_p.boundedness, theirs_p.boundedness);
        assert_eq!(ours.maintains_input_order(), theirs.maintains_input_order());
        assert_eq!(
            ours.benefits_from_input_partitioning(),
            theirs.benefits_from_input_partitioning()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_output_partition_gets_repartition_execs_rows() {
    let input = lineitem();
    let root = tempfile::tempdir().unwrap();
    let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(usize::MAX / 2));
    let ctx = context(Arc::clone(&pool), root.path());
    let theirs = RepartitionExec::try_new(Arc::clone(&input), hash_on_orderkey(&input)).unwrap();
    let ours = Arc::new(
        ShardRepartitionExec::try_new(Arc::clone(&input), hash_on_orderkey(&input)).unwrap(),
    );
    let expected = collect_partitioned(Arc::new(theirs), Arc::clone(&ctx))
        .await
        .unwrap();
    let got = collect_partitioned(ours.clone(), Arc::clone(&ctx))
        .await
        .unwrap();
    assert_eq!(keys(&got), keys(&expected));
    assert_eq!(
        got.iter().flatten().map(|b| b.num_rows()).sum::<usize>(),
        60_175
    );
    ours.wait_closed().await;
    assert_eq!(pool.reserved(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_keeps_every_row() {
    let input = lineitem();
    let root = tempfile::tempdir().unwrap();
    let ctx = context(Arc::new(GreedyMemoryPool::new(usize::MAX / 2)), root.path());
    let ours = ShardRepartitionExec::try_new(Arc::clone(&input), Partitioning::RoundRobinBatch(3))
        .unwrap();
    let got = collect_partitioned(Arc::new(ours), ctx).await.unwrap();
    let mut all: Vec<i64> = keys(&got).concat();
    all.sort_unstable();
    let source = collect_partitioned(input, Arc::new(TaskContext::default()))
        .await
        .unwrap();
    let mut expected: Vec<i64> = keys(&source).concat();
    expected.sort_unstable();
    assert_eq!(all, expected);
    assert!(
        got.iter().all(|p| !p.is_empty()),
        "every partition gets batches"
    );
}

/// What the limited tests share: an exchange over lineitem by `l_orderkey`, a session pool of
/// [`LIMIT`] and a disk manager under a directory of the test's own.
struct Limited {
    root: tempfile::TempDir,
    pool: Arc<dyn MemoryPool>,
    ctx: Arc<TaskContext>,
    ours: Arc<ShardRepartitionExec>,
}

impl Limited {
    fn new(input: &Arc<dyn ExecutionPlan>) -> Self {
        let root = tempfile::tempdir().unwrap();
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(LIMIT));
        let ctx = context(Arc::clone(&pool), root.path());
        // Materializing: the tests below read one batch once every input is done.
        let options = ShardRepartitionOptions::default().with_mode(ExchangeMode::Materialize);
        let exec =
            ShardRepartitionExec::try_new_with(Arc::clone(input), hash_on_orderkey(input), options);
        let ours = Arc::new(exec.unwrap());
        Self {
            root,
            pool,
            ctx,
            ours,
        }
    }

    /// Once the run has closed: the pool at zero, no file under the spill root.
    async fn assert_released(&self) {
        self.ours.wait_closed().await;
        assert_eq!(self.pool.reserved(), 0, "the session pool is back at zero");
        let left = files(self.root.path());
        assert_eq!(left, Vec::<std::path::PathBuf>::new(), "no spill file left");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_session_limit_it_spills_and_gives_everything_back() {
    // lineitem at SF 0.01 (~20 MiB in memory, 1 MiB batches) under an 8 MiB session pool
    let input = lineitem();
    let limited = Limited::new(&input);
    let unlimited = context(
        Arc::new(GreedyMemoryPool::new(usize::MAX / 2)),
        limited.root.path(),
    );
    let theirs = RepartitionExec::try_new(Arc::clone(&input), hash_on_orderkey(&input)).unwrap();
    let expected = collect_partitioned(Arc::new(theirs), unlimited)
        .await
        .unwrap();

    let got = collect_partitioned(limited.ours.clone(), Arc::clone(&limited.ctx))
        .await
        .unwrap();
    assert_eq!(keys(&got), keys(&expected));
    let metrics = limited.ours.metrics().unwrap();
    assert!(metrics.spilled_bytes().unwrap() > 0, "{metrics:?}");
    assert!(metrics.spill_count().unwrap() > 0, "{metrics:?}");
    limited.assert_released().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_streams_mid_read_releases_memory_and_files() {
    let limited = Limited::new(&lineitem());
    let ctx = Arc::clone(&limited.ctx);
    let mut streams = execute_stream_partitioned(limited.ours.clone(), ctx).unwrap();
    // one batch of partition 0: every input is done, the rest waits in memory and on disk
    let first = streams[0].next().await.unwrap().unwrap();
    assert!(first.num_rows() > 0);
    assert!(limited.pool.reserved() > 0, "unread partitions hold memory");
    assert!(!files(limited.root.path()).is_empty(), "and spill files");
    drop(streams);
    limited.assert_released().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_streams_before_reading_stops_the_inputs() {
    let limited = Limited::new(&lineitem());
    let ctx = Arc::clone(&limited.ctx);
    let streams = execute_stream_partitioned(limited.ours.clone(), ctx).unwrap();
    // the input tasks are running; nothing was read
    tokio::task::yield_now().await;
    drop(streams);
    limited.assert_released().await;
}

/// A session pool that remembers the most it ever held.
#[derive(Debug)]
struct PeakPool {
    inner: GreedyMemoryPool,
    peak: std::sync::atomic::AtomicUsize,
}

impl PeakPool {
    fn note(&self) {
        let now = self.inner.reserved();
        self.peak
            .fetch_max(now, std::sync::atomic::Ordering::Relaxed);
    }

    fn peak(&self) -> usize {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl std::fmt::Display for PeakPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeakPool (peak {})", self.peak())
    }
}

impl MemoryPool for PeakPool {
    fn name(&self) -> &str {
        "PeakPool"
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
        self.note();
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink);
    }

    fn try_grow(
        &self,
        reservation: &MemoryReservation,
        additional: usize,
    ) -> datafusion::common::Result<()> {
        self.inner.try_grow(reservation, additional)?;
        self.note();
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.inner.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.inner.memory_limit()
    }
}

/// Streaming (the default mode), every output driven at once under an 8 MiB session pool:
/// the same rows as `RepartitionExec`, and the pool's peak within the documented bound
/// (docs/memory-accounting.md): the limit, plus one segment decoded past it (the read
/// budget's overdraft, 4 MiB segments by default), plus one input batch refused and written
/// past it (the oversized batch, here ~0.5 MiB), plus what decoding adds over a segment's
/// estimate (1 MiB allowed). Without the read budget each of the 16 readers could pass the
/// limit by a segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_every_output_at_once_holds_the_session_limit() {
    let input = lineitem();
    let root = tempfile::tempdir().unwrap();
    let unlimited = context(Arc::new(GreedyMemoryPool::new(usize::MAX / 2)), root.path());
    let theirs = RepartitionExec::try_new(Arc::clone(&input), hash_on_orderkey(&input)).unwrap();
    let expected = collect_partitioned(Arc::new(theirs), unlimited)
        .await
        .unwrap();

    let pool = Arc::new(PeakPool {
        inner: GreedyMemoryPool::new(LIMIT),
        peak: std::sync::atomic::AtomicUsize::new(0),
    });
    let session: Arc<dyn MemoryPool> = pool.clone();
    let ctx = context(Arc::clone(&session), root.path());
    let ours = Arc::new(
        ShardRepartitionExec::try_new_with(
            Arc::clone(&input),
            hash_on_orderkey(&input),
            ShardRepartitionOptions::default(),
        )
        .unwrap(),
    );
    let got = collect_partitioned(ours.clone(), ctx).await.unwrap();
    assert_eq!(keys(&got), keys(&expected));
    let bound = LIMIT + (4 << 20) + (1 << 19) + (1 << 20);
    assert!(
        pool.peak() <= bound,
        "peak {} over the bound {bound}",
        pool.peak()
    );
    ours.wait_closed().await;
    assert_eq!(session.reserved(), 0);
    assert_eq!(files(root.path()), Vec::<std::path::PathBuf>::new());
}

/// Output batches follow the session's `batch_size`, as `RepartitionExec`'s do: small input
/// batches are compacted up to it, not to the buffer's default 8,192 rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_batches_follow_the_sessions_batch_size() {
    let parts: Vec<Vec<RecordBatch>> = (0..2)
        .map(|p| {
            (0..40)
                .map(|i| {
                    let first = (p * 40 + i) * 50;
                    let keys = Int64Array::from_iter_values(first..first + 50);
                    RecordBatch::try_from_iter([("l_orderkey", Arc::new(keys) as _)]).unwrap()
                })
                .collect()
        })
        .collect();
    let schema = parts[0][0].schema();
    let input: Arc<dyn ExecutionPlan> =
        MemorySourceConfig::try_new_exec(&parts, schema, None).unwrap();
    let ours = ShardRepartitionExec::try_new(Arc::clone(&input), hash_on_orderkey(&input));
    let ctx = TaskContext::default()
        .with_session_config(datafusion::prelude::SessionConfig::new().with_batch_size(128));
    let got = collect_partitioned(Arc::new(ours.unwrap()), Arc::new(ctx))
        .await
        .unwrap();
    let batches: Vec<&RecordBatch> = got.iter().flatten().collect();
    assert!(
        batches.iter().all(|b| b.num_rows() <= 128),
        "a batch over 128 rows"
    );
    assert!(
        batches.iter().any(|b| b.num_rows() > 50),
        "small batches compacted"
    );
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 2 * 40 * 50);
}
