//! A spilling DataFusion repartition on the arrow-shards buffer, sharing the session's memory
//! pool (package `arrow-shards-datafusion`).
//!
//! - [`ShardRepartitionExec`]: an `ExecutionPlan` equivalent to `RepartitionExec` with hash or
//!   round-robin partitioning. The input partitions' tasks scatter-write into one
//!   [`ShardBuffer`](arrow_shards::ShardBuffer); each output partition is read, exactly once,
//!   after every input is done. Spills go to the runtime's disk manager directory.
//! - [`SessionPool`]: the buffer's memory charged to the session's `MemoryPool` as one
//!   spillable consumer, so one limit covers DataFusion's operators and the buffer;
//!   [`to_datafusion_error`] maps the buffer's errors back.
//! - [`SpillForOthersPool`]: wraps the session's pool so that the exchanges spill for the
//!   plan's other operators when those are refused (DataFusion's pools never ask).
//! - [`ShardRepartitionRule`] and [`with_shard_repartition`]: put it in place of
//!   `RepartitionExec` (opt-in, limited by [`ShardRepartitionOptions`]).
//!
//! The core crates are built on arrow 59 here (their `arrow_59` feature), DataFusion 55's
//! arrow: docs/arrow-versions.md. When to use which exchange: docs/datafusion.md.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_shards_datafusion::{ShardRepartitionOptions, with_shard_repartition};
//! use datafusion::arrow::array::{Int64Array, RecordBatch};
//! use datafusion::execution::session_state::SessionStateBuilder;
//! use datafusion::prelude::{SessionConfig, SessionContext};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> datafusion::error::Result<()> {
//! let config = SessionConfig::new().with_target_partitions(4);
//! let state = SessionStateBuilder::new()
//!     .with_config(config)
//!     .with_default_features();
//! let ctx = SessionContext::new_with_state(
//!     with_shard_repartition(state, ShardRepartitionOptions::default()).build(),
//! );
//! let v = Int64Array::from_iter_values(0..1000);
//! ctx.register_batch("t", RecordBatch::try_from_iter([("v", Arc::new(v) as _)])?)?;
//! let df = ctx.sql("SELECT v % 10 AS k, count(*) AS n FROM t GROUP BY k").await?;
//! let plan = df.clone().create_physical_plan().await?;
//! let shown = datafusion::physical_plan::displayable(plan.as_ref()).indent(true).to_string();
//! assert!(shown.contains("ShardRepartitionExec"), "{shown}");
//! let rows: usize = df.collect().await?.iter().map(|b| b.num_rows()).sum();
//! assert_eq!(rows, 10);
//! # Ok(())
//! # }
//! ```

mod errors;
mod exchange;
mod exec;
mod options;
mod pool;
mod route;
mod rule;
mod spill_for_others;

pub use errors::to_datafusion_error;
pub use exec::ShardRepartitionExec;
pub use options::{ExchangeMode, ShardRepartitionOptions};
pub use pool::SessionPool;
pub use rule::{ShardRepartitionRule, with_shard_repartition};
pub use spill_for_others::{DEFAULT_SPILL_FOR_OTHERS_WAIT, SpillForOthersPool};
