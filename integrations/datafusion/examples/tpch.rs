//! TPC-H over `tpchgen-arrow` data in memory, with `ShardRepartitionExec` in place of
//! `RepartitionExec`: runs queries 1, 3, 5, 9 and 18, prints each one's row count and time, and
//! the exchange's metrics from `EXPLAIN ANALYZE` of query 18.
//!
//! ```sh
//! cargo run --release --example tpch -- 0.1 256   # scale factor, session memory limit in MiB
//! ```

use std::sync::Arc;
use std::time::Instant;

use arrow_shards_datafusion::{ShardRepartitionOptions, with_shard_repartition};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
#[allow(unreachable_pub)]
#[path = "../tests/common/queries.rs"]
mod queries;
#[allow(unreachable_pub)]
#[path = "../tests/common/tables.rs"]
mod tables;

#[tokio::main]
async fn main() -> datafusion::error::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let sf: f64 = args
        .get(1)
        .map_or(0.1, |a| a.parse().expect("scale factor"));
    let limit_mib: usize = args.get(2).map_or(256, |a| a.parse().expect("MiB"));
    let partitions = std::thread::available_parallelism().map_or(2, |n| n.get());

    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(limit_mib << 20)))
        .build_arc()?;
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_target_partitions(partitions))
        .with_runtime_env(runtime)
        .with_default_features();
    // the one line that puts ShardRepartitionExec in place of RepartitionExec
    let state = with_shard_repartition(state, ShardRepartitionOptions::default()).build();
    let ctx = SessionContext::new_with_state(state);
    for (name, parts) in tables::tables(sf, partitions as i32) {
        let table = MemTable::try_new(parts[0][0].schema(), parts)?;
        ctx.register_table(name, Arc::new(table))?;
    }
    println!("TPC-H SF {sf}, {partitions} partitions, {limit_mib} MiB FairSpillPool");
    for (query, sql) in queries::QUERIES {
        let start = Instant::now();
        let batches = ctx.sql(sql).await?.collect().await?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        println!(
            "q{query:<2} {rows:>5} rows in {:.3} s",
            start.elapsed().as_secs_f64()
        );
    }
    let explained = ctx
        .sql(&format!("EXPLAIN ANALYZE {}", queries::QUERIES[4].1))
        .await?
        .collect()
        .await?;
    let text = pretty_format_batches(&explained)?.to_string();
    for line in text.lines().filter(|l| l.contains("ShardRepartitionExec")) {
        println!("{}", line.trim_matches(|c| c == '|' || c == ' '));
    }
    Ok(())
}
