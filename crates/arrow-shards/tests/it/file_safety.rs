//! File safety at the buffer level: the spill directory is 0700 and its files 0600; a spill
//! root that is a symlink planted by another user is refused; no partition id or user string
//! reaches a path; and `unsafe` code is denied in every crate and appears in one audited module
//! only (`crates/spill/src/unchecked.rs`).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use arrow_shards::{ConfigError, ShardBuffer, SpillError};

use crate::harness::{entries, run_files};

const SECRET: &str = "secret-tenant-name";

fn batch(rows: i64) -> RecordBatch {
    let mut metadata = std::collections::HashMap::new();
    metadata.insert("owner".to_string(), SECRET.to_string());
    let schema = Arc::new(
        Schema::new(vec![
            Field::new(format!("{SECRET}-key"), DataType::Int64, false),
            Field::new("v", DataType::Utf8, false),
        ])
        .with_metadata(metadata),
    );
    let k: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows));
    let v: ArrayRef = Arc::new(StringArray::from_iter_values((0..rows).map(|_| SECRET)));
    RecordBatch::try_new(schema, vec![k, v]).unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn spill_directory_is_private_and_paths_carry_no_ids_or_names() {
    let root = tempfile::tempdir().unwrap();
    let big_partition = 987_654u32;
    let buffer = ShardBuffer::builder(batch(1).schema(), 1_000_000)
        .with_memory_limit(64 << 10)
        .with_spill_dir(root.path())
        .build()
        .unwrap();
    for p in [big_partition, 123_456, 7] {
        for _ in 0..10 {
            buffer.write_blocking(p, batch(1000)).unwrap();
        }
    }
    let dir = buffer.spill_dir().unwrap().to_path_buf();
    let files = run_files(&dir);
    assert!(!files.is_empty(), "the test needs spilled files");
    assert_eq!(mode(&dir), 0o700, "spill directory mode");
    for path in entries(&dir) {
        assert_eq!(mode(&path), 0o600, "{} mode", path.display());
    }
    let name = dir.file_name().unwrap().to_str().unwrap();
    let parts: Vec<&str> = name
        .strip_prefix("arrow-shards-spill-")
        .expect("fixed prefix")
        .split('-')
        .collect();
    assert_eq!(parts.len(), 3, "{name}: pid-nanos-counter");
    assert_eq!(parts[0], std::process::id().to_string());
    assert!(parts[1].chars().all(|c| c.is_ascii_hexdigit()), "{name}");
    assert!(parts[2].chars().all(|c| c.is_ascii_digit()), "{name}");
    for path in entries(root.path()) {
        let text = path
            .strip_prefix(root.path())
            .unwrap()
            .display()
            .to_string();
        assert!(!text.contains(SECRET), "{text}");
        for p in ["987654", "123456"] {
            assert!(!text.contains(p), "partition id in {text}");
        }
        let file = path.file_name().unwrap().to_str().unwrap();
        let counter = file
            .strip_suffix(".run")
            .map(|n| n.len() == 8 && n.bytes().all(|b| b.is_ascii_digit()));
        assert!(
            path == dir || file == ".arrow-shards-spill" || counter == Some(true),
            "unexpected path {text}"
        );
    }
    buffer.close().unwrap();
}

#[test]
fn a_spill_root_symlinked_by_another_user_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let target = base.path().join("target");
    std::fs::create_dir(&target).unwrap();
    let link = base.path().join("planted");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    if std::os::unix::fs::lchown(&link, Some(4242), Some(4242)).is_err() {
        eprintln!(
            "SKIPPED: a_spill_root_symlinked_by_another_user_is_refused needs root to plant a \
             symlink owned by another user"
        );
        return;
    }
    let error = ShardBuffer::builder(batch(1).schema(), 1)
        .with_memory_limit(1 << 20)
        .with_spill_dir(&link)
        .build()
        .unwrap_err();
    let ConfigError::SpillDir(cause) = &error else {
        panic!("expected a spill dir error, got {error}");
    };
    assert!(
        matches!(&**cause, SpillError::UnsafePath { path, .. } if path == &link),
        "{cause}"
    );
    assert!(error.to_string().contains("symlink"), "{error}");
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "nothing created through it"
    );

    // a symlink of our own (or root's) is followed, as for /tmp on some systems
    let own = base.path().join("own");
    std::os::unix::fs::symlink(&target, &own).unwrap();
    let buffer = ShardBuffer::builder(batch(1).schema(), 1)
        .with_memory_limit(1 << 20)
        .with_spill_dir(&own)
        .build()
        .unwrap();
    assert_eq!(
        std::fs::symlink_metadata(&own).unwrap().uid(),
        std::fs::metadata("/proc/self").unwrap().uid()
    );
    buffer.close().unwrap();
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The one module where `unsafe` is allowed, relative to the workspace root.
const AUDITED: &str = "crates/spill/src/unchecked.rs";

#[test]
fn unsafe_code_appears_in_the_audited_module_only() {
    let root = workspace();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    for lint in [
        "unsafe_code = \"deny\"",
        "unsafe_op_in_unsafe_fn = \"deny\"",
    ] {
        assert!(manifest.contains(lint), "workspace lint {lint}");
    }
    let mut members = vec![root.join("benches")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        members.push(entry.unwrap().path());
    }
    let mut files = Vec::new();
    for member in &members {
        let Ok(toml) = std::fs::read_to_string(member.join("Cargo.toml")) else {
            continue;
        };
        assert!(
            toml.contains("[lints]\nworkspace = true"),
            "{} does not inherit the workspace lints",
            member.display()
        );
        rust_files(member, &mut files);
    }
    assert!(files.len() > 20);
    let audited = root.join(AUDITED).canonicalize().unwrap();
    assert!(files.iter().any(|f| f.canonicalize().unwrap() == audited));
    // the lint is `deny`, so anything here would also need an override to compile
    let patterns = [
        ["allow(", "unsafe_code"].concat(),
        ["expect(", "unsafe_code"].concat(),
        ["unsafe", " {"].concat(),
        ["unsafe", " fn"].concat(),
        ["unsafe", " impl"].concat(),
    ];
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        if file.canonicalize().unwrap() == audited {
            // every block of the audited module says why it is sound
            let blocks = text.matches(patterns[2].as_str()).count();
            let reasons = text.matches("// SAFETY:").count();
            assert!(
                blocks > 0 && reasons >= blocks,
                "{blocks} blocks, {reasons} SAFETY comments"
            );
            continue;
        }
        for pattern in &patterns {
            if text.contains(pattern.as_str()) {
                found.push(format!("{} has {pattern}", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "unsafe outside {AUDITED}: {found:#?}");
}
