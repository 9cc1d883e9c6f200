//! `arrow-shards`: shuffle parquet or Arrow IPC files through the arrow-shards buffer.
//!
//! ```text
//! arrow-shards shuffle INPUT... --key COL[,COL...] --partitions N [--output DIR]
//!              [--memory-limit SIZE] [--spill-dir DIR | --no-spill]
//!              [--spill-compression none|lz4|zstd] [--batch-rows N] [--compact-rows N]
//!              [--format parquet|arrow|arrow-stream] [--compression snappy|zstd|lz4|none]
//!              [--compression-level N]
//!              [--row-group-rows N] [--statistics page|chunk|none]
//!              [--dictionary-limit SIZE|off] [--data-page-size SIZE]
//!              [--layout flat|hive] [--hive-key KEY] [--max-rows-per-file N]
//!              [--max-bytes-per-file SIZE] [--sort-by COL[:desc][:nulls_first][,...]]
//!              [--threads N] [--json] [--verify] [--quiet]
//! arrow-shards gen lineitem --scale SF --output FILE.parquet
//! arrow-shards gen all-types [--rows N] --output FILE.parquet
//! ```
//!
//! The story of a shuffle, in the order the data meets the modules:
//! 1. [`input`]: the inputs (files or directories of them) are recognised by their magic bytes,
//!    checked to share one schema (plus a column per [`hive`] `key=value` directory), split
//!    into units (parquet row groups, Arrow IPC files) and decoded on every input thread.
//! 2. [`hash`]: each row's key is hashed with a documented, stable hash (FNV-1a over a canonical
//!    little-endian encoding of each value, folded over the key columns); rows whose key is all
//!    null go to partition 0.
//! 3. [`partition`]: each input batch gets one partition id per row.
//! 4. [`buffer`]: the batch and its ids go into the shared `ShardBuffer` (its scatter write),
//!    which holds them in memory up to `--memory-limit` and spills beyond it; [`shuffle`] runs
//!    its steps in order and [`shuffle_in`] this phase on `--threads` threads ([`workers`]).
//! 5. At the same time, on `--threads` more threads, [`read_back`] subscribes to every
//!    partition exactly once and, with `--output`, appends what is complete to its file
//!    ([`part_writer`]) in [`output`]'s `DIR/part-00000.parquet` ... while the input is still
//!    read, the open row groups charged to the same budget ([`writer_memory`]; their codecs:
//!    [`codec_memory`]); the rest after
//!    the input (temporary names, renamed when all are complete); [`verify`] checks them with
//!    `--verify`. A partition spans several files under a cap per file ([`part_files`]), and
//!    [`file_names`] names them for `--layout flat` or `hive` (`DIR/partition=P/...`). With
//!    `--sort-by` ([`sort_key`]) each partition is taken whole after the input and written in
//!    key order ([`sorter`]: sorted in memory, or in runs on disk merged, within the budget).
//!    Ctrl-C ([`interrupt`]) stops the threads, removes the temporary and spill files and
//!    exits with 130 (SIGINT) or 143 (SIGTERM).
//! 6. [`summary`]: the figures, as a table or one JSON object on stdout; [`progress`] draws a bar
//!    on stderr when it is a terminal.
//!
//! `gen` ([`gen`]) makes test data: TPC-H lineitem with tpchgen-arrow, or `all-types`, a seeded
//! table of 13 columns of many Arrow types (nulls, NaN, dictionary, list, struct, ...).
//!
//! Errors ([`error`]) print one line, `arrow-shards: error: ...`, naming the file, column or
//! directory, and exit with status 1; usage errors exit with status 2; an interrupted run prints
//! `arrow-shards: interrupted by SIGINT; ...` and exits with 130 (143 for SIGTERM).

/// The process's allocator: jemalloc, where it builds. With thousands of partitions the buffer
/// makes and frees many small and medium buffers from two threads; glibc malloc then takes about
/// a fifth of the run's CPU samples (docs/benchmarks.md, "Small shards"). The library leaves the
/// choice to its embedder, as this binary does here. Its options are set at build time
/// (`.cargo/config.toml`): freed pages go back to the system after 100 ms, purged by jemalloc's
/// background thread, so that peak RSS stays within what `--memory-limit` allows.
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod args;
mod buffer;
mod codec_memory;
mod error;
mod file_names;
mod r#gen;
mod hash;
mod hive;
mod input;
mod interrupt;
mod output;
mod parquet_file;
mod part_files;
mod part_writer;
mod partition;
mod plain_columns;
mod progress;
mod read_back;
mod shuffle;
mod shuffle_in;
mod sort_key;
mod sorter;
mod spare_threads;
mod summary;
mod verify;
mod workers;
mod writer_memory;

use std::io::Write;
use std::process::ExitCode;

use bytesize::ByteSize;
use clap::{CommandFactory, Parser};

use crate::args::{Cli, Command};
use crate::error::CliError;
use crate::interrupt::Interrupt;
use crate::part_writer::OutputOptions;

fn main() -> ExitCode {
    // A bug must still read as one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("arrow-shards: error: internal error (a bug in arrow-shards){place}: {message}");
    }));
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ CliError::Interrupted { .. }) => {
            eprintln!("arrow-shards: {e}");
            ExitCode::from(e.exit_status())
        }
        Err(e) => {
            eprintln!("arrow-shards: error: {}", e.report());
            ExitCode::from(e.exit_status())
        }
    }
}

fn run(cli: &Cli) -> Result<(), CliError> {
    match &cli.command {
        Command::Shuffle(args) => {
            let options = OutputOptions::from_args(args).unwrap_or_else(|message| {
                Cli::command()
                    .error(clap::error::ErrorKind::ArgumentConflict, message)
                    .exit()
            });
            let report = shuffle::run(args, options, Interrupt::install()?)?;
            let text = if args.json {
                format!("{}\n", report.to_json())
            } else if args.quiet {
                String::new()
            } else {
                report.table()
            };
            print(&text)
        }
        Command::Gen(args) => {
            let size = args.size().unwrap_or_else(|message| {
                Cli::command()
                    .error(clap::error::ErrorKind::ArgumentConflict, message)
                    .exit()
            });
            let generated = r#gen::run(size, &args.output)?;
            print(&format!(
                "wrote {} rows to {} ({})\n",
                generated.rows,
                args.output.display(),
                ByteSize(generated.bytes).display().iec()
            ))
        }
    }
}

/// Prints to stdout; a closed pipe (`| head`) is not an error worth a message.
fn print(text: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::output(std::path::Path::new("<stdout>"), e))
        }
        _ => Ok(()),
    }
}
