//! What the spiller thread is asked to do, through its channel.

use crate::error::Error;
use crate::shard::Part;

use super::direct::Landed;

/// What the spiller is asked to do.
pub(crate) enum Job {
    Wake,
    Direct {
        parts: Vec<Part>,
        reply: tokio::sync::oneshot::Sender<Result<Landed, (u32, Error)>>,
    },
    /// Answered once every job sent before it is done (`ShardBuffer::wait_for_spills`).
    Barrier(tokio::sync::oneshot::Sender<()>),
    Shutdown,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Wake => f.write_str("Wake"),
            Job::Direct { parts, .. } => write!(f, "Direct({} parts)", parts.len()),
            Job::Barrier(_) => f.write_str("Barrier"),
            Job::Shutdown => f.write_str("Shutdown"),
        }
    }
}
