//! One run of the exchange benchmark in docs/datafusion.md: a parquet file read as 2 input
//! partitions, hash-repartitioned on one column into N outputs by DataFusion's own
//! `RepartitionExec` or by `ShardRepartitionExec`, every output row counted. Prints one JSON
//! line: time, rows, spilled bytes, what the pool still holds once the exchange is closed
//! (`pool_left`, 0 when nothing leaks) and the process's peak RSS (`VmHWM`).
//!
//! ```sh
//! cargo run --release --features parquet-bench --example repartition_bench -- \
//!     FILE.parquet --exchange shards --partitions 1024 --pool fair:256 --drive all
//! ```
//!
//! - `--exchange datafusion|shards|shards-barrier|none` (`shards`: streaming, the default
//!   mode; `shards-barrier`: `ExchangeMode::Materialize`; `none`: the scan alone, its 2
//!   partitions counted: the plan's own baseline)
//! - `--pool none|fair:MiB|greedy:MiB`: the session's memory pool
//! - `--drive all|sequential`: every output partition polled at once (one task each), or read
//!   one after another to its end, as a distributed engine's next stage reads them
//! - `--key COLUMN` (default `l_orderkey`), `--inputs K` (default 2)
//! - `--reads R`: the shards exchange's most concurrent segment reads (default: the buffer's,
//!   twice the cores and at least 4; 0: unbounded)
//!
//! `benches/datafusion_bench.py` runs the whole table.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use arrow_shards_datafusion::{ExchangeMode, ShardRepartitionExec, ShardRepartitionOptions};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{
    FairSpillPool, GreedyMemoryPool, MemoryPool, TrackConsumersPool,
};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use futures::StreamExt;

struct Args {
    file: String,
    exchange: String,
    partitions: usize,
    pool: String,
    drive: String,
    key: String,
    inputs: usize,
    reads: Option<usize>,
}

fn parse() -> Result<Args> {
    let mut args = Args {
        file: String::new(),
        exchange: "shards".into(),
        partitions: 64,
        pool: "none".into(),
        drive: "all".into(),
        key: "l_orderkey".into(),
        inputs: 2,
        reads: None,
    };
    let mut it = std::env::args().skip(1);
    let bad = |what: &str| DataFusionError::Configuration(format!("repartition_bench: {what}"));
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| bad(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--exchange" => args.exchange = value()?,
            "--partitions" => {
                args.partitions = value()?.parse().map_err(|_| bad("--partitions N"))?;
            }
            "--pool" => args.pool = value()?,
            "--drive" => args.drive = value()?,
            "--key" => args.key = value()?,
            "--inputs" => args.inputs = value()?.parse().map_err(|_| bad("--inputs K"))?,
            "--reads" => args.reads = Some(value()?.parse().map_err(|_| bad("--reads R"))?),
            file if !file.starts_with('-') && args.file.is_empty() => args.file = file.into(),
            other => return Err(bad(&format!("unknown argument {other}"))),
        }
    }
    if args.file.is_empty() {
        return Err(bad("give a parquet file"));
    }
    Ok(args)
}

fn pool(spec: &str) -> Result<Option<Arc<dyn MemoryPool>>> {
    let mib = |s: &str| -> Result<usize> {
        s.parse::<usize>()
            .map(|m| m << 20)
            .map_err(|_| DataFusionError::Configuration(format!("--pool {spec}: bad MiB")))
    };
    Ok(match spec.split_once(':') {
        None if spec == "none" => None,
        Some(("fair", m)) => Some(Arc::new(FairSpillPool::new(mib(m)?))),
        Some(("greedy", m)) => Some(Arc::new(TrackConsumersPool::new(
            GreedyMemoryPool::new(mib(m)?),
            std::num::NonZeroUsize::new(3).expect("3 > 0"),
        ))),
        _ => {
            return Err(DataFusionError::Configuration(format!(
                "--pool {spec}: none, fair:MiB or greedy:MiB"
            )));
        }
    })
}

/// The process's peak resident set (`VmHWM`) in bytes, 0 where /proc has none.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = parse()?;
    let mut runtime = RuntimeEnvBuilder::new();
    let pool = pool(&args.pool)?;
    if let Some(pool) = &pool {
        runtime = runtime.with_memory_pool(Arc::clone(pool));
    }
    let config = SessionConfig::new().with_target_partitions(args.inputs);
    let ctx = SessionContext::new_with_config_rt(config, runtime.build_arc()?);
    let scan = ctx
        .read_parquet(&args.file, ParquetReadOptions::default())
        .await?
        .create_physical_plan()
        .await?;
    let hash = Partitioning::Hash(vec![col(&args.key, &scan.schema())?], args.partitions);
    let plan: Arc<dyn ExecutionPlan> = match args.exchange.as_str() {
        "datafusion" => Arc::new(RepartitionExec::try_new(scan, hash)?),
        "shards" | "shards-barrier" => {
            let mut options = ShardRepartitionOptions::default();
            if args.exchange == "shards-barrier" {
                options = options.with_mode(ExchangeMode::Materialize);
            }
            if let Some(reads) = args.reads {
                options = options.with_max_concurrent_reads(reads);
            }
            Arc::new(ShardRepartitionExec::try_new_with(scan, hash, options)?)
        }
        "none" => scan,
        other => {
            return Err(DataFusionError::Configuration(format!(
                "--exchange {other}: datafusion, shards (streaming), shards-barrier or none"
            )));
        }
    };
    let task = ctx.task_ctx();
    let outputs = plan.output_partitioning().partition_count();
    let rows = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    match args.drive.as_str() {
        "all" => {
            let mut tasks = Vec::with_capacity(outputs);
            for partition in 0..outputs {
                let mut stream = plan.execute(partition, Arc::clone(&task))?;
                let rows = Arc::clone(&rows);
                tasks.push(tokio::spawn(async move {
                    while let Some(batch) = stream.next().await {
                        rows.fetch_add(batch?.num_rows(), Ordering::Relaxed);
                    }
                    Ok::<(), DataFusionError>(())
                }));
            }
            for task in tasks {
                task.await
                    .map_err(|e| DataFusionError::External(e.into()))??;
            }
        }
        "sequential" => {
            // every stream is opened first (as a next stage's tasks would be), then each is
            // read to its end before the next is polled
            let streams = (0..outputs)
                .map(|p| plan.execute(p, Arc::clone(&task)))
                .collect::<Result<Vec<_>>>()?;
            for mut stream in streams {
                while let Some(batch) = stream.next().await {
                    rows.fetch_add(batch?.num_rows(), Ordering::Relaxed);
                }
            }
        }
        other => {
            return Err(DataFusionError::Configuration(format!(
                "--drive {other}: all or sequential"
            )));
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let spilled = plan.metrics().and_then(|m| m.spilled_bytes()).unwrap_or(0);
    if let Some(shards) = plan.downcast_ref::<ShardRepartitionExec>() {
        shards.wait_closed().await;
    }
    let left = pool.as_ref().map_or(0, |p| p.reserved());
    println!(
        "{{\"exchange\":\"{}\",\"partitions\":{},\"pool\":\"{}\",\"drive\":\"{}\",\
         \"seconds\":{seconds:.3},\"rows\":{},\"spilled_bytes\":{spilled},\
         \"pool_left\":{left},\"peak_rss\":{}}}",
        args.exchange,
        args.partitions,
        args.pool,
        args.drive,
        rows.load(Ordering::Relaxed),
        peak_rss()
    );
    Ok(())
}
