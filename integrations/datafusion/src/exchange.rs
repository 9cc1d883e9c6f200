//! One run of a `ShardRepartitionExec`: the buffer, the tasks
//! that feed it from the input partitions, and the signal that all of them are done.
//!
//! The data flow: `execute` of the first output partition starts the [`Exchange`]; one task
//! per input partition drives its input stream and scatter-writes each batch into the
//! buffer (the core's `write_partitioned_all`, or `write_all` of whole batches for round
//! robin); when the last input is done the buffer is finished and `done` turns `Ok`. In the
//! streaming mode (the default) each output stream subscribes to its partition at once and
//! yields its batches as they are written, ending when the buffer is finished; in the
//! materializing mode it waits for `done`, then reads its partition, exactly once. The first
//! failing input turns `done` into its error and closes the buffer, which ends every waiting
//! subscription: each output stream then reports the input's error.
//!
//! Cancellation: every output stream holds the exchange; when the last one is dropped (read to
//! its end, or cancelled) the exchange is dropped, which aborts the input tasks and closes the
//! buffer on tokio's blocking threads (batches nobody read are freed, spill files removed).
//! `ShardRepartitionExec::wait_closed` lets a caller wait for that.
//!
//! # Locking
//! No lock of its own is held across anything: `tasks` is a `Mutex<JoinSet>` only so that the
//! exchange is `Sync`, taken by `Drop` alone (through `get_mut`). `remaining` is an atomic;
//! `done` is a watch channel (tokio's lock, inside `send_if_modified` and `wait_for`).

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow_shards::ShardBuffer;
use datafusion::arrow::array::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::metrics::{Count, Time};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt, future};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

use crate::ExchangeMode;
use crate::errors::{to_datafusion_error, write_error};
use crate::route::Route;

/// How each input partition's rows are routed (one [`Route`] per input task).
pub(crate) type MakeRoute = Arc<dyn Fn(usize) -> Route + Send + Sync>;

/// What `done` holds: nothing yet, or every input's outcome.
type Outcome = Option<Result<(), Arc<DataFusionError>>>;

/// The exchange's counters as DataFusion metrics (shown by `EXPLAIN ANALYZE`).
#[derive(Debug, Clone)]
pub(crate) struct ExchangeMetrics {
    pub(crate) spilled_bytes: Count,
    pub(crate) spill_count: Count,
    pub(crate) write_wait: Time,
}

/// One run of the exchange; see the module docs.
#[derive(Debug)]
pub(crate) struct Exchange {
    buffer: ShardBuffer,
    done: watch::Receiver<Outcome>,
    tasks: Mutex<JoinSet<()>>,
    closed: Option<oneshot::Sender<()>>,
    /// Kept until the buffer is closed: its runtime's disk manager owns the directory the
    /// spill files are in, and removes it when dropped.
    context: Arc<TaskContext>,
}

impl Exchange {
    /// Starts one task per input partition of `input`, writing into `buffer`.
    pub(crate) fn start(
        buffer: ShardBuffer,
        input: Arc<dyn ExecutionPlan>,
        context: Arc<TaskContext>,
        route: MakeRoute,
        metrics: ExchangeMetrics,
        closed: oneshot::Sender<()>,
    ) -> Arc<Self> {
        let inputs = input.output_partitioning().partition_count();
        let (done_tx, done) = watch::channel(None);
        let done_tx = Arc::new(done_tx);
        let remaining = Arc::new(AtomicUsize::new(inputs));
        let mut tasks = JoinSet::new();
        if inputs == 0 {
            finish(&buffer, &done_tx, &metrics);
        }
        for partition in 0..inputs {
            let feed = Feed {
                buffer: buffer.clone(),
                input: Arc::clone(&input),
                context: Arc::clone(&context),
                route: route(partition),
            };
            let (done_tx, remaining, metrics) = (
                Arc::clone(&done_tx),
                Arc::clone(&remaining),
                metrics.clone(),
            );
            let buffer = buffer.clone();
            tasks.spawn(async move {
                // The feed's handle is dropped after its outcome is published (at the end of
                // this task): dropping it hands its open batches to their partitions, which
                // would wake outputs with rows before they could see an input's error.
                let (_handle, result) = feed.run(partition).await;
                match result {
                    Err(error) => {
                        let first = done_tx.send_if_modified(|outcome| {
                            let first = outcome.is_none();
                            if first {
                                *outcome = Some(Err(Arc::new(error)));
                            }
                            first
                        });
                        if first {
                            // Ends every waiting subscription; each reports the error in `done`.
                            let _ = buffer.close_async().await;
                        }
                    }
                    Ok(()) if remaining.fetch_sub(1, Ordering::AcqRel) == 1 => {
                        buffer.spills_done().await;
                        finish(&buffer, &done_tx, &metrics);
                    }
                    Ok(()) => {}
                }
            });
        }
        Arc::new(Self {
            buffer,
            done,
            tasks: Mutex::new(tasks),
            closed: Some(closed),
            context,
        })
    }

    /// `partition`'s batches: subscribed to at once (streaming), or read once every input is
    /// done (materializing).
    pub(crate) async fn read(
        &self,
        partition: u32,
        mode: ExchangeMode,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        if mode == ExchangeMode::Streaming {
            if let Some(error) = input_error(&self.done) {
                return Err(error);
            }
            let subscription = self
                .buffer
                .subscribe(partition)
                .map_err(|e| input_error(&self.done).unwrap_or_else(|| to_datafusion_error(e)))?;
            let done = self.done.clone();
            return Ok(subscription
                .map(move |batch| {
                    // The buffer was closed for an input's error: report that error.
                    batch.map_err(|e| input_error(&done).unwrap_or_else(|| e.into()))
                })
                .boxed());
        }
        let mut done = self.done.clone();
        let outcome = done
            .wait_for(Option::is_some)
            .await
            .map_err(|_| DataFusionError::Internal("ShardRepartitionExec: inputs vanished".into()))?
            .clone();
        match outcome {
            Some(Ok(())) => Ok(self
                .buffer
                .read(partition)
                .map_err(to_datafusion_error)?
                .into_stream()
                .map(|batch| batch.map_err(DataFusionError::from))
                .boxed()),
            Some(Err(error)) => Err(DataFusionError::Shared(error)),
            None => Err(DataFusionError::Internal(
                "ShardRepartitionExec: no outcome".into(),
            )),
        }
    }
}

/// The first input's error, if an input failed.
fn input_error(done: &watch::Receiver<Outcome>) -> Option<DataFusionError> {
    match &*done.borrow() {
        Some(Err(error)) => Some(DataFusionError::Shared(Arc::clone(error))),
        _ => None,
    }
}

/// Finishes the buffer after the last input and records its metrics.
fn finish(buffer: &ShardBuffer, done: &watch::Sender<Outcome>, metrics: &ExchangeMetrics) {
    let outcome = buffer
        .finish()
        .map_err(|e| Arc::new(to_datafusion_error(e)));
    let m = buffer.metrics();
    metrics.spilled_bytes.add(m.bytes_spilled as usize);
    metrics.spill_count.add(m.spill_runs as usize);
    metrics.write_wait.add_duration(m.write_wait);
    done.send_if_modified(|slot| {
        let first = slot.is_none();
        if first {
            *slot = Some(outcome);
        }
        first
    });
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if let Ok(tasks) = self.tasks.get_mut() {
            tasks.abort_all();
        }
        let buffer = self.buffer.clone();
        let closed = self.closed.take();
        let context = Arc::clone(&self.context);
        let close = move || {
            // The query is over (or cancelled): its errors were reported to its streams.
            let _ = buffer.close();
            drop(context);
            if let Some(closed) = closed {
                let _ = closed.send(());
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(close)),
            Err(_) => close(),
        }
    }
}

/// One input partition's task: drive its stream and write every batch into the buffer.
struct Feed {
    buffer: ShardBuffer,
    input: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
    route: Route,
}

impl Feed {
    /// Writes the input partition's non-empty batches with the buffer's own many-batch writes
    /// (`write_partitioned_all` for hash routing, `write_all` for round robin). An input or
    /// routing error ends the writes and is returned; a refused write is returned as the
    /// buffer's error (its batch and the rest of the input are dropped with the query). The
    /// feed's buffer handle comes back with the outcome, for the caller to drop after it.
    async fn run(self, partition: usize) -> (ShardBuffer, Result<()>) {
        let Feed {
            buffer,
            input,
            context,
            route,
        } = self;
        let input = match input.execute(partition, context) {
            Ok(input) => input,
            Err(error) => return (buffer, Err(error)),
        };
        let mut failed = None;
        let written = match route {
            Route::Hash(mut route) => {
                let writes = routed(input, &mut failed, move |batch| {
                    route.ids(&batch).map(|ids| (batch, ids))
                });
                let written = buffer.write_partitioned_all(writes).await;
                written
                    .map(drop)
                    .map_err(|stopped| write_error(stopped.refused))
            }
            Route::RoundRobin(mut route) => {
                let writes = routed(input, &mut failed, move |batch| {
                    Ok((route.next_partition(), batch))
                });
                let written = buffer.write_all(writes).await;
                written
                    .map(drop)
                    .map_err(|stopped| write_error(stopped.refused))
            }
        };
        let result = match failed {
            Some(error) => Err(error),
            None => written,
        };
        (buffer, result)
    }
}

/// The non-empty batches of `input`, each made a write by `route`; the first error (the
/// input's or the route's) ends them and is put in `failed`.
fn routed<'a, T: Send + 'a>(
    input: SendableRecordBatchStream,
    failed: &'a mut Option<DataFusionError>,
    mut route: impl FnMut(RecordBatch) -> Result<T> + Send + 'a,
) -> Pin<Box<dyn Stream<Item = T> + Send + 'a>> {
    let writes = input
        .try_filter(|batch| future::ready(batch.num_rows() > 0))
        .scan(failed, move |failed, batch| {
            future::ready(match batch.and_then(&mut route) {
                Ok(write) => Some(write),
                Err(error) => {
                    **failed = Some(error);
                    None
                }
            })
        });
    Box::pin(writes)
}
