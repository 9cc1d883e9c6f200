//! Ctrl-C: a child `arrow-shards shuffle` paused at a known point (`ARROW_SHARDS_PAUSE_AT`,
//! which makes it print a marker on stderr and wait) is sent SIGINT or SIGTERM; it must exit
//! with 130 or 143 and one line, leave no temporary or spill file, and leave the complete
//! output of an earlier run in the same directory as it was. No timing is assumed: the test
//! signals only after reading the marker.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use crate::util::{lineitem, listing, shuffle};

/// How long a child may take to reach its pause point before it is taken to hang.
const HANG_GUARD: Duration = Duration::from_secs(300);

/// Every file under `dir` (recursively), by path relative to it, with its bytes.
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    if !dir.exists() {
        return files;
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            for (inner, bytes) in contents(&path) {
                files.insert(format!("{name}/{inner}"), bytes);
            }
        } else {
            files.insert(name, std::fs::read(&path).unwrap());
        }
    }
    files
}

/// Runs a shuffle (spilling, but at the stream point) with the `extra` flags into `out`
/// paused at `point`, checks `ready` there, sends `signal` (`INT` or `TERM`); the exit status
/// and everything the child printed on stderr.
fn interrupt_at(
    point: &str,
    signal: &str,
    (out, spill): (&Path, &Path),
    extra: &[&str],
    ready: impl FnOnce(),
) -> (Option<i32>, String) {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin!("arrow-shards"))
        .arg("shuffle")
        .arg(lineitem())
        .args("--key l_orderkey --partitions 8 --threads 2 --quiet".split(' '))
        // The stream point needs output written during the input: no limit (under 2 MiB 8
        // partitions are past the switch) and batches complete at 1,024 rows (a partition's
        // ~7,500 rows of the one input batch would not make one of 8,192).
        .args(match point {
            "stream" => ["--compact-rows", "1024"],
            _ => ["--memory-limit", "2MiB"],
        })
        .args(extra)
        .arg("--output")
        .arg(out)
        .arg("--spill-dir")
        .arg(spill)
        .env("ARROW_SHARDS_PAUSE_AT", point)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    // A guard against a hang, not a timing assertion: a child that neither pauses nor ends
    // within HANG_GUARD is killed, so the test fails with its stderr instead of never ending.
    let (paused, guard) = std::sync::mpsc::channel::<()>();
    let pid = child.id().to_string();
    let watchdog = std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = guard.recv_timeout(HANG_GUARD) {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    });
    let marker = format!("arrow-shards: paused at {point}");
    let mut seen = String::new();
    let reached = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            break false;
        }
        seen.push_str(&line);
        if line.trim_end() == marker {
            break true;
        }
    };
    drop(paused);
    watchdog.join().unwrap();
    if !reached {
        let _ = child.wait();
    }
    assert!(
        reached,
        "the child ended (or hung and was killed after {HANG_GUARD:?}) without pausing at \
         {point}: {seen}"
    );
    ready();
    let killed = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(killed.success());
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    (status.code(), rest)
}

/// A complete earlier run into `out`; its files and their bytes.
fn earlier_output(out: &Path) -> BTreeMap<String, Vec<u8>> {
    shuffle(
        &[lineitem()],
        "--key l_orderkey --partitions 8 --quiet --output",
    )
    .arg(out)
    .assert()
    .success();
    let files = contents(out);
    assert_eq!(files.len(), 8);
    files
}

fn check_interrupted(point: &str, signal: &str, status: i32, ready: impl FnOnce(&Path, &Path)) {
    check_interrupted_with(point, signal, status, &[], ready);
}

fn check_interrupted_with(
    point: &str,
    signal: &str,
    status: i32,
    extra: &[&str],
    ready: impl FnOnce(&Path, &Path),
) {
    let dir = tempfile::tempdir().unwrap();
    let (out, spill) = (dir.path().join("out"), dir.path().join("spill"));
    let before = earlier_output(&out);
    let (code, stderr) = interrupt_at(point, signal, (&out, &spill), extra, || ready(&out, &spill));
    assert_eq!(code, Some(status), "stderr: {stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "arrow-shards: interrupted by SIG{signal}; temporary output and spill files removed"
        )
    );
    assert_eq!(
        contents(&spill).keys().collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "spill files left"
    );
    let after = contents(&out);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "the output directory changed"
    );
    assert!(after == before, "an earlier output file changed");
}

#[test]
fn sigint_while_reading_the_input() {
    check_interrupted("input", "INT", 130, |_, _| {});
}

#[test]
fn sigint_while_spilling() {
    check_interrupted("spill", "INT", 130, |_, spill| {
        assert!(
            !contents(spill).is_empty(),
            "no spill file at the spill point"
        );
    });
}

/// Checks that temporary output files exist in `out` at the pause point `point`.
fn assert_temporary_files(out: &Path, point: &str) {
    let temps = listing(out)
        .into_iter()
        .filter(|n| n.ends_with(".tmp"))
        .count();
    assert!(temps > 0, "no temporary output file at the {point} point");
}

#[test]
fn sigterm_while_writing_the_output() {
    check_interrupted("output", "TERM", 143, |out, _| {
        assert_temporary_files(out, "output")
    });
}

/// Ctrl-C while output files are written during the input (the input threads hold after
/// their first write until the signal, so an output thread writes while the input is open).
#[test]
fn sigint_while_writing_the_output_during_the_input() {
    check_interrupted("stream", "INT", 130, |out, _| {
        assert_temporary_files(out, "stream")
    });
}

#[test]
fn sigint_while_writing_the_output() {
    check_interrupted("output", "INT", 130, |_, _| {});
}

/// Ctrl-C while sorted partitions are written: the sort runs under the spill directory go
/// with the temporary output files.
#[test]
fn sigint_while_writing_sorted_partitions() {
    let extra = ["--sort-by", "l_partkey", "--max-rows-per-file", "3000"];
    check_interrupted_with("output", "INT", 130, &extra, |out, spill| {
        assert_temporary_files(out, "output");
        let runs = listing(spill);
        assert!(
            runs.iter().any(|n| n.starts_with("arrow-shards-sort-")),
            "no sort run directory: {runs:?}"
        );
    });
}

/// `.part-*.tmp` files a killed run left are removed by the next run; other files stay.
#[test]
fn a_later_run_removes_a_killed_runs_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    for name in [
        ".part-00003.parquet.tmp",
        ".part-00100.arrow.tmp",
        ".notes.tmp",
        "notes.txt",
    ] {
        std::fs::write(out.join(name), b"left over").unwrap();
    }
    shuffle(
        &[lineitem()],
        "--key l_orderkey --partitions 4 --quiet --output",
    )
    .arg(&out)
    .assert()
    .success();
    let mut expected: Vec<String> = (0..4).map(|p| format!("part-{p:05}.parquet")).collect();
    expected.extend([".notes.tmp".to_owned(), "notes.txt".to_owned()]);
    expected.sort();
    assert_eq!(listing(&out), expected);
}
