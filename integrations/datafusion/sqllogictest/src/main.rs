//! Runs the `.slt` files of `datafusion-sqllogictest` (the crate ships them in `test_files/`)
//! through its `DataFusion` engine twice, without and with `ShardRepartitionRule`, and says
//! which files change.
//!
//! Each file runs first in the `TestContext` that `datafusion-sqllogictest` builds for it (4
//! target partitions, so plans repartition), then in the same context with
//! `with_shard_repartition` (`min_output_partitions` 0: every hash and round-robin
//! `RepartitionExec` replaced). A file that passes without the rule should pass with it;
//! `EXPLAIN` records may differ (the plan names the other exchange) and are counted apart.
//!
//! Run it from a directory laid out like `datafusion/sqllogictest` in a DataFusion checkout
//! (`test_files/` beside, `../core/tests/data`, `../../testing` and `../../parquet-testing`
//! where the files read their data): `../sqllogictest.sh` makes one.
//!
//! ```text
//! arrow-shards-sqllogictest [--out DIR] [--jobs N] [--timeout SECS]
//!     [--mode streaming|materialize] [FILTER...]
//! ```
//!
//! Writes `DIR/results.tsv` (file, result without and with the rule, verdict),
//! `DIR/differences.md` (each record that passes without the rule and fails with it) and prints
//! the counts. The exit status is 1 if a file that passes without the rule differs in more than
//! plan text.

mod compare;
mod report;
mod run;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use arrow_shards_datafusion::{ExchangeMode, ShardRepartitionOptions};
use datafusion_sqllogictest::{Filter, TestFile, read_dir_recursive, should_skip_file};
use futures::StreamExt;

use crate::compare::{Verdict, compare};
use crate::report::FileResult;
use crate::run::{Mode, run_file};

/// Where the test files are, relative to the working directory (as in DataFusion's bin).
pub(crate) const TEST_DIRECTORY: &str = "test_files/";

/// Files `datafusion-sqllogictest`'s bin leaves out by default: the TPC-H files need generated
/// data (`INCLUDE_TPCH`), the encrypted Parquet one a feature.
const LEFT_OUT: [&str; 2] = ["tpch", "encrypted_parquet.slt"];

#[derive(Debug)]
struct Args {
    out: PathBuf,
    jobs: usize,
    timeout: Duration,
    mode: ExchangeMode,
    filters: Vec<Filter>,
}

impl Args {
    fn parse() -> Result<Self, String> {
        let mut args = Self {
            out: PathBuf::from("sqllogictest-results"),
            jobs: 2,
            timeout: Duration::from_secs(300),
            mode: ExchangeMode::Streaming,
            filters: Vec::new(),
        };
        let mut raw = std::env::args().skip(1);
        while let Some(arg) = raw.next() {
            let mut value = |name: &str| raw.next().ok_or(format!("{name} needs a value"));
            match arg.as_str() {
                "--out" => args.out = PathBuf::from(value("--out")?),
                "--jobs" => args.jobs = number::<usize>(&value("--jobs")?)?.max(1),
                "--timeout" => args.timeout = Duration::from_secs(number(&value("--timeout")?)?),
                "--mode" => {
                    args.mode = match value("--mode")?.as_str() {
                        "streaming" => ExchangeMode::Streaming,
                        "materialize" => ExchangeMode::Materialize,
                        other => return Err(format!("--mode {other}: streaming or materialize")),
                    }
                }
                flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
                filter => args.filters.push(Filter::from_str(filter)?),
            }
        }
        Ok(args)
    }
}

fn number<T: FromStr>(text: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("not a number: {text}"))
}

fn test_files(filters: &[Filter]) -> Result<Vec<TestFile>, String> {
    let paths = read_dir_recursive(TEST_DIRECTORY)
        .map_err(|e| format!("{TEST_DIRECTORY} (run from a sqllogictest directory): {e}"))?;
    let mut files: Vec<TestFile> = paths
        .into_iter()
        .map(|path| TestFile::new(path, &[TEST_DIRECTORY]))
        .filter(|file| file.is_slt_file())
        .filter(|file| !LEFT_OUT.iter().any(|p| file.relative_path_starts_with(p)))
        .filter(|file| !should_skip_file(&file.path, filters))
        .collect();
    // DataFusion's order: its longest files first, then by path
    files.sort_unstable();
    Ok(files)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("arrow-shards-sqllogictest: {message}");
            return ExitCode::from(2);
        }
    };
    let files = match test_files(&args.filters) {
        Ok(files) => files,
        Err(message) => {
            eprintln!("arrow-shards-sqllogictest: {message}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("arrow-shards-sqllogictest: {}: {e}", args.out.display());
        return ExitCode::from(2);
    }
    let options = ShardRepartitionOptions::default()
        .with_min_output_partitions(0)
        .with_mode(args.mode);
    let total = files.len();
    eprintln!(
        "{total} files, {} at a time, mode {:?}",
        args.jobs, args.mode
    );

    // a row per file as it ends, so an interrupted run leaves what it found
    let partial_path = args.out.join("results.partial.tsv");
    let mut partial = std::fs::File::create(&partial_path).ok();
    if let Some(file) = partial.as_mut() {
        let _ = writeln!(file, "{}", report::TABLE_HEADER);
    }

    let mut done = 0;
    let mut results = Vec::with_capacity(total);
    let mut runs = futures::stream::iter(files)
        .map(|file| {
            let options = options.clone();
            let timeout = args.timeout;
            async move {
                // one after the other: both runs use the file's scratch directory
                let plain = run_file(&file.path, Mode::Plain, timeout).await;
                let rule = run_file(&file.path, Mode::Rule(options), timeout).await;
                let comparison = compare(&plain, &rule);
                FileResult {
                    file: file.relative_path.display().to_string(),
                    plain,
                    rule,
                    comparison,
                }
            }
        })
        .buffer_unordered(args.jobs);
    while let Some(result) = runs.next().await {
        done += 1;
        let row = report::table_row(&result);
        eprintln!("[{done}/{total}] {}", row.replace('\t', "  |  "));
        if let Some(file) = partial.as_mut() {
            let _ = writeln!(file, "{row}");
        }
        results.push(result);
    }
    results.sort_by(|a, b| a.file.cmp(&b.file));

    match report::write(&args.out, &results) {
        Ok(counts) => {
            let _ = std::fs::remove_file(&partial_path);
            println!("{counts}");
            println!(
                "results: {0}/results.tsv, {0}/differences.md",
                args.out.display()
            );
        }
        Err(e) => {
            eprintln!("arrow-shards-sqllogictest: {}: {e}", args.out.display());
            return ExitCode::from(2);
        }
    }
    let different = results
        .iter()
        .any(|r| r.comparison.verdict == Verdict::Different);
    if different {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
