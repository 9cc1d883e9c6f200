//! Streaming reads: a subscription takes its partition's data while producers still write it
//! ([`SubscriptionStream`], async; [`SubscriptionReader`], blocking).
//!
//! Each take ([`State::take_some`](crate::state::State::take_some)) hands over the partition's
//! segments and complete batches there now, in write order, and each take is read through the
//! merge crate like a whole read; with nothing there, the subscription waits on its partition's
//! `Notify` (woken after unlock when a batch is stored, segments land, or the partition is
//! sealed, the buffer finished or closed). The take that finds the partition sealed or the
//! buffer finished also takes the open batch and is the last. A subscription with a minimum of
//! rows (`subscribe_with_min_rows`) also takes the open batch once it holds that many rows,
//! and is woken when it reaches them.
//!
//! # Locking
//! The buffer's `State` lock is taken for each take and for abandoning on drop, never while
//! a segment is read or the subscription waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use arrow_shards_merge::{MergeStream, Merger};
use futures::{Stream, StreamExt};
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use crate::error::Error;
use crate::read::{count, merger};
use crate::shared::Shared;

/// A subscription's claim on its partition: takes, and abandons the partition if dropped
/// before the last take.
#[derive(Debug)]
struct Claim {
    shared: Arc<Shared>,
    partition: u32,
    notify: Arc<Notify>,
    /// The last take was made: nothing more to take, nothing to abandon.
    ended: bool,
    /// Rows taken from the buffer, and rows handed to the consumer: what a drop leaves
    /// undelivered is counted as discarded.
    taken: u64,
    delivered: u64,
}

/// What a take gave.
enum Next {
    /// A merge of what was there (boxed: the variants' sizes differ by ~500 bytes).
    Take(Box<Merger>),
    /// Nothing yet: wait on the notify.
    Wait,
    /// Everything was handed over.
    End,
}

impl Claim {
    fn new(shared: Arc<Shared>, partition: u32, min_rows: usize) -> Result<Self, Error> {
        shared.check_partition(partition)?;
        let notify = shared.lock().subscribe(partition, min_rows)?;
        Ok(Self {
            shared,
            partition,
            notify,
            ended: false,
            taken: 0,
            delivered: 0,
        })
    }

    fn take(&mut self) -> Result<Next, ArrowError> {
        if self.ended {
            return Ok(Next::End);
        }
        let chunk = self
            .shared
            .with_lanes(|state, lanes| state.take_some(self.partition, lanes))
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
        self.ended = chunk.last;
        self.taken += chunk.taken.rows() as u64;
        let empty = chunk.taken.segments.is_empty() && chunk.taken.batches.is_empty();
        Ok(match (empty, chunk.last) {
            (false, _) => Next::Take(Box::new(merger(&self.shared, chunk.taken))),
            (true, false) => Next::Wait,
            (true, true) => Next::End,
        })
    }

    /// Counts a batch handed to the consumer.
    fn delivered(&mut self, batch: &RecordBatch) {
        self.delivered += batch.num_rows() as u64;
        count(&self.shared.counters, batch);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let undelivered = self.taken.saturating_sub(self.delivered);
        if self.ended && undelivered == 0 {
            return;
        }
        let discarded = self.shared.with_lanes(|state, lanes| {
            state.note_discarded(undelivered);
            (!self.ended).then(|| state.abandon(self.partition, lanes))
        });
        // Dropped after unlock: a segment's drop may delete a file.
        drop(discarded);
    }
}

/// One partition's batches as they are written, as a `futures::Stream`, made by
/// [`ShardBuffer::subscribe`](crate::ShardBuffer::subscribe). Poll it within a tokio runtime
/// (segments are read on its blocking threads, as [`PartitionStream`](crate::PartitionStream)
/// does).
///
/// It yields the partition's segments and complete batches as they become available, each
/// producer's rows in write order, and ends once the partition is sealed (or the buffer
/// finished) and everything is handed over. An error (a corrupt segment, the buffer closed
/// under it) is the last item. Dropping it before the end abandons the partition: what it held
/// and what is written to it afterwards is discarded and counted in
/// [`Metrics::rows_discarded`](crate::Metrics::rows_discarded).
pub struct SubscriptionStream {
    claim: Option<Claim>,
    current: Option<MergeStream>,
    waiting: Option<Pin<Box<OwnedNotified>>>,
    schema: SchemaRef,
}

impl std::fmt::Debug for SubscriptionStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriptionStream")
            .field("partition", &self.claim.as_ref().map(|c| c.partition))
            .field("reading", &self.current.is_some())
            .field("waiting", &self.waiting.is_some())
            .finish()
    }
}

impl SubscriptionStream {
    pub(crate) fn new(shared: Arc<Shared>, partition: u32, min_rows: usize) -> Result<Self, Error> {
        let schema = Arc::clone(&shared.schema);
        Ok(Self {
            claim: Some(Claim::new(shared, partition, min_rows)?),
            current: None,
            waiting: None,
            schema,
        })
    }

    /// The buffer's schema; every batch carries it.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// Ends the stream after an error: the claim goes (abandoning the partition).
    fn fail(&mut self, error: ArrowError) -> Poll<Option<Result<RecordBatch, ArrowError>>> {
        self.current = None;
        self.waiting = None;
        self.claim = None;
        Poll::Ready(Some(Err(error)))
    }
}

impl Stream for SubscriptionStream {
    type Item = Result<RecordBatch, ArrowError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(current) = &mut this.current {
                match ready!(current.poll_next_unpin(cx)) {
                    Some(Ok(batch)) => {
                        if let Some(claim) = &mut this.claim {
                            claim.delivered(&batch);
                        }
                        return Poll::Ready(Some(Ok(batch)));
                    }
                    Some(Err(e)) => return this.fail(e),
                    None => this.current = None,
                }
            }
            if let Some(waiting) = &mut this.waiting {
                ready!(waiting.as_mut().poll(cx));
                this.waiting = None;
            }
            let Some(claim) = &mut this.claim else {
                return Poll::Ready(None);
            };
            match claim.take() {
                Err(e) => return this.fail(e),
                Ok(Next::Take(merger)) => this.current = Some(merger.into_stream()),
                Ok(Next::Wait) => {
                    this.waiting = Some(Box::pin(Arc::clone(&claim.notify).notified_owned()));
                }
                Ok(Next::End) => {
                    this.claim = None;
                    return Poll::Ready(None);
                }
            }
        }
    }
}

/// One partition's batches as they are written, as a blocking `Iterator` and
/// [`RecordBatchReader`], made by
/// [`ShardBuffer::subscribe_blocking`](crate::ShardBuffer::subscribe_blocking): the same
/// batches, order, end and errors as [`SubscriptionStream`]; `next` blocks the calling thread
/// while there is nothing to take yet, and reads segments on it.
#[derive(Debug)]
pub struct SubscriptionReader {
    claim: Option<Claim>,
    current: Option<Merger>,
    schema: SchemaRef,
}

impl SubscriptionReader {
    pub(crate) fn new(shared: Arc<Shared>, partition: u32, min_rows: usize) -> Result<Self, Error> {
        let schema = Arc::clone(&shared.schema);
        Ok(Self {
            claim: Some(Claim::new(shared, partition, min_rows)?),
            current: None,
            schema,
        })
    }
}

impl SubscriptionReader {
    /// The buffer's schema; every batch carries it.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// The next batch if one can be had without waiting for producers: `Poll::Pending` if
    /// nothing is there to take yet (the partition still open), `Ready(None)` at the end. It
    /// may read a spilled segment on the calling thread. For engines that poll several
    /// partitions from one thread.
    pub fn try_next(&mut self) -> Poll<Option<Result<RecordBatch, ArrowError>>> {
        self.step(false)
    }

    fn step(&mut self, wait: bool) -> Poll<Option<Result<RecordBatch, ArrowError>>> {
        loop {
            if let Some(current) = &mut self.current {
                match current.next() {
                    Some(Ok(batch)) => {
                        if let Some(claim) = &mut self.claim {
                            claim.delivered(&batch);
                        }
                        return Poll::Ready(Some(Ok(batch)));
                    }
                    Some(Err(e)) => {
                        self.current = None;
                        self.claim = None;
                        return Poll::Ready(Some(Err(e)));
                    }
                    None => self.current = None,
                }
            }
            let Some(claim) = self.claim.as_mut() else {
                return Poll::Ready(None);
            };
            match claim.take() {
                Err(e) => {
                    self.claim = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Ok(Next::Take(merger)) => self.current = Some(*merger),
                Ok(Next::Wait) if wait => futures::executor::block_on(claim.notify.notified()),
                Ok(Next::Wait) => return Poll::Pending,
                Ok(Next::End) => {
                    self.claim = None;
                    return Poll::Ready(None);
                }
            }
        }
    }
}

impl Iterator for SubscriptionReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.step(true) {
            Poll::Ready(item) => item,
            // `step(true)` waits rather than return Pending.
            Poll::Pending => None,
        }
    }
}

impl RecordBatchReader for SubscriptionReader {
    fn schema(&self) -> SchemaRef {
        SubscriptionReader::schema(self)
    }
}
