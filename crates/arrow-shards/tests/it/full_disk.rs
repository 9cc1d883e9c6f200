//! A really full disk: spill into a 4 MiB tmpfs with far more data than fits.
//!
//! The filesystem comes from `ARROW_SHARDS_FULL_DISK` (CI mounts it, see `.ci/run`); without
//! it the test mounts a tmpfs itself when running as root, and otherwise prints a loud
//! "SKIPPED" to stderr, except under `CI=true`, where it fails instead.
//!
//! Checks: writers that must wait for the spiller get `Error::Spill(DiskFull)` naming the
//! spill directory, with their batch back; every accepted row is read back exactly once in
//! order (from memory, or from the segments written before the disk filled); `close()`
//! reports the disk-full error; nothing is left on the filesystem.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use arrow_shards::{Error, ShardBuffer, SpillError};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::common::{Written, batch, schema};
use crate::harness::{check_outcome, entries, read_all, run_files, watchdog};

/// A small tmpfs, unmounted on drop if this test mounted it.
pub(crate) struct FullDisk {
    pub(crate) path: PathBuf,
    mounted_here: Option<tempfile::TempDir>,
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        if let Some(dir) = &self.mounted_here {
            let _ = Command::new("umount").arg(dir.path()).status();
        }
    }
}

/// Mounts a tmpfs of `size` (`4m`) on a new temporary directory: root only; the reason
/// otherwise.
pub(crate) fn mount_tmpfs(size: &str) -> Result<FullDisk, String> {
    if !std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) {
        return Err("not root, so no tmpfs can be mounted".to_string());
    }
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir.path())
        .status();
    match status {
        Ok(s) if s.success() => Ok(FullDisk {
            path: dir.path().to_path_buf(),
            mounted_here: Some(dir),
        }),
        Ok(s) => Err(format!("mount -t tmpfs failed ({s})")),
        Err(e) => Err(format!("cannot run mount: {e}")),
    }
}

fn full_disk() -> Option<FullDisk> {
    if let Some(path) = std::env::var_os("ARROW_SHARDS_FULL_DISK") {
        let path = PathBuf::from(path);
        assert!(
            path.is_dir(),
            "ARROW_SHARDS_FULL_DISK={} is not a directory",
            path.display()
        );
        return Some(FullDisk {
            path,
            mounted_here: None,
        });
    }
    let why = match mount_tmpfs("4m") {
        Ok(disk) => return Some(disk),
        Err(why) => why,
    };
    let message = format!(
        "SKIPPED: full-disk test: ARROW_SHARDS_FULL_DISK is not set and {why}; mount a small \
         tmpfs and export ARROW_SHARDS_FULL_DISK to run it (see .ci/run)"
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{message} (CI=true: a skip is a failure)");
    }
    eprintln!("\n!!!!!!!! {message} !!!!!!!!\n");
    None
}

#[test]
fn spilling_into_a_full_tmpfs_reports_disk_full_and_loses_nothing() {
    let Some(disk) = full_disk() else {
        return;
    };
    let path = disk.path.clone();
    watchdog("full disk", Duration::from_secs(300), move || run(&path));
    drop(disk);
}

fn run(root: &Path) {
    let before = entries(root);
    let schema = schema(&[1, 2]);
    // 1 MiB of memory, ~24 MiB of data, 4 MiB of disk
    let buffer = ShardBuffer::builder(schema.clone(), 8)
        .with_memory_limit(1 << 20)
        .with_spill_dir(root)
        .with_spill_segment_bytes(256 << 10)
        .with_max_spill_round_bytes(512 << 10)
        .build()
        .unwrap();
    let dir = buffer.spill_dir().unwrap().to_path_buf();
    let (accepted, refused) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2i64)
            .map(|w| {
                let (buffer, schema, dir) = (&buffer, &schema, &dir);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(w as u64);
                    let mut accepted = Written::new();
                    let mut refused = 0usize;
                    let mut seq: HashMap<u32, i64> = HashMap::new();
                    for i in 0..200u32 {
                        let p = (i * 3 + w as u32) % 8;
                        let next = seq.entry(p).or_default();
                        let b = batch(schema, &mut rng, w, *next, 1000);
                        match buffer.write_blocking(p, b.clone()) {
                            Ok(()) => {
                                *next += 1000;
                                accepted.entry((w, p)).or_default().push(b);
                            }
                            Err(e) => {
                                let Error::Spill(cause) = e.error() else {
                                    panic!("unexpected refusal: {e}");
                                };
                                let SpillError::DiskFull { dir: full, .. } = &**cause else {
                                    panic!("expected DiskFull, got {cause}");
                                };
                                assert_eq!(full, dir);
                                let message = e.to_string();
                                assert!(
                                    message.contains(&dir.display().to_string())
                                        && message.contains("no space left")
                                        && message.contains("free space"),
                                    "{message}"
                                );
                                assert_eq!(e.into_batch(), b, "the batch comes back");
                                refused += 1;
                            }
                        }
                    }
                    (accepted, refused)
                })
            })
            .collect();
        let mut all = Written::new();
        let mut refused = 0;
        for h in handles {
            let (a, r) = h.join().unwrap();
            all.extend(a);
            refused += r;
        }
        (all, refused)
    });
    assert!(
        refused > 0,
        "24 MiB cannot fit in 1 MiB of memory and 4 MiB of disk"
    );
    let metrics = buffer.metrics();
    let error = metrics.spill_error.expect("the spill failed");
    assert!(
        error.to_string().contains(&dir.display().to_string()),
        "{error}"
    );
    // the failed run left no partial file: every run file on disk is a complete one in use
    assert!(
        metrics.spill_files >= run_files(&dir).len() as u64,
        "{:?}",
        run_files(&dir)
    );

    buffer.finish().unwrap();
    let mut rows = 0;
    for p in 0..8 {
        let outcome = read_all(&buffer, p);
        assert!(
            outcome.error.is_none(),
            "partition {p}: {:?}",
            outcome.error
        );
        rows += check_outcome(p, &outcome, &accepted).delivered;
    }
    let accepted_rows: usize = accepted.values().flatten().map(|b| b.num_rows()).sum();
    assert_eq!(rows, accepted_rows);
    eprintln!(
        "full disk: {} rows accepted and read back ({} bytes reached the disk), {refused} \
         batches handed back with DiskFull",
        accepted_rows, metrics.bytes_written_to_disk
    );
    match buffer.close() {
        Err(Error::Spill(cause)) => assert!(matches!(*cause, SpillError::DiskFull { .. })),
        other => panic!("close must report the disk-full error, got {other:?}"),
    }
    assert_eq!(entries(root), before, "spill files left on the full disk");
    assert_eq!(buffer.memory_pool().reserved(), 0);
}
