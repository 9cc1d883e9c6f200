//! The oversized path, the writer's side: a write that needs more than the whole memory limit
//! (see the oversized rule in [`crate::write`]) is split into one part per partition, handed
//! to the spiller, which writes it to disk ([`crate::spiller`]'s direct path), and committed by
//! the writer when the answer comes: all parts or none, so a dropped future never lands and a
//! scattered write stays all or nothing.
//!
//! # Locking
//! The buffer's `State` lock is taken once, to commit the parts (`State::land_direct`); the
//! job is sent and the answer awaited with no lock held.

use arrow_array::RecordBatch;
use tokio::sync::oneshot::error::RecvError;

use crate::buffer::ShardBuffer;
use crate::error::{Error, WriteError};
use crate::shard::Shard;
use crate::spiller::{DirectReply, Landed};
use crate::state::LandedPart;
use crate::write::error_partition;

impl ShardBuffer {
    pub(crate) fn write_direct_blocking(
        &self,
        partition: u32,
        shard: Shard,
    ) -> Result<(), WriteError> {
        let (reply, parts) = self.hand_to_spiller(partition, shard)?;
        self.land(partition, reply.blocking_recv(), parts)
    }

    pub(crate) async fn write_direct_async(
        &self,
        partition: u32,
        shard: Shard,
    ) -> Result<(), WriteError> {
        let (reply, parts) = self.hand_to_spiller(partition, shard)?;
        // Dropping the future here drops the reply, and with it the landed segments.
        self.land(partition, reply.await, parts)
    }

    /// Splits a write too large for the whole limit into one part per partition and sends
    /// them to the spiller; returns the reply to wait for, with what the writer keeps.
    pub(crate) fn hand_to_spiller(
        &self,
        partition: u32,
        shard: Shard,
    ) -> Result<(DirectReply, Kept), WriteError> {
        let (parts, original) = shard
            .into_parts(partition)
            .map_err(|(e, batch)| WriteError::new(partition, e, batch))?;
        let kept = Kept {
            parts: parts
                .iter()
                .map(|(p, stored)| (*p, stored.batch.num_rows(), stored.size, stored.data))
                .collect(),
            original,
        };
        let spiller = self
            .spiller
            .as_ref()
            .expect("oversized only with a spiller");
        match spiller.direct(parts) {
            Some(reply) => Ok((reply, kept)),
            None => Err(WriteError::new(partition, Error::Closed, kept.original)),
        }
    }

    /// Commits a direct write's segments, written by the spiller, to their partitions.
    pub(crate) fn land(
        &self,
        partition: u32,
        reply: Result<Result<Landed, (u32, Error)>, RecvError>,
        kept: Kept,
    ) -> Result<(), WriteError> {
        let landed = match reply {
            Ok(Ok(landed)) => landed,
            Ok(Err((p, error))) => return Err(WriteError::new(p, error, kept.original)),
            Err(_) => {
                return Err(WriteError::new(
                    partition,
                    self.spiller_gone(),
                    kept.original,
                ));
            }
        };
        let parts = landed
            .into_iter()
            .zip(&kept.parts)
            .map(
                |((partition, segments), &(_, rows, size, data))| LandedPart {
                    partition,
                    segments,
                    rows,
                    size,
                    data,
                },
            )
            .collect();
        let result = self.shared.lock().land_direct(parts);
        match result {
            // Parts for abandoned partitions, dropped after unlock.
            Ok(discarded) => {
                drop(discarded);
                Ok(())
            }
            Err((error, segments)) => {
                drop(segments);
                let p = error_partition(&error, partition);
                Err(WriteError::new(p, error, kept.original))
            }
        }
    }

    /// Why a direct write got no answer: the buffer was closed under it, or the spiller died.
    fn spiller_gone(&self) -> Error {
        if self.shared.lock().is_closed() {
            Error::Closed
        } else {
            Error::Internal("the spiller thread stopped")
        }
    }
}

/// What a writer keeps while the spiller writes its parts: each part's partition, rows, size
/// and data bytes (to commit them), and the batch as written (to hand back on failure).
pub(crate) struct Kept {
    parts: Vec<(u32, usize, usize, usize)>,
    original: RecordBatch,
}
