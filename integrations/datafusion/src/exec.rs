//! [`ShardRepartitionExec`]: the plan node, standing where a `RepartitionExec` would.

use std::fmt;
use std::sync::{Arc, Mutex};

use arrow_shards::ShardBuffer;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::oneshot;

use crate::exchange::{Exchange, ExchangeMetrics, MakeRoute};
use crate::options::ShardRepartitionOptions;
use crate::pool::SessionPool;
use crate::route::Route;
use crate::spill_for_others::SpillForOthersPool;

/// A hash (or round robin) repartition whose output partitions come from one
/// [`ShardBuffer`]: a materialising exchange that spills under the session's memory limit.
///
/// Equivalent to `RepartitionExec` with [`Partitioning::Hash`] or
/// [`Partitioning::RoundRobinBatch`] (same rows per partition, same plan properties), but each
/// output partition is read once all input partitions are done, so nothing is held in
/// per-partition channels: the rows wait in the buffer, charged to the session's pool through
/// a [`SessionPool`] and spilled to the runtime's disk manager directory when refused.
///
/// Its metrics (`EXPLAIN ANALYZE`): `spilled_bytes`, `spill_count`, `write_wait`.
///
/// Locking: `runs` holds the current run while output partitions are being handed out and is
/// taken only for that (no await, I/O or spawn under it; the input tasks are spawned after it
/// is released). `closed` is taken to push or take receivers.
#[derive(Debug)]
pub struct ShardRepartitionExec {
    /// The `RepartitionExec` this one stands for: the input, the partitioning and the plan
    /// properties come from it, so they are equal by construction.
    like: Arc<RepartitionExec>,
    options: ShardRepartitionOptions,
    metrics: ExecutionPlanMetricsSet,
    runs: Arc<Mutex<Option<Run>>>,
    closed: Arc<Mutex<Vec<oneshot::Receiver<()>>>>,
}

/// A run in progress: its exchange and which output partitions were handed out.
#[derive(Debug)]
struct Run {
    exchange: Arc<Exchange>,
    taken: Vec<bool>,
}

impl ShardRepartitionExec {
    /// Repartitions `input` by `partitioning` (`Hash` or `RoundRobinBatch`).
    pub fn try_new(input: Arc<dyn ExecutionPlan>, partitioning: Partitioning) -> Result<Self> {
        Self::try_new_with(input, partitioning, ShardRepartitionOptions::default())
    }

    /// [`try_new`](Self::try_new) with `options`.
    pub fn try_new_with(
        input: Arc<dyn ExecutionPlan>,
        partitioning: Partitioning,
        options: ShardRepartitionOptions,
    ) -> Result<Self> {
        Self::from_repartition(&RepartitionExec::try_new(input, partitioning)?, options)
    }

    /// Stands in for `repartition`, which must not preserve order and must hash or round
    /// robin.
    pub fn from_repartition(
        repartition: &RepartitionExec,
        options: ShardRepartitionOptions,
    ) -> Result<Self> {
        if repartition.preserve_order() {
            return Err(DataFusionError::NotImplemented(
                "ShardRepartitionExec does not preserve order (a sort-preserving repartition)"
                    .into(),
            ));
        }
        match repartition.partitioning() {
            Partitioning::Hash(..) | Partitioning::RoundRobinBatch(_) => {}
            other => {
                return Err(DataFusionError::NotImplemented(format!(
                    "ShardRepartitionExec: partitioning {other} (only hash and round robin)"
                )));
            }
        }
        let like = RepartitionExec::try_new(
            Arc::clone(repartition.input()),
            repartition.partitioning().clone(),
        )?;
        Ok(Self {
            like: Arc::new(like),
            options,
            metrics: ExecutionPlanMetricsSet::new(),
            runs: Arc::default(),
            closed: Arc::default(),
        })
    }

    /// The input plan.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        self.like.input()
    }

    /// The output partitioning.
    pub fn partitioning(&self) -> &Partitioning {
        self.like.partitioning()
    }

    /// Waits until every run that has ended (all its output streams dropped) has closed its
    /// buffer: memory back in the session pool, spill files removed.
    pub async fn wait_closed(&self) {
        let receivers = std::mem::take(&mut *self.closed.lock().unwrap_or_else(|e| e.into_inner()));
        for receiver in receivers {
            let _ = receiver.await;
        }
    }

    fn start(&self, context: &Arc<TaskContext>) -> Result<Arc<Exchange>> {
        let partitions = u32::try_from(self.partitioning().partition_count())
            .map_err(|_| DataFusionError::Plan("too many output partitions".into()))?;
        let pool = Arc::new(SessionPool::new(
            context.memory_pool(),
            "ShardRepartitionExec",
        ));
        // the buffer spills only under a limit; an unbounded session pool never refuses
        let limited = arrow_shards::MemoryPool::limit(pool.as_ref()).is_some();
        // Batches of the session's `batch_size`, as `RepartitionExec` hands over: the operators
        // above size their allocations by it (an ordered aggregation under a 1 MB pool with
        // `batch_size` 128 was refused 8,192-row batches: sqllogictest
        // `ordered_aggregate_spill.slt`).
        let batch_rows = context.session_config().batch_size().max(1);
        let mut builder = ShardBuffer::builder(self.schema(), partitions)
            .with_memory_pool(pool)
            .with_compact_target_rows(batch_rows)
            .with_read_batch_rows(batch_rows)
            .with_disk_when_nothing_to_spill(true)
            .with_max_concurrent_reads(self.options.max_concurrent_reads);
        if limited {
            builder = match spill_root(context)? {
                Some(root) => builder.with_spill_dir(root),
                None => builder.with_spill(false),
            };
        }
        if let Some(timeout) = self.options.write_timeout {
            builder = builder.with_write_timeout(timeout);
        }
        let buffer = builder
            .build()
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        if let Some(others) = context.memory_pool().downcast_ref::<SpillForOthersPool>() {
            others.join(&buffer);
        }
        let route: MakeRoute = match self.partitioning().clone() {
            Partitioning::Hash(exprs, _) => {
                Arc::new(move |_| Route::hash(exprs.clone(), partitions))
            }
            _ => Arc::new(move |input| Route::round_robin(partitions, input as u32)),
        };
        let metrics = ExchangeMetrics {
            spilled_bytes: MetricBuilder::new(&self.metrics).spilled_bytes(0),
            spill_count: MetricBuilder::new(&self.metrics).spill_count(0),
            write_wait: MetricBuilder::new(&self.metrics).subset_time("write_wait", 0),
        };
        let (closed_tx, closed_rx) = oneshot::channel();
        self.closed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(closed_rx);
        Ok(Exchange::start(
            buffer,
            Arc::clone(self.input()),
            Arc::clone(context),
            route,
            metrics,
            closed_tx,
        ))
    }

    /// The run for `partition`: the current one, or a new one if none is going or this
    /// partition was already handed out by it.
    fn exchange_for(&self, partition: usize, context: &Arc<TaskContext>) -> Result<Arc<Exchange>> {
        let count = self.partitioning().partition_count();
        if partition >= count {
            return Err(DataFusionError::Internal(format!(
                "ShardRepartitionExec: partition {partition} of {count}"
            )));
        }
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = runs.as_ref().is_none_or(|run| run.taken[partition]);
        if fresh {
            *runs = Some(Run {
                exchange: self.start(context)?,
                taken: vec![false; count],
            });
        }
        let run = runs.as_mut().expect("a run was just put in place");
        run.taken[partition] = true;
        let exchange = Arc::clone(&run.exchange);
        if run.taken.iter().all(|taken| *taken) {
            // every partition handed out: the streams alone keep the run alive
            *runs = None;
        }
        Ok(exchange)
    }
}

/// Where the buffer spills: the runtime's disk manager directory, made if it has none yet;
/// `None` when the disk manager is disabled or keeps no local directory.
fn spill_root(context: &TaskContext) -> Result<Option<std::path::PathBuf>> {
    let disk = context.runtime_env().disk_manager.clone();
    if !disk.tmp_files_enabled() {
        return Ok(None);
    }
    if disk.temp_dir_paths().is_empty() {
        // the OS-temp-dir mode makes its directory with the first file
        drop(disk.create_tmp_file("ShardRepartitionExec spill directory")?);
    }
    Ok(disk.temp_dir_paths().into_iter().next())
}

impl DisplayAs for ShardRepartitionExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let inputs = self.input().output_partitioning().partition_count();
        match t {
            DisplayFormatType::TreeRender => {
                writeln!(f, "partitioning_scheme={}", self.partitioning())
            }
            _ => write!(
                f,
                "ShardRepartitionExec: partitioning={}, input_partitions={inputs}",
                self.partitioning()
            ),
        }
    }
}

impl ExecutionPlan for ShardRepartitionExec {
    fn name(&self) -> &'static str {
        "ShardRepartitionExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.like.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![self.input()]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.like.apply_expressions(f)
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(DataFusionError::Internal(format!(
                "ShardRepartitionExec has one child, got {}",
                children.len()
            )));
        }
        let like = RepartitionExec::try_new(children.swap_remove(0), self.partitioning().clone())?;
        Ok(Arc::new(Self::from_repartition(
            &like,
            self.options.clone(),
        )?))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        self.like.benefits_from_input_partitioning()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        self.like.maintains_input_order()
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let exchange = self.exchange_for(partition, &context)?;
        let partition = partition as u32;
        let mode = self.options.mode;
        let stream = futures::stream::once(async move {
            let batches = exchange.read(partition, mode).await?;
            // the stream keeps the exchange (and so the run) alive until it is dropped
            Ok::<_, DataFusionError>(batches.map(move |batch| {
                let _keep = &exchange;
                batch
            }))
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
