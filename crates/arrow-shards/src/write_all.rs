//! Writing many batches from one input (an iterator or a stream): each written in turn as
//! [`write`](ShardBuffer::write) or [`write_partitioned`](ShardBuffer::write_partitioned)
//! would, stopping at the first refusal, which hands back the refused batch and the input not
//! taken yet, so nothing is lost. The loop every embedding wrote for itself (the Python
//! package's `write_stream`, the DataFusion exchange's feed, the CLI's input).

use std::fmt;

use arrow_array::{Array, RecordBatch, UInt32Array};
use futures::{Stream, StreamExt};

use crate::buffer::ShardBuffer;
use crate::error::WriteError;

/// What a many-batch write wrote: batches and rows accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Written {
    /// Batches accepted (zero-row ones included).
    pub batches: u64,
    /// Rows accepted.
    pub rows: u64,
}

impl Written {
    fn add(&mut self, rows: usize) {
        self.batches += 1;
        self.rows += rows as u64;
    }
}

/// A many-batch write that stopped at a refused batch (boxed in the `Err`: it holds the
/// input). Nothing is lost: the refused batch is
/// in [`refused`](Self::refused) (with its partition ids in [`ids`](Self::ids) for a
/// partitioned write), and every batch after it is still in [`rest`](Self::rest), the input
/// as it was left (an iterator or stream, not advanced past the refused batch).
pub struct WriteAllError<Rest> {
    /// The refused write's error, holding its batch ([`WriteError::into_batch`]).
    pub refused: WriteError,
    /// The refused batch's partition ids (partitioned writes only).
    pub ids: Option<UInt32Array>,
    /// The input not taken yet.
    pub rest: Rest,
    /// What was written before the refusal.
    pub written: Written,
}

impl<Rest> fmt::Debug for WriteAllError<Rest> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteAllError")
            .field("refused", &self.refused)
            .field("ids", &self.ids.as_ref().map(Array::len))
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl<Rest> fmt::Display for WriteAllError<Rest> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (after {} batches, {} rows were written; the refused batch and the rest of the \
             input are handed back)",
            self.refused, self.written.batches, self.written.rows
        )
    }
}

impl<Rest> std::error::Error for WriteAllError<Rest> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.refused)
    }
}

impl ShardBuffer {
    /// Writes every `(partition, batch)` of `batches` in order with
    /// [`write_blocking`](Self::write_blocking) (parking the thread while memory is full).
    /// Stops at the first refusal and hands back the refused batch and the rest of the input.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use arrow_array::{Int64Array, RecordBatch};
    /// use arrow_schema::{DataType, Field, Schema};
    /// use arrow_shards::ShardBuffer;
    ///
    /// let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    /// let buffer = ShardBuffer::builder(schema.clone(), 2).build()?;
    /// let batch = |k: i64| RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![k]))]);
    /// buffer.seal(1)?;
    /// let input = vec![(0, batch(1)?), (1, batch(2)?), (0, batch(3)?)];
    /// let stopped = *buffer.write_all_blocking(input).unwrap_err();
    /// assert_eq!(stopped.written.rows, 1); // partition 1 is sealed: refused there
    /// assert_eq!(stopped.refused.partition(), 1);
    /// assert_eq!(stopped.rest.count(), 1); // (0, batch(3)) was not taken
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_all_blocking<I>(
        &self,
        batches: I,
    ) -> Result<Written, Box<WriteAllError<I::IntoIter>>>
    where
        I: IntoIterator<Item = (u32, RecordBatch)>,
    {
        each(batches.into_iter(), |(partition, batch)| {
            self.write_blocking(partition, batch)
                .map_err(|e| Box::new((e, None)))
        })
    }

    /// [`write_all_blocking`](Self::write_all_blocking) for a stream, waiting without blocking
    /// the runtime thread. Cancel-safe like [`write`](Self::write): dropping the future leaves
    /// the batch being written out of the buffer (and the input where it was). It yields to
    /// the runtime after each batch, so that subscribers on the same runtime take what was
    /// written while the input goes on (an input stream that is always ready would otherwise
    /// fill the buffer, and make it spill, before they run).
    pub async fn write_all<S>(&self, batches: S) -> Result<Written, Box<WriteAllError<S>>>
    where
        S: Stream<Item = (u32, RecordBatch)> + Unpin,
    {
        each_async(batches, |(partition, batch)| async move {
            self.write(partition, batch)
                .await
                .map_err(|e| Box::new((e, None)))
        })
        .await
    }

    /// Writes every `(batch, partition ids)` of `batches` in order with
    /// [`write_partitioned_blocking`](Self::write_partitioned_blocking); stops at the first
    /// refusal and hands back the refused batch, its ids and the rest of the input.
    pub fn write_partitioned_all_blocking<I>(
        &self,
        batches: I,
    ) -> Result<Written, Box<WriteAllError<I::IntoIter>>>
    where
        I: IntoIterator<Item = (RecordBatch, UInt32Array)>,
    {
        each(batches.into_iter(), |(batch, ids)| {
            let result = self.write_partitioned_blocking(batch, &ids);
            result.map_err(|e| Box::new((e, Some(ids))))
        })
    }

    /// [`write_partitioned_all_blocking`](Self::write_partitioned_all_blocking) for a stream,
    /// waiting without blocking the runtime thread; cancel-safe like
    /// [`write_partitioned`](Self::write_partitioned). Yields after each batch, as
    /// [`write_all`](Self::write_all) does.
    pub async fn write_partitioned_all<S>(
        &self,
        batches: S,
    ) -> Result<Written, Box<WriteAllError<S>>>
    where
        S: Stream<Item = (RecordBatch, UInt32Array)> + Unpin,
    {
        each_async(batches, |(batch, ids)| async move {
            let result = self.write_partitioned(batch, &ids).await;
            result.map_err(|e| Box::new((e, Some(ids))))
        })
        .await
    }
}

/// One input of a many-batch write: its rows, counted before the write takes it.
trait Input {
    fn rows(&self) -> usize;
}

impl Input for (u32, RecordBatch) {
    fn rows(&self) -> usize {
        self.1.num_rows()
    }
}

impl Input for (RecordBatch, UInt32Array) {
    fn rows(&self) -> usize {
        self.0.num_rows()
    }
}

/// A refused input: the write's error, and the ids of a partitioned write (boxed: the error
/// path only).
type Refused = Box<(WriteError, Option<UInt32Array>)>;

/// The blocking loop: `write` each input of `rest` in turn, stopping at the first refusal.
fn each<I>(
    mut rest: I,
    mut write: impl FnMut(I::Item) -> Result<(), Refused>,
) -> Result<Written, Box<WriteAllError<I>>>
where
    I: Iterator,
    I::Item: Input,
{
    let mut written = Written::default();
    for input in rest.by_ref() {
        let rows = input.rows();
        if let Err(refused) = write(input) {
            let (refused, ids) = *refused;
            return Err(stopped(refused, ids, rest, written));
        }
        written.add(rows);
    }
    Ok(written)
}

/// The async loop: [`each`] over a stream, yielding to the runtime after each write.
async fn each_async<S, F>(
    mut rest: S,
    mut write: impl FnMut(S::Item) -> F,
) -> Result<Written, Box<WriteAllError<S>>>
where
    S: Stream + Unpin,
    S::Item: Input,
    F: Future<Output = Result<(), Refused>>,
{
    let mut written = Written::default();
    while let Some(input) = rest.next().await {
        let rows = input.rows();
        if let Err(refused) = write(input).await {
            let (refused, ids) = *refused;
            return Err(stopped(refused, ids, rest, written));
        }
        written.add(rows);
        tokio::task::yield_now().await;
    }
    Ok(written)
}

fn stopped<Rest>(
    refused: WriteError,
    ids: Option<UInt32Array>,
    rest: Rest,
    written: Written,
) -> Box<WriteAllError<Rest>> {
    Box::new(WriteAllError {
        refused,
        ids,
        rest,
        written,
    })
}
