//! Crash leftovers: a process killed with SIGKILL in the middle of spilling leaves its spill
//! directory behind; the next start (the first buffer built over the root, or an explicit
//! `sweep`) removes it, and only it: a directory without our marker, one whose owner is alive,
//! and anything else under the root are left alone.
//!
//! The child is this test binary run again with `ARROW_SHARDS_CRASH_CHILD_ROOT` set, executing
//! only `crash::crash_child`, which spills until it is killed.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_shards::ShardBuffer;
use arrow_shards_spill::sweep;

use crate::harness::{run_files, watchdog};

const CHILD_ENV: &str = "ARROW_SHARDS_CRASH_CHILD_ROOT";

fn batch(first: i64) -> RecordBatch {
    let k: ArrayRef = Arc::new(Int64Array::from_iter_values(first..first + 2000));
    let v: ArrayRef = Arc::new(StringArray::from_iter_values(
        (first..first + 2000).map(|i| format!("row {i} of the crashing child")),
    ));
    RecordBatch::try_from_iter([("k", k), ("v", v)]).unwrap()
}

/// The child's part: does nothing in a normal run. With the variable set, spills into its root
/// and says `ready <spill dir>` on stdout once a run file exists, then keeps spilling until
/// killed (or gives up after two minutes).
#[test]
fn crash_child() {
    let Some(root) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let buffer = ShardBuffer::builder(batch(0).schema(), 16)
        .with_memory_limit(256 << 10)
        .with_spill_dir(PathBuf::from(root))
        .build()
        .unwrap();
    let dir = buffer.spill_dir().unwrap().to_path_buf();
    let start = std::time::Instant::now();
    let mut said_ready = false;
    let mut i = 0i64;
    while start.elapsed() < Duration::from_secs(120) {
        buffer
            .write_blocking((i % 16) as u32, batch(i * 2000))
            .unwrap();
        i += 1;
        if !said_ready && !run_files(&dir).is_empty() {
            println!("ready {}", dir.display());
            said_ready = true;
        }
    }
    panic!("the parent never killed the child");
}

#[test]
fn sigkill_mid_spill_leaves_a_directory_the_next_start_sweeps() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().to_path_buf();
    let child_dir = watchdog("crashing child", Duration::from_secs(120), move || {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "crash::crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &root_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut dir = None;
        for line in stdout.lines() {
            // the harness prints "test crash::crash_child ... " before it on the same line
            let line = line.unwrap();
            if let Some((_, path)) = line.split_once("ready ") {
                dir = Some(PathBuf::from(path));
                break;
            }
        }
        child.kill().unwrap(); // SIGKILL: no destructor runs
        let status = child.wait().unwrap();
        assert!(!status.success());
        dir.expect("the child reported its spill directory")
    });
    assert!(child_dir.starts_with(root.path()));
    assert!(
        child_dir.join(".arrow-shards-spill").is_file(),
        "marker left"
    );
    assert!(
        !run_files(&child_dir).is_empty(),
        "run files left by the crash"
    );

    // things that must survive the sweep
    let no_marker = root.path().join("arrow-shards-spill-no-marker");
    std::fs::create_dir(&no_marker).unwrap();
    std::fs::write(no_marker.join("00000000.run"), b"not ours").unwrap();
    let bad_marker = root.path().join("arrow-shards-spill-bad-marker");
    std::fs::create_dir(&bad_marker).unwrap();
    std::fs::write(
        bad_marker.join(".arrow-shards-spill"),
        b"something else\npid 1\n",
    )
    .unwrap();
    let unrelated = root.path().join("unrelated");
    std::fs::create_dir(&unrelated).unwrap();
    let builder = || {
        ShardBuffer::builder(batch(0).schema(), 1)
            .with_memory_limit(1 << 20)
            .with_spill_dir(root.path())
    };
    // with the sweep turned off, a new buffer leaves the leftovers alone
    let unswept = builder().with_sweep_on_build(false).build().unwrap();
    assert!(
        !run_files(&child_dir).is_empty(),
        "swept although turned off"
    );
    unswept.close().unwrap();

    // the next start: the first buffer built over the root sweeps it
    let live = builder().build().unwrap();
    let live_dir = live.spill_dir().unwrap().to_path_buf();
    assert!(
        !child_dir.exists(),
        "the crashed child's directory was not swept"
    );
    for kept in [&no_marker, &bad_marker, &unrelated, &live_dir] {
        assert!(kept.exists(), "{} was touched", kept.display());
    }

    // an explicit sweep agrees: nothing dead is left, the live buffer and impostors stay
    let report = sweep(root.path()).unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert_eq!(report.live, vec![live_dir.clone()], "{report:?}");
    let mut skipped = report.skipped.clone();
    skipped.sort();
    assert_eq!(skipped, vec![bad_marker.clone(), no_marker.clone()]);
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(no_marker.join("00000000.run").exists());
    // the live buffer still works and cleans up after itself
    live.close().unwrap();
    assert!(!live_dir.exists());
    // a second sweep finds nothing more to do
    let again = sweep(root.path()).unwrap();
    assert!(
        again.removed.is_empty() && again.live.is_empty(),
        "{again:?}"
    );
}
