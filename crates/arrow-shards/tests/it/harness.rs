//! Shared pieces of the reliability tests: a watchdog, reading a partition to its end or its
//! first error, the "nothing lost" check for a partition whose read failed, and directory
//! listings.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::ArrowError;
use arrow_shards::ShardBuffer;
use arrow_shards_spill::SpillError;

use crate::common::Written;

/// Runs `f` on its own thread and fails the test if it does not finish within `timeout` (a
/// hang); a panic in `f` is re-raised as is.
pub(crate) fn watchdog<T: Send + 'static>(
    what: &str,
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let value = f();
        let _ = tx.send(());
        value
    });
    match rx.recv_timeout(timeout) {
        Ok(()) => worker.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(value) => value,
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung for {timeout:?}: {what}"),
    }
}

/// Everything a reader handed out for one partition, and the error that ended it, if any.
#[derive(Debug, Default)]
pub(crate) struct ReadOutcome {
    pub(crate) batches: Vec<RecordBatch>,
    pub(crate) error: Option<ArrowError>,
}

/// Reads `partition` to its end or its first error (nothing may follow an error).
pub(crate) fn read_all(buffer: &ShardBuffer, partition: u32) -> ReadOutcome {
    let mut outcome = ReadOutcome::default();
    let mut reader = buffer.read(partition).expect("partition can be read");
    for item in reader.by_ref() {
        match item {
            Ok(batch) => outcome.batches.push(batch),
            Err(e) => {
                outcome.error = Some(e);
                break;
            }
        }
    }
    if outcome.error.is_some() {
        assert!(reader.next().is_none(), "nothing follows an error");
    }
    outcome
}

/// The `SpillError` inside an `ArrowError::ExternalError`, if that is what it is.
pub(crate) fn spill_error(error: &ArrowError) -> Option<&SpillError> {
    match error {
        ArrowError::ExternalError(inner) => inner.downcast_ref::<SpillError>(),
        _ => None,
    }
}

/// Rows of one partition: handed out, and reported (accepted but behind a read error).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) delivered: usize,
    pub(crate) reported: usize,
}

/// The guarantee for one partition (see `docs/reliability.md`): for every producer, the rows
/// handed out are exactly the rows it wrote there and the buffer accepted, in its order; if the
/// read ended in an error, a prefix of them, and the rest count as *reported*. Never a row
/// nobody wrote, never a row twice.
pub(crate) fn check_outcome(partition: u32, outcome: &ReadOutcome, accepted: &Written) -> Tally {
    let mut tally = Tally::default();
    let schema = accepted
        .values()
        .flatten()
        .next()
        .map(RecordBatch::schema)
        .or_else(|| outcome.batches.first().map(RecordBatch::schema));
    let Some(schema) = schema else {
        return tally;
    };
    let read = arrow_select::concat::concat_batches(&schema, &outcome.batches).unwrap();
    let producers = read.column(0).as_primitive::<Int64Type>();
    let mut matched = 0;
    for ((w, p), batches) in accepted {
        if *p != partition {
            continue;
        }
        let expected = arrow_select::concat::concat_batches(&schema, batches).unwrap();
        let mask: BooleanArray = producers.iter().map(|v| Some(v == Some(*w))).collect();
        let got = arrow_select::filter::filter_record_batch(&read, &mask).unwrap();
        matched += got.num_rows();
        if outcome.error.is_none() {
            assert_eq!(got, expected, "partition {partition}, producer {w}");
        } else {
            assert!(
                got.num_rows() <= expected.num_rows() && got == expected.slice(0, got.num_rows()),
                "partition {partition}, producer {w}: rows before the error are not a prefix \
                 of what was written"
            );
        }
        tally.delivered += got.num_rows();
        tally.reported += expected.num_rows() - got.num_rows();
    }
    assert_eq!(
        matched,
        read.num_rows(),
        "partition {partition} handed out rows nobody wrote"
    );
    tally
}

/// The Int64 first column of `batches`, concatenated.
pub(crate) fn keys(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

/// Every entry under `root`, recursively (symlinks not followed).
pub(crate) fn entries(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(root) else {
        return out;
    };
    for entry in dir {
        let path = entry.unwrap().path();
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            out.extend(entries(&path));
        }
        out.push(path);
    }
    out
}

/// Run files (`*.run`) in `dir`.
pub(crate) fn run_files(dir: &Path) -> Vec<PathBuf> {
    entries(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "run"))
        .collect()
}
