//! `shuffle-bench`: the macro benchmark of arrow-shards.
//!
//! TPC-H lineitem, cut into chunks and hash-partitioned by `l_orderkey` before any timing, is
//! written to a `ShardBuffer` shard by shard and read back partition by partition, with no
//! memory limit, with limits of 50% and 10% of the data's in-memory size, and, as a baseline,
//! through one eager IPC stream file per partition (Dask's disk buffer). References for the same
//! byte count (memory copies, one file, IPC encode/decode) are measured in the same run.
//!
//! Each case runs in a child process of this binary (`--child`), so that its peak resident
//! memory (`VmHWM`, process-wide and monotonic) belongs to it alone. The parent collects one
//! JSON line per child and prints a markdown report; see `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release -p arrow-shards-benches --bin shuffle-bench -- --scale 1 --json-out shuffle.jsonl
//! cargo run --release -p arrow-shards-benches --bin shuffle-bench -- --scaling
//! ```

/// With the `jemalloc` feature, the CLI's allocator (see the feature's note in Cargo.toml).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod cases;
mod data;
mod proc_status;
mod reference;
mod report;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::cases::{ReadMode, Run};
use crate::data::{Input, Source};
use crate::reference::RefRun;

pub(crate) type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Macro benchmark: shuffle TPC-H lineitem through a ShardBuffer.
#[derive(Debug, Clone, Parser)]
#[command(version, about)]
struct Args {
    /// TPC-H scale factor of the generated lineitem table (about 6M rows per 1.0).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Rows per input chunk; each chunk is partitioned into one shard per partition.
    #[arg(long, default_value_t = 100_000)]
    chunk_rows: usize,
    /// Partition counts to run every case with.
    #[arg(long, value_delimiter = ',', default_values_t = [64u32, 1024])]
    partitions: Vec<u32>,
    /// Runs per case (the report shows median, min and max).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Runs for the spilling and eager-disk cases and the scaling series (default: --runs).
    #[arg(long)]
    disk_runs: Option<usize>,
    /// Cases to run.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = CaseKind::ALL)]
    cases: Vec<CaseKind>,
    /// Directory for spill files, the eager-disk files and the file reference.
    /// Default: the system temp dir.
    #[arg(long)]
    spill_dir: Option<PathBuf>,
    /// Also write every result as JSON lines to this file.
    #[arg(long)]
    json_out: Option<PathBuf>,
    /// Run only the scaling series: one spilling case at several scales with a fixed limit.
    #[arg(long)]
    scaling: bool,
    /// Scale factors of the scaling series.
    #[arg(long, value_delimiter = ',', default_values_t = [0.1, 0.5, 1.0, 2.0])]
    scaling_scales: Vec<f64>,
    /// Memory limit of the scaling series, in MiB.
    #[arg(long, default_value_t = 256)]
    scaling_limit_mib: usize,
    /// Partitions of the scaling series.
    #[arg(long, default_value_t = 64)]
    scaling_partitions: u32,
    /// Run every case in this process (peak RSS then covers everything before it).
    #[arg(long)]
    in_process: bool,
    /// Small-shard mode: input chunks stay whole and are written with the scatter write
    /// (`write_partitioned_blocking`, one call per chunk with each row's partition) instead of
    /// being split into shards beforehand. With `--chunk-rows 8192 --partitions 64,1024,4096
    /// --cases memory,limit10` this is the small-shard matrix of `docs/benchmarks.md`.
    #[arg(long)]
    scatter: bool,
    /// How the buffer cases read: `coalesced` and `pass-through` read every partition after
    /// the last write; `streaming` subscribes to every partition before the first write, one
    /// tokio task per partition, while two producer threads write (the streaming-reads issue).
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = [ReadMode::Coalesced, ReadMode::PassThrough])]
    reads: Vec<ReadMode>,
    /// Producer threads writing to the buffer at once in the `memory`, `limit*` and
    /// `take-coalesce` cases (the input's chunks or shards dealt to them in turn); the streaming
    /// read mode always uses two.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    producers: u16,
    /// Internal: run one job (JSON) and print its result as one JSON line.
    #[arg(long, hide = true)]
    child: Option<String>,
}

/// A case of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum CaseKind {
    /// The reference costs for the data's byte count.
    References,
    /// No memory limit: nothing spills.
    Memory,
    /// Memory limit of 50% of the data's in-memory size.
    Limit50,
    /// Memory limit of 10% of the data's in-memory size.
    Limit10,
    /// A memory limit of 256 MiB.
    Limit256,
    /// One eager IPC stream file per partition.
    EagerDisk,
    /// What `RepartitionExec` does, for the scatter write (`--scatter`): arrow's `take` per
    /// partition into that partition's `BatchCoalescer` (8,192 rows), each producer with its
    /// own, memory only; no buffer.
    TakeCoalesce,
    /// A fixed memory limit (the scaling series).
    #[value(skip)]
    Fixed,
}

impl CaseKind {
    const ALL: [CaseKind; 5] = [
        CaseKind::References,
        CaseKind::Memory,
        CaseKind::Limit50,
        CaseKind::Limit10,
        CaseKind::EagerDisk,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            CaseKind::References => "references",
            CaseKind::Memory => "memory only",
            CaseKind::Limit50 => "limit 50%",
            CaseKind::Limit10 => "limit 10%",
            CaseKind::Limit256 => "limit 256 MiB",
            CaseKind::EagerDisk => "eager disk",
            CaseKind::TakeCoalesce => "take + coalesce",
            CaseKind::Fixed => "fixed limit",
        }
    }

    fn reads(self, reads: &[ReadMode]) -> Vec<Option<ReadMode>> {
        match self {
            CaseKind::References | CaseKind::EagerDisk | CaseKind::TakeCoalesce => vec![None],
            _ => reads.iter().copied().map(Some).collect(),
        }
    }

    fn spills(self) -> bool {
        matches!(
            self,
            CaseKind::Limit50
                | CaseKind::Limit10
                | CaseKind::Limit256
                | CaseKind::EagerDisk
                | CaseKind::Fixed
        )
    }
}

/// One unit of work for a child process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Job {
    pub(crate) case: CaseKind,
    pub(crate) partitions: u32,
    pub(crate) read: Option<ReadMode>,
    pub(crate) runs: usize,
    /// Overrides `--scale` (the scaling series).
    pub(crate) scale: Option<f64>,
    /// The memory limit of a `Fixed` case.
    pub(crate) fixed_limit: Option<usize>,
    /// Written with the scatter write (`--scatter`).
    #[serde(default)]
    pub(crate) scatter: bool,
    /// Producer threads (`--producers`).
    #[serde(default = "one")]
    pub(crate) producers: u16,
}

fn one() -> u16 {
    1
}

impl Job {
    /// The case's name, with the write mode.
    pub(crate) fn label(&self) -> String {
        let mut how = Vec::new();
        if self.scatter {
            how.push("scatter".to_string());
        }
        if self.producers > 1 {
            how.push(format!("{} producers", self.producers));
        }
        if how.is_empty() {
            self.case.name().to_string()
        } else {
            format!("{} ({})", self.case.name(), how.join(", "))
        }
    }
}

/// What a job measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobResult {
    pub(crate) job: Job,
    /// The TPC-H scale factor of the input.
    pub(crate) scale: Option<f64>,
    pub(crate) rows: u64,
    /// The data's in-memory size: `batch_memory_size` summed over the shards.
    pub(crate) data_bytes: u64,
    /// `batch_memory_size` summed over the input chunks, before partitioning.
    pub(crate) chunk_bytes: u64,
    pub(crate) shards: u64,
    pub(crate) load_secs: f64,
    pub(crate) partition_secs: f64,
    pub(crate) memory_limit: Option<u64>,
    /// Resident bytes after preparing the input, before the first run.
    pub(crate) rss_before: u64,
    /// Whether the peak could be reset after preparing the input.
    pub(crate) peak_reset: bool,
    pub(crate) runs: Vec<Run>,
    pub(crate) references: Vec<RefRun>,
}

fn main() {
    let args = Args::parse();
    let outcome = match &args.child {
        Some(job) => child(&args, job),
        None => parent(&args),
    };
    if let Err(e) = outcome {
        eprintln!("shuffle-bench: {e}");
        std::process::exit(1);
    }
}

fn spill_root(args: &Args) -> PathBuf {
    args.spill_dir.clone().unwrap_or_else(std::env::temp_dir)
}

fn jobs(args: &Args) -> Vec<Job> {
    let disk_runs = args.disk_runs.unwrap_or(args.runs);
    if args.scaling {
        return args
            .scaling_scales
            .iter()
            .map(|&scale| Job {
                case: CaseKind::Fixed,
                partitions: args.scaling_partitions,
                read: Some(ReadMode::Coalesced),
                runs: disk_runs,
                scale: Some(scale),
                fixed_limit: Some(args.scaling_limit_mib << 20),
                scatter: args.scatter,
                producers: args.producers,
            })
            .collect();
    }
    let mut jobs = Vec::new();
    for &partitions in &args.partitions {
        for &case in &args.cases {
            for read in case.reads(&args.reads) {
                jobs.push(Job {
                    case,
                    partitions,
                    read,
                    runs: if case.spills() { disk_runs } else { args.runs },
                    scale: None,
                    fixed_limit: None,
                    scatter: args.scatter && case != CaseKind::EagerDisk,
                    producers: args.producers,
                });
            }
        }
    }
    jobs
}

fn parent(args: &Args) -> Result<()> {
    if let Some(limit) = proc_status::open_files_limit() {
        let most = args.partitions.iter().copied().max().unwrap_or(0);
        if args.cases.contains(&CaseKind::EagerDisk) && u64::from(most) + 64 > limit {
            return Err(format!(
                "the eager-disk case keeps {most} files open but `ulimit -n` is {limit}; \
                 raise it or leave the case out (--cases)"
            )
            .into());
        }
    }
    let started = std::time::Instant::now();
    let mut results = Vec::new();
    let jobs = jobs(args);
    for (i, job) in jobs.iter().enumerate() {
        eprintln!(
            "[{:>4.0}s] job {}/{}: {} / {} partitions / {}{}",
            started.elapsed().as_secs_f64(),
            i + 1,
            jobs.len(),
            job.label(),
            job.partitions,
            job.read.map_or("-", report::read_name),
            job.scale
                .map(|s| format!(" / scale {s}"))
                .unwrap_or_default(),
        );
        let result = if args.in_process {
            run_job(args, job)?
        } else {
            spawn_job(job)?
        };
        results.push(result);
    }
    eprintln!("[{:>4.0}s] done", started.elapsed().as_secs_f64());

    let command = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    print!("{}", report::markdown(&results, &command));
    if let Some(path) = &args.json_out {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for line in report::json_lines(&results) {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
    }
    Ok(())
}

/// Runs `job` in a child process of this binary, with this process's arguments.
fn spawn_job(job: &Job) -> Result<JobResult> {
    let exe = std::env::current_exe()?;
    let output = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .arg("--child")
        .arg(serde_json::to_string(job)?)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(format!("child for {job:?} failed: {}", output.status).into());
    }
    let line = String::from_utf8(output.stdout)?;
    Ok(serde_json::from_str(line.trim())?)
}

fn child(args: &Args, job: &str) -> Result<()> {
    let job: Job = serde_json::from_str(job)?;
    let result = run_job(args, &job)?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

fn run_job(args: &Args, job: &Job) -> Result<JobResult> {
    let source = Source::Tpch {
        scale: job.scale.unwrap_or(args.scale),
    };
    let input = Input::prepare(&source, args.chunk_rows, job.partitions, job.scatter)?;
    let limit = match job.case {
        CaseKind::Limit50 => Some(input.bytes as usize / 2),
        CaseKind::Limit10 => Some(input.bytes as usize / 10),
        CaseKind::Fixed => job.fixed_limit,
        CaseKind::Limit256 => Some(256 << 20),
        _ => None,
    };
    let root = spill_root(args);
    let rss_before = proc_status::rss();
    let peak_reset = proc_status::reset_peak();

    let mut runs = Vec::new();
    let mut references = Vec::new();
    for _ in 0..job.runs.max(1) {
        proc_status::reset_peak();
        match job.case {
            CaseKind::References => references.push(reference::run_references(&input, &root)?),
            CaseKind::EagerDisk => runs.push(cases::run_eager_disk(&input, &root)?),
            CaseKind::TakeCoalesce => {
                runs.push(cases::run_take_coalesce(&input, job.producers.into())?)
            }
            _ => {
                let read = job.read.unwrap_or(ReadMode::Coalesced);
                runs.push(match read {
                    ReadMode::Streaming => cases::run_streaming(&input, limit, &root)?,
                    _ => cases::run_buffer(&input, limit, read, &root, job.producers.into())?,
                });
            }
        }
        if let Some(run) = runs.last_mut() {
            run.peak_rss = proc_status::peak_rss();
        }
    }
    Ok(JobResult {
        job: job.clone(),
        scale: match source {
            Source::Tpch { scale } => Some(scale),
        },
        rows: input.rows,
        data_bytes: input.bytes,
        chunk_bytes: input.chunk_bytes,
        shards: input.shards,
        load_secs: input.load_secs,
        partition_secs: input.partition_secs,
        memory_limit: limit.map(|l| l as u64),
        rss_before,
        peak_reset,
        runs,
        references,
    })
}
