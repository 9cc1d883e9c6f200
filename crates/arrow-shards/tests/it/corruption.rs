//! Corrupt run files between spill and read, at the buffer level: flipped bytes (every 7th
//! byte), truncation, garbage inserted or appended, segments swapped, one file copied over
//! another. Every damaged segment is an error naming the file and the segment's offset
//! (`SpillError::Corrupt` inside the merge's `ArrowError::ExternalError`); rows before it are
//! exactly the rows written; no case panics or hands out a wrong row. (The spill crate flips
//! every byte and truncates at every offset at its own level.)

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_shards::ShardBuffer;
use arrow_shards::batch_cost as batch_memory_size;
use arrow_shards_spill::SpillError;

use crate::harness::{ReadOutcome, keys, read_all, run_files, spill_error, watchdog};

const MAGIC: &[u8] = b"ASHSPILL";

fn batch(first: i64, rows: i64) -> RecordBatch {
    let k: ArrayRef = Arc::new(Int64Array::from_iter_values(first..first + rows));
    let v: ArrayRef = Arc::new(StringArray::from_iter_values(
        (first..first + rows).map(|i| format!("v{i}")),
    ));
    RecordBatch::try_from_iter([("k", k), ("v", v)]).unwrap()
}

/// Offsets of the segments in a run file (each starts with the magic).
fn segment_offsets(bytes: &[u8]) -> Vec<usize> {
    (0..bytes.len().saturating_sub(MAGIC.len() - 1))
        .filter(|&i| &bytes[i..i + MAGIC.len()] == MAGIC)
        .collect()
}

/// Asserts `outcome` ended in `Corrupt` naming `file` and `offset`, with exactly `before` handed
/// out first.
fn assert_corrupt(outcome: &ReadOutcome, file: &Path, offset: u64, before: &[i64], case: &str) {
    assert_eq!(
        keys(&outcome.batches),
        before,
        "{case}: rows before the damage"
    );
    let error = outcome
        .error
        .as_ref()
        .unwrap_or_else(|| panic!("{case}: damaged segment read without error"));
    match spill_error(error) {
        Some(SpillError::Corrupt {
            file: f, offset: o, ..
        }) => {
            assert_eq!((f.as_path(), *o), (file, offset), "{case}: {error}");
            let message = error.to_string();
            assert!(
                message.contains(&file.display().to_string())
                    && message.contains(&format!("offset {offset}")),
                "{case}: {message}"
            );
        }
        _ => panic!("{case}: expected SpillError::Corrupt, got {error}"),
    }
}

/// Three partitions spilled together as one run of three segments (deterministically: the
/// threshold is the whole limit and is reached by the last write, the target is 0), then one
/// more batch each in memory. Returns the buffer, its run file and what each partition holds.
struct OneRun {
    buffer: ShardBuffer,
    file: PathBuf,
    spilled: Vec<RecordBatch>,
    memory: Vec<RecordBatch>,
    _root: tempfile::TempDir,
}

fn one_run(read_rows: usize) -> OneRun {
    let root = tempfile::tempdir().unwrap();
    let spilled: Vec<RecordBatch> = (0..3).map(|p| batch(p * 1000, 20 + p * 5)).collect();
    let memory: Vec<RecordBatch> = (0..3).map(|p| batch(p * 1000 + 500, 7)).collect();
    let limit: usize = spilled.iter().map(batch_memory_size).sum();
    let buffer = ShardBuffer::builder(spilled[0].schema(), 3)
        .with_compact_target_rows(0)
        .with_memory_limit(limit)
        .with_spill_threshold(1.0)
        .with_spill_target(0.0)
        .with_spill_dir(root.path())
        .with_read_batch_rows(read_rows)
        .build()
        .unwrap();
    for (p, b) in spilled.iter().enumerate() {
        buffer.try_write(p as u32, b.clone()).unwrap();
    }
    // the last write reached the threshold and woke the spiller: wait for its round
    buffer.wait_for_spills();
    assert!(buffer.partition_sizes().iter().all(|s| s.segments > 0));
    for (p, b) in memory.iter().enumerate() {
        buffer.try_write(p as u32, b.clone()).unwrap();
    }
    buffer.finish().unwrap();
    let files = run_files(buffer.spill_dir().unwrap());
    assert_eq!(files.len(), 1, "one run file");
    OneRun {
        buffer,
        file: files[0].clone(),
        spilled,
        memory,
        _root: root,
    }
}

/// Applies `damage` to the run file, reads all three partitions and checks each: the
/// partition whose segment the damage touched fails naming its offset, the others are whole.
/// `touched(start, end)` says whether the damage reaches segment bytes `[start, end)`.
fn damaged_run(
    case: &str,
    read_rows: usize,
    damage: impl Fn(&mut Vec<u8>),
    touched: impl Fn(usize, usize) -> bool,
) -> usize {
    let run = one_run(read_rows);
    let mut bytes = std::fs::read(&run.file).unwrap();
    let offsets = segment_offsets(&bytes);
    assert_eq!(offsets.len(), 3, "three segments");
    let ends: Vec<usize> = offsets[1..].iter().copied().chain([bytes.len()]).collect();
    // each segment's header names its partition (bytes 12..16)
    let partition_at = |o: usize| u32::from_le_bytes(bytes[o + 12..o + 16].try_into().unwrap());
    let segment_of: Vec<usize> = (0..3u32)
        .map(|p| offsets.iter().position(|&o| partition_at(o) == p).unwrap())
        .collect();
    damage(&mut bytes);
    std::fs::write(&run.file, &bytes).unwrap();
    let mut failures = 0;
    for p in 0..3u32 {
        let outcome = read_all(&run.buffer, p);
        let index = segment_of[p as usize];
        let (start, end) = (offsets[index], ends[index]);
        if touched(start, end) {
            assert_corrupt(
                &outcome,
                &run.file,
                start as u64,
                &[],
                &format!("{case}, p{p}"),
            );
            failures += 1;
        } else {
            assert!(outcome.error.is_none(), "{case}, p{p}: {:?}", outcome.error);
            let mut want = keys(&[run.spilled[p as usize].clone()]);
            want.extend(keys(&[run.memory[p as usize].clone()]));
            assert_eq!(keys(&outcome.batches), want, "{case}, p{p}");
        }
    }
    run.buffer.close().unwrap();
    assert_eq!(run.buffer.memory_pool().reserved(), 0);
    failures
}

#[test]
fn flipped_bytes_in_a_shared_run_fail_only_their_segment() {
    watchdog("flips", Duration::from_secs(300), || {
        let bytes = std::fs::read(one_run(0).file).unwrap();
        let (len, first_segment) = (bytes.len(), segment_offsets(&bytes)[0]);
        let mut cases = 0;
        for at in (0..len).step_by(7) {
            let failures = damaged_run(
                &format!("byte {at} flipped"),
                if at % 2 == 0 { 0 } else { 8192 },
                |b| b[at] ^= 0x5a,
                |start, end| (start..end).contains(&at),
            );
            // the run file's schema record (before the first segment) is not read: a segment
            // is decoded with the writer's copy of the schema, kept in memory
            let damaged = usize::from(at >= first_segment);
            assert_eq!(failures, damaged, "byte {at}: exactly one segment damaged");
            cases += 1;
        }
        eprintln!("corruption: {cases} flipped bytes in a {len}-byte run, each caught");
    });
}

#[test]
fn truncated_runs_fail_from_the_cut_on() {
    watchdog("truncation", Duration::from_secs(300), || {
        let len = std::fs::metadata(one_run(0).file).unwrap().len() as usize;
        let mut cases = 0;
        for cut in (0..len).step_by(29) {
            damaged_run(
                &format!("cut at {cut}"),
                0,
                |b| b.truncate(cut),
                |_, end| end > cut,
            );
            cases += 1;
        }
        eprintln!("corruption: {cases} truncations, each caught");
    });
}

#[test]
fn garbage_inserted_fails_later_segments_and_garbage_appended_is_ignored() {
    let garbage: Vec<u8> = (0..100u32).map(|i| (i * 31 % 251) as u8).collect();
    let len = std::fs::metadata(one_run(0).file).unwrap().len() as usize;
    for at in [0, 1, len / 3, len / 2, len - 50] {
        damaged_run(
            &format!("garbage inserted at {at}"),
            0,
            |b| {
                b.splice(at..at, garbage.iter().copied());
            },
            |_, end| end > at,
        );
    }
    // after the last segment nothing reads: the index bounds every read
    let failures = damaged_run(
        "garbage appended",
        0,
        |b| b.extend_from_slice(&garbage),
        |_, _| false,
    );
    assert_eq!(failures, 0);
}

#[test]
fn swapped_segments_are_caught_by_their_headers() {
    // move the first segment to the end: every segment now starts at another offset
    let failures = damaged_run(
        "segments rotated",
        0,
        |b| {
            let offsets = segment_offsets(b);
            let first: Vec<u8> = b.drain(offsets[0]..offsets[1]).collect();
            b.extend(first);
        },
        |_, _| true,
    );
    assert_eq!(failures, 3);
}

/// One partition whose batches went to disk one run each (limit 0), so its segments are in
/// three files; damage to the second file fails the read after exactly the first batch's rows.
#[test]
fn damage_to_a_later_file_keeps_the_rows_before_it() {
    let written: Vec<RecordBatch> = (0..3).map(|i| batch(i * 100, 40 + i)).collect();
    let make = || {
        let root = tempfile::tempdir().unwrap();
        let buffer = ShardBuffer::builder(written[0].schema(), 1)
            .with_compact_target_rows(0)
            .with_memory_limit(0)
            .with_spill_dir(root.path())
            .build()
            .unwrap();
        for b in &written {
            buffer.write_blocking(0, b.clone()).unwrap();
        }
        buffer.finish().unwrap();
        let mut files = run_files(buffer.spill_dir().unwrap());
        files.sort();
        assert_eq!(files.len(), 3);
        (buffer, files, root)
    };
    let first = keys(&written[..1]);
    let len = std::fs::metadata(&make().1[1]).unwrap().len() as usize;
    let mut cases = 0;
    // the segment follows the file's schema record, which reads never use (they decode with
    // the writer's copy of the schema, kept in memory)
    let segment_at = segment_offsets(&std::fs::read(&make().1[1]).unwrap())[0];
    for at in (segment_at..len).step_by(7) {
        let (buffer, files, _root) = make();
        let mut bytes = std::fs::read(&files[1]).unwrap();
        bytes[at] = bytes[at].wrapping_add(1);
        std::fs::write(&files[1], &bytes).unwrap();
        let outcome = read_all(&buffer, 0);
        let offset = segment_at as u64;
        assert_corrupt(&outcome, &files[1], offset, &first, &format!("byte {at}"));
        buffer.close().unwrap();
        cases += 1;
    }
    // a whole other segment of the same partition in its place: checksum differs from index
    let (buffer, files, _root) = make();
    std::fs::copy(&files[2], &files[1]).unwrap();
    assert_corrupt(
        &read_all(&buffer, 0),
        &files[1],
        segment_at as u64,
        &first,
        "file copied over",
    );
    buffer.close().unwrap();
    eprintln!("corruption: {cases} flipped bytes in a later file, rows before kept");
}
