//! What the integration tests share: TPC-H tables from `tpchgen-arrow`, sessions with the
//! rule on or off, a memory limit and a spill directory of the test's own.

#![allow(dead_code, unreachable_pub, unused_imports)]

mod queries;
mod tables;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_shards_datafusion::{ShardRepartitionOptions, with_shard_repartition};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::physical_plan::{ExecutionPlan, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
/// The scale factor of the tests' TPC-H data (60,175 lineitem rows).
pub const SCALE_FACTOR: f64 = 0.01;

/// How a test session is set up.
#[derive(Clone, Default)]
pub struct Setup {
    /// Put `ShardRepartitionExec` in place of `RepartitionExec`.
    pub rule: bool,
    /// The session's memory pool (unbounded if `None`).
    pub pool: Option<Arc<dyn MemoryPool>>,
    /// The disk manager's directory (the OS temp dir if `None`).
    pub spill_root: Option<PathBuf>,
    /// Target partitions (4 if 0).
    pub partitions: usize,
    /// Materializing exchanges instead of streaming ones (the default).
    pub materialize: bool,
}

impl Setup {
    pub fn rule(rule: bool) -> Self {
        Self {
            rule,
            ..Self::default()
        }
    }

    pub fn limited(mut self, bytes: usize) -> Self {
        self.pool = Some(Arc::new(FairSpillPool::new(bytes)));
        self
    }

    pub fn spilling_to(mut self, root: &Path) -> Self {
        self.spill_root = Some(root.to_path_buf());
        self
    }

    /// A session with the TPC-H tables registered.
    pub fn context(&self) -> SessionContext {
        let partitions = if self.partitions == 0 {
            4
        } else {
            self.partitions
        };
        let mut runtime = RuntimeEnvBuilder::new();
        if let Some(pool) = &self.pool {
            runtime = runtime.with_memory_pool(Arc::clone(pool));
        }
        if let Some(root) = &self.spill_root {
            runtime = runtime.with_disk_manager_builder(
                DiskManagerBuilder::default()
                    .with_mode(DiskManagerMode::Directories(vec![root.to_path_buf()])),
            );
        }
        let mut config = SessionConfig::new().with_target_partitions(partitions);
        if self.pool.is_some() {
            // DataFusion's sorts reserve 10 MiB up front by default: under the tests' 8-10 MiB
            // pools every sort would fail, with the rule on or off.
            config.options_mut().execution.sort_spill_reservation_bytes = 256 << 10;
        }
        let mut state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime.build_arc().expect("runtime"))
            .with_default_features();
        if self.rule {
            let mut options = ShardRepartitionOptions::default();
            if self.materialize {
                options = options.with_mode(arrow_shards_datafusion::ExchangeMode::Materialize);
            }
            state = with_shard_repartition(state, options);
        }
        let ctx = SessionContext::new_with_state(state.build());
        for (name, parts) in tables(SCALE_FACTOR, partitions as i32) {
            let schema = parts[0][0].schema();
            let table = MemTable::try_new(schema, parts).expect("table");
            ctx.register_table(name, Arc::new(table)).expect("register");
        }
        ctx
    }
}

/// Runs `sql`, returning its physical plan (as shown) and its rows, printed.
pub async fn run(ctx: &SessionContext, sql: &str) -> (String, String) {
    let df = ctx.sql(sql).await.expect("plan");
    let plan = df
        .clone()
        .create_physical_plan()
        .await
        .expect("physical plan");
    let shown = show(plan.as_ref());
    let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .expect("query");
    let printed = pretty_format_batches(&batches).expect("print").to_string();
    (shown, printed)
}

pub fn show(plan: &dyn ExecutionPlan) -> String {
    displayable(plan).indent(true).to_string()
}

/// Everything under `root`, recursively (files and directories).
pub fn entries(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                todo.push(path.clone());
            }
            found.push(path);
        }
    }
    found
}

/// Only directories under `root` (the disk manager's own is left in place by design).
pub fn files(root: &Path) -> Vec<PathBuf> {
    entries(root).into_iter().filter(|p| !p.is_dir()).collect()
}

pub use queries::QUERIES;
pub use tables::tables;
