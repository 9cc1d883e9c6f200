//! `arrow-shards`: shuffle parquet or Arrow IPC files through the arrow-shards buffer.
//!
//! ```text
//! arrow-shards shuffle INPUT... --key COL[,COL...] --partitions N [--output DIR]
//!              [--memory-limit SIZE] [--spill-dir DIR | --no-spill] [--compression none|lz4|zstd]
//!              [--batch-rows N] [--format parquet|arrow] [--threads N] [--json] [--verify] [--quiet]
//! arrow-shards gen lineitem --scale SF --output FILE.parquet
//! ```
//!
//! The story of a shuffle, in the order the data meets the modules:
//! 1. [`input`]: the inputs (files or directories of them) are recognised by their magic bytes,
//!    checked to share one schema, and read as one stream of batches of `--batch-rows` rows.
//! 2. [`hash`]: each row's key is hashed with a documented, stable hash (FNV-1a over a canonical
//!    little-endian encoding of each value, folded over the key columns); rows whose key is all
//!    null go to partition 0.
//! 3. [`partition`]: each input batch becomes one shard per partition (`take` per partition).
//! 4. [`buffer`]: shards go into the shared `ShardBuffer`, which holds them in memory up to
//!    `--memory-limit` and spills beyond it; [`shuffle`] runs this on `--threads` threads.
//! 5. After the last input, every partition is read back exactly once and, with `--output`,
//!    written by [`output`] as `DIR/part-00000.parquet` ... (temporary names, renamed when all
//!    are complete); [`verify`] checks them with `--verify`.
//! 6. [`summary`]: the figures, as a table or one JSON object on stdout; [`progress`] draws a bar
//!    on stderr when it is a terminal.
//!
//! `gen` ([`gen`]) makes TPC-H lineitem test data with tpchgen-arrow.
//!
//! Errors ([`error`]) print one line, `arrow-shards: error: ...`, naming the file, column or
//! directory, and exit with status 1; usage errors exit with status 2.

mod args;
mod buffer;
mod error;
mod r#gen;
mod hash;
mod input;
mod output;
mod partition;
mod progress;
mod shuffle;
mod summary;
mod verify;

use std::io::Write;
use std::process::ExitCode;

use bytesize::ByteSize;
use clap::Parser;

use crate::args::{Cli, Command};
use crate::error::CliError;

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
        Err(e) => {
            eprintln!("arrow-shards: error: {}", e.report());
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<(), CliError> {
    match &cli.command {
        Command::Shuffle(args) => {
            let report = shuffle::run(args)?;
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
            let generated = r#gen::run(args)?;
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
