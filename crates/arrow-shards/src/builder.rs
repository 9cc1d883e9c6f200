//! Building a [`ShardBuffer`]: every setting, its default, and the checks `build()` makes.

use std::sync::Arc;
use std::time::Duration;

use arrow_schema::SchemaRef;
use arrow_shards_memory::{BoundedPool, MemoryPool, UnboundedPool};

use crate::{ConfigError, ShardBuffer};

/// Settings for a [`ShardBuffer`]; made by [`ShardBuffer::builder`].
#[derive(Debug)]
#[must_use]
pub struct ShardBufferBuilder {
    pub(crate) schema: SchemaRef,
    pub(crate) num_partitions: u32,
    pub(crate) memory_limit: Option<usize>,
    pub(crate) pool: Option<Arc<dyn MemoryPool>>,
    pub(crate) write_timeout: Option<Duration>,
}

/// The settings of a built buffer.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) write_timeout: Option<Duration>,
}

impl ShardBufferBuilder {
    pub(crate) fn new(schema: SchemaRef, num_partitions: u32) -> Self {
        Self {
            schema,
            num_partitions,
            memory_limit: None,
            pool: None,
            write_timeout: None,
        }
    }

    /// Caps the bytes this buffer may hold in memory, with a pool of its own.
    /// A limit of 0 refuses every non-empty batch (without spilling).
    /// Exclusive with [`with_memory_pool`](Self::with_memory_pool).
    ///
    /// Default: unlimited (an [`UnboundedPool`] that still counts).
    pub fn with_memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = Some(bytes);
        self
    }

    /// Draws memory from `pool`, which other buffers (other shuffles in this process) may share.
    ///
    /// Default: a pool of this buffer's own, sized by `with_memory_limit`.
    pub fn with_memory_pool(mut self, pool: Arc<dyn MemoryPool>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Lets a write that does not fit wait up to `timeout` for room freed by reads (or by other
    /// buffers sharing the pool) before it fails with `MemoryExhausted`. Async writes time out
    /// with tokio's timer, so they need a tokio runtime with time enabled.
    ///
    /// Default: no waiting; a write that does not fit fails at once.
    pub fn with_write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = Some(timeout);
        self
    }

    /// Checks the settings and builds the buffer.
    pub fn build(self) -> Result<ShardBuffer, ConfigError> {
        if self.num_partitions == 0 {
            return Err(ConfigError::NoPartitions);
        }
        let pool: Arc<dyn MemoryPool> = match (self.pool, self.memory_limit) {
            (Some(_), Some(_)) => return Err(ConfigError::LimitAndPool),
            (Some(pool), None) => pool,
            (None, Some(limit)) => Arc::new(BoundedPool::new(limit)),
            (None, None) => Arc::new(UnboundedPool::new()),
        };
        let config = Config {
            write_timeout: self.write_timeout,
        };
        Ok(ShardBuffer::from_parts(
            self.schema,
            self.num_partitions,
            pool,
            config,
        ))
    }
}
