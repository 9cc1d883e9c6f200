//! The spill directory's lifecycle: permissions, symlinks, close, drop and sweep.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use arrow_shards_spill::{SpillDir, SpillError, SpillOptions, sweep};

use crate::common::{ints_and_strings, spill_one};

const MARKER: &str = ".arrow-shards-spill";

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn directory_is_private_and_files_are_owner_only() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let other = SpillDir::create(root.path()).unwrap();
    assert_ne!(dir.path(), other.path());
    assert_eq!(dir.path().parent(), Some(root.path()));
    assert_eq!(mode(dir.path()), 0o700);
    assert_eq!(mode(&dir.path().join(MARKER)) & 0o077, 0);
    let batch = ints_and_strings(0, 10);
    let segments = spill_one(&dir, &batch);
    assert_eq!(segments[0].path().parent(), Some(dir.path()));
    assert_eq!(mode(segments[0].path()) & 0o077, 0, "run file must be 0600");
}

#[test]
fn a_symlink_planted_where_a_run_file_goes_is_not_followed() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let target = root.path().join("victim");
    std::fs::write(&target, b"precious").unwrap();
    // run files are named by a counter starting at 0
    std::os::unix::fs::symlink(&target, dir.path().join("00000000.run")).unwrap();
    let batch = ints_and_strings(0, 10);
    let mut writer = dir.run_writer(batch.schema(), SpillOptions::default());
    let error = writer.append(0, &[batch]).unwrap_err();
    assert!(
        matches!(&error, SpillError::Io { path, .. } if path.ends_with("00000000.run")),
        "{error}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    // closing removes the link, not its target
    dir.close().unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
}

#[test]
fn a_root_symlink_owned_by_another_user_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let real = root.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // our own symlink is fine
    SpillDir::create(&link).unwrap().close().unwrap();
    // hand the link to another user; only possible as root, otherwise there is nothing to test
    if std::os::unix::fs::lchown(&link, Some(4242), Some(4242)).is_err() {
        return;
    }
    let error = SpillDir::create(&link).unwrap_err();
    assert!(matches!(error, SpillError::UnsafePath { .. }), "{error}");
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
}

#[test]
fn close_removes_everything_and_later_use_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let batch = ints_and_strings(0, 10);
    let segments = spill_one(&dir, &batch);
    let mut pending = dir.run_writer(batch.schema(), SpillOptions::default());
    dir.close().unwrap();
    dir.close().unwrap();
    assert!(!dir.path().exists());
    assert!(matches!(segments[0].read(), Err(SpillError::Closed { .. })));
    assert!(matches!(
        pending.append(1, std::slice::from_ref(&batch)),
        Err(SpillError::Closed { .. })
    ));
    drop(segments);
    assert_eq!(dir.metrics().files, 0);
}

#[test]
fn the_directory_lives_while_segments_refer_to_it_and_goes_with_the_last() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let path = dir.path().to_path_buf();
    let batch = ints_and_strings(0, 10);
    let segments = spill_one(&dir, &batch);
    drop(dir);
    assert_eq!(segments[0].read().unwrap(), vec![batch]);
    drop(segments);
    assert!(!path.exists());
}

#[test]
fn an_unfinished_writer_leaves_no_file() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let batch = ints_and_strings(0, 10);
    let mut writer = dir.run_writer(batch.schema(), SpillOptions::default());
    writer.append(0, &[batch]).unwrap();
    assert_eq!(dir.metrics().files, 1);
    drop(writer);
    assert_eq!(dir.metrics().files, 0);
    assert_eq!(dir.metrics().segments, 0);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from(MARKER)]);
}

/// The pid of a process that has exited.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn fake_spill_dir(root: &Path, name: &str, marker: Option<String>) -> std::path::PathBuf {
    let path = root.join(name);
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("00000000.run"), b"data").unwrap();
    if let Some(marker) = marker {
        std::fs::write(path.join(MARKER), marker).unwrap();
    }
    path
}

#[test]
fn sweep_removes_only_dirs_of_dead_owners() {
    let root = tempfile::tempdir().unwrap();
    let live = SpillDir::create(root.path()).unwrap();
    let dead = fake_spill_dir(
        root.path(),
        "arrow-shards-spill-1-a-0",
        Some(format!("arrow-shards-spill 1\npid {}\n", dead_pid())),
    );
    // our own pid, but a start time that is not ours: the pid was reused
    let reused = fake_spill_dir(
        root.path(),
        "arrow-shards-spill-2-b-0",
        Some(format!(
            "arrow-shards-spill 1\npid {}\nstart 1\n",
            std::process::id()
        )),
    );
    // a dead pid, in this pid namespace (as markers record it now): removed
    let dead_here = fake_spill_dir(
        root.path(),
        "arrow-shards-spill-7-g-0",
        Some(format!(
            "arrow-shards-spill 1\npid {}\nstart 1\npidns {}\n",
            dead_pid(),
            own_pid_namespace()
        )),
    );
    // the same, made in another pid namespace (another container): its pid means nothing here
    let other_namespace = fake_spill_dir(
        root.path(),
        "arrow-shards-spill-8-h-0",
        Some(format!(
            "arrow-shards-spill 1\npid {}\nstart 1\npidns {}\n",
            dead_pid(),
            own_pid_namespace() + 1
        )),
    );
    let no_marker = fake_spill_dir(root.path(), "arrow-shards-spill-3-c-0", None);
    let foreign_marker = fake_spill_dir(
        root.path(),
        "arrow-shards-spill-4-d-0",
        Some(format!("something else\npid {}\n", dead_pid())),
    );
    let other_name = fake_spill_dir(
        root.path(),
        "unrelated",
        Some(format!("arrow-shards-spill 1\npid {}\n", dead_pid())),
    );
    // a symlink with our prefix to a directory that looks dead: neither is touched
    let target = fake_spill_dir(
        root.path(),
        "target",
        Some(format!("arrow-shards-spill 1\npid {}\n", dead_pid())),
    );
    let link = root.path().join("arrow-shards-spill-5-e-0");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let plain_file = root.path().join("arrow-shards-spill-6-f-0");
    std::fs::write(&plain_file, b"x").unwrap();

    let report = sweep(root.path()).unwrap();

    let mut removed = report.removed.clone();
    removed.sort();
    assert_eq!(
        removed,
        vec![dead.clone(), reused.clone(), dead_here.clone()]
    );
    assert!(!dead.exists() && !reused.exists() && !dead_here.exists());
    assert_eq!(report.live, vec![live.path().to_path_buf()]);
    assert!(live.path().join(MARKER).exists());
    let mut skipped = report.skipped.clone();
    skipped.sort();
    assert_eq!(
        skipped,
        vec![
            no_marker.clone(),
            foreign_marker.clone(),
            link.clone(),
            plain_file.clone(),
            other_namespace.clone()
        ]
    );
    for untouched in [
        &no_marker,
        &foreign_marker,
        &other_name,
        &target,
        &other_namespace,
    ] {
        assert!(
            untouched.join("00000000.run").exists(),
            "{}",
            untouched.display()
        );
    }
    assert!(std::fs::symlink_metadata(&link).is_ok());
    assert!(plain_file.exists());
    assert!(report.failed.is_empty());
}

/// The inode of this process's pid namespace, read independently of the crate.
fn own_pid_namespace() -> u64 {
    let link = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let link = link.to_str().unwrap();
    link.trim_start_matches("pid:[")
        .trim_end_matches(']')
        .parse()
        .unwrap()
}
