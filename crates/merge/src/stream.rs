//! [`MergeStream`]: the merge as an async stream, reading segments on tokio's blocking threads.
//!
//! Each segment read is one `spawn_blocking` task that reads, checks and decodes that one
//! segment and ends; no blocking task outlives its segment, so a slow consumer never pins a
//! blocking thread (the deadlock in DataFusion #15323 came from one long-lived blocking task per
//! file). Up to `1 + read_ahead` segments are decoded or being decoded at once; a read ahead
//! of need starts only if the segment's `memory_bytes` fit under the pool's limit, and the read
//! the merge needs first makes room as the iterator does (see the `Merger`'s memory section).
//!
//! With [`ReadSlots`](crate::ReadSlots) in the options, a read first waits (as a small async
//! task, no thread) for a slot shared with other streams, then runs on a blocking thread with
//! the slot and gives it back when the segment is decoded. The segment's bytes are reserved
//! when the read is queued, so the pool sees what the stream will hold. With a
//! [`ReadBudget`], the read the merge needs may have to wait for room: it waits as the same
//! small task, *before* taking a slot, so a slot is only ever held by a read whose memory is
//! reserved and which therefore finishes.
//!
//! # Locking
//! None: the stream is polled by one task at a time (`&mut self`), and a read task shares
//! nothing with it but the pool, which is lock-free, the read budget (a semaphore for its
//! overdraft, and the pool's release signal, whose mutex guards only its epoch), and the slots'
//! semaphore, which is taken by the read task alone and released by it; its result comes back through its `JoinHandle`.

use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use arrow_shards_memory::{MemoryPool, MemoryReservation};
use arrow_shards_spill::panic_message;
use futures::Stream;
use tokio::task::{JoinError, JoinHandle};

use crate::budget::{fits, reserve_segment};
use crate::input::ChargedBatches;
use crate::read_budget::Reserved;
use crate::state::{MergeState, Step};
use crate::{MergeError, MergeOptions, ReadBudget, ReadSlots};

/// The batches of a [`Merger`](crate::Merger) as a `Stream`; same order, same batches, same
/// errors, with segments read ahead on tokio's blocking threads. Poll it inside a tokio
/// runtime (outside one, it yields an error).
///
/// Dropping the stream cancels reads that have not started (including those waiting for a read
/// slot); reads already running finish on their blocking thread and release their memory and
/// slot when they do.
#[derive(Debug)]
pub struct MergeStream {
    state: MergeState,
    pool: Arc<dyn MemoryPool>,
    read_ahead: usize,
    slots: Option<ReadSlots>,
    budget: Option<ReadBudget>,
    /// Reads in flight, oldest first.
    reads: VecDeque<Read>,
}

/// One segment read on a blocking thread.
#[derive(Debug)]
struct Read {
    handle: JoinHandle<Result<ChargedBatches, ArrowError>>,
    /// The run file and the segment's offset, for error messages.
    path: PathBuf,
    offset: u64,
}

impl MergeStream {
    pub(crate) fn new(state: MergeState, pool: Arc<dyn MemoryPool>, options: MergeOptions) -> Self {
        Self {
            state,
            pool,
            read_ahead: options.read_ahead(),
            slots: options.read_slots().cloned(),
            budget: options.read_budget().cloned(),
            reads: VecDeque::new(),
        }
    }

    /// The schema of every output batch.
    pub fn schema(&self) -> SchemaRef {
        SchemaRef::clone(self.state.schema())
    }

    /// Starts reads while fewer than `1 + read_ahead` segments are held or in flight and the
    /// next one fits under the pool's limit. A read that does not fit is left to `poll_next`,
    /// which starts it once the merge needs it, after making room.
    fn launch(&mut self) -> Result<(), ArrowError> {
        while self.state.segments_held() < 1 + self.read_ahead {
            let Some(bytes) = self.state.next_segment_bytes() else {
                break;
            };
            if self.budget.is_some() {
                // Within the limit or not at all: only the read the merge needs may wait.
                let mut reservation = MemoryReservation::new(&self.pool);
                if reservation.try_grow(bytes).is_err() {
                    break;
                }
                self.launch_one(Some((reservation, None)))?;
            } else if fits(&self.pool, bytes) {
                self.launch_one(None)?;
            } else {
                break;
            }
        }
        Ok(())
    }

    /// Starts the read of the next segment on a blocking thread (after a read slot, if the
    /// stream has slots), with `reserved` if it was reserved already; else with a forced grow,
    /// or, with a read budget, after waiting for room as a task, before taking the slot.
    fn launch_one(&mut self, reserved: Option<Reserved>) -> Result<(), ArrowError> {
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime,
            Err(e) => {
                return Err(MergeError::Internal(format!(
                    "MergeStream polled outside a tokio runtime: {e}"
                ))
                .into());
            }
        };
        let Some((index, segment)) = self.state.launch_next() else {
            return Ok(());
        };
        let schema = self.schema();
        let (path, offset) = (segment.path().to_path_buf(), segment.offset());
        let bytes = segment.memory_bytes();
        // Reserve (or wait for room, as a task) first, then a slot, then read on a blocking
        // thread: a read that holds a slot never waits for memory (see `ReadBudget::reserve`).
        let reserve = match (reserved, &self.budget) {
            (Some(reserved), _) => Reserve::Done(reserved),
            (None, None) => Reserve::Done((reserve_segment(&self.pool, &segment), None)),
            (None, Some(budget)) => Reserve::Wait(budget.clone(), Arc::clone(&self.pool)),
        };
        let read = move |reserved: Reserved| {
            ChargedBatches::read_segment(&segment, index, reserved, &schema)
        };
        let handle = match (reserve, self.slots.clone()) {
            (Reserve::Done(reserved), None) => runtime.spawn_blocking(move || read(reserved)),
            (reserve, slots) => {
                let (path, offset) = (path.clone(), offset);
                runtime.spawn(async move {
                    let reserved = match reserve {
                        Reserve::Done(reserved) => reserved,
                        Reserve::Wait(budget, pool) => budget.reserve(&pool, bytes).await?,
                    };
                    let slot = match slots {
                        Some(slots) => slots.acquire().await,
                        None => None,
                    };
                    let blocking = tokio::task::spawn_blocking(move || {
                        let batches = read(reserved);
                        drop(slot);
                        batches
                    });
                    blocking
                        .await
                        .unwrap_or_else(|e| Err(join_failure(e, path, offset)))
                })
            }
        };
        self.reads.push_back(Read {
            handle,
            path,
            offset,
        });
        Ok(())
    }
}

/// A read's memory: reserved already, or to wait for with the read budget.
enum Reserve {
    Done(Reserved),
    Wait(ReadBudget, Arc<dyn MemoryPool>),
}

fn join_failure(e: JoinError, path: PathBuf, offset: u64) -> ArrowError {
    let reason = if e.is_panic() {
        let panic = e.into_panic();
        panic_message(&*panic).unwrap_or("panicked").to_string()
    } else {
        "cancelled".to_string()
    };
    MergeError::ReadTask {
        path,
        offset,
        reason,
    }
    .into()
}

impl Stream for MergeStream {
    type Item = Result<RecordBatch, ArrowError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Err(e) = this.launch() {
                this.state.fail(e, true);
            }
            match this.state.step() {
                Ok(Step::Batch(batch)) => return Poll::Ready(Some(Ok(batch))),
                Ok(Step::Done) => return Poll::Ready(None),
                Err(e) => {
                    this.abort_reads();
                    return Poll::Ready(Some(Err(e)));
                }
                Ok(Step::NeedSegment) => {
                    if this.state.release_overdraft() {
                        continue;
                    }
                    if this.reads.is_empty() {
                        // The needed segment is not in flight: it did not fit under the limit
                        // when reads were last launched, or the one held then has just been
                        // used up (an empty segment can be used up without yielding a batch).
                        // Make room if it still does not fit, then read it whatever it costs.
                        if this.state.make_room(&this.pool) {
                            continue;
                        }
                        if let Err(e) = this.launch_one(None) {
                            this.state.fail(e, true);
                            continue;
                        }
                    }
                    let Some(read) = this.reads.front_mut() else {
                        let e = MergeError::Internal("segment needed but none in flight".into());
                        this.state.fail(e.into(), false);
                        continue;
                    };

                    let result = match Pin::new(&mut read.handle).poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(result) => result,
                    };
                    let Some(read) = this.reads.pop_front() else {
                        continue;
                    };
                    this.state.supply(
                        result.unwrap_or_else(|e| Err(join_failure(e, read.path, read.offset))),
                    );
                    if this.state.segments_held() == 0 {
                        // failed: nothing else will be supplied
                        this.abort_reads();
                    }
                }
            }
        }
    }
}

impl MergeStream {
    fn abort_reads(&mut self) {
        for read in self.reads.drain(..) {
            read.handle.abort();
        }
    }
}

impl Drop for MergeStream {
    fn drop(&mut self) {
        self.abort_reads();
    }
}
