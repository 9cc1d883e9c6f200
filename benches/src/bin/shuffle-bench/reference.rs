//! Reference costs for the input's byte count, measured in the same run as the cases, so a case
//! can be read as a multiple of "what the hardware does with these bytes anyway".
//!
//! - copy into fresh memory: the shards' buffers appended to a new `Vec` of the input's size
//!   (every page is touched for the first time: the page-fault cost the design notes);
//! - copy into pre-touched memory: the same into a `Vec` written once before timing;
//! - file write / read: the input's byte count written to one file in the spill directory in
//!   8 MiB pieces (page cache, no fsync, as the spiller does), then read back into the
//!   pre-touched `Vec`;
//! - IPC encode / decode: every shard, in write order, through one `StreamWriter` into
//!   pre-touched memory, then decoded with a `StreamReader` (validated, as the spill reader is).

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use arrow_array::Array;
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::data::Input;

/// One run of every reference, in seconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RefRun {
    pub(crate) copy_fresh_secs: f64,
    pub(crate) copy_pretouched_secs: f64,
    pub(crate) file_write_secs: f64,
    pub(crate) file_read_secs: f64,
    pub(crate) ipc_encode_secs: f64,
    pub(crate) ipc_decode_secs: f64,
    /// Bytes of the encoded IPC stream.
    pub(crate) ipc_bytes: u64,
}

const PIECE: usize = 8 << 20;

/// Runs every reference once over `input.bytes` bytes.
pub(crate) fn run_references(input: &Input, spill_root: &Path) -> Result<RefRun> {
    let n = input.bytes as usize;
    let sources = distinct_buffers(input);

    // copy into fresh memory: `with_capacity` maps new pages; the copy faults them in
    let started = Instant::now();
    let mut fresh: Vec<u8> = Vec::with_capacity(n);
    copy_cycling(&sources, n, |piece| fresh.extend_from_slice(piece));
    let copy_fresh_secs = started.elapsed().as_secs_f64();
    std::hint::black_box(&fresh);
    drop(fresh);

    // copy into pre-touched memory
    let mut touched = vec![1u8; n];
    std::hint::black_box(&mut touched);
    let started = Instant::now();
    let mut at = 0;
    copy_cycling(&sources, n, |piece| {
        touched[at..at + piece.len()].copy_from_slice(piece);
        at += piece.len();
    });
    let copy_pretouched_secs = started.elapsed().as_secs_f64();
    std::hint::black_box(&touched);

    // one file in the spill directory
    let dir = tempfile::Builder::new()
        .prefix("reference-")
        .tempdir_in(spill_root)?;
    let path = dir.path().join("bytes");
    let started = Instant::now();
    let mut file = File::create(&path)?;
    for piece in touched.chunks(PIECE) {
        file.write_all(piece)?;
    }
    drop(file);
    let file_write_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut file = File::open(&path)?;
    for piece in touched.chunks_mut(PIECE) {
        file.read_exact(piece)?;
    }
    drop(file);
    let file_read_secs = started.elapsed().as_secs_f64();
    dir.close()?;

    // IPC stream encode into pre-touched memory, then decode
    let mut encoded = touched;
    encoded.clear(); // keeps the touched capacity; a larger stream grows it
    let started = Instant::now();
    let mut writer = StreamWriter::try_new(&mut encoded, &input.schema)?;
    for (_, shard) in input.shards() {
        writer.write(shard)?;
    }
    writer.finish()?;
    drop(writer);
    let ipc_encode_secs = started.elapsed().as_secs_f64();
    let ipc_bytes = encoded.len() as u64;
    let started = Instant::now();
    let mut rows = 0;
    for batch in StreamReader::try_new(encoded.as_slice(), None)? {
        rows += batch?.num_rows() as u64;
    }
    let ipc_decode_secs = started.elapsed().as_secs_f64();
    if rows != input.rows {
        return Err(format!("IPC reference decoded {rows} of {} rows", input.rows).into());
    }

    Ok(RefRun {
        copy_fresh_secs,
        copy_pretouched_secs,
        file_write_secs,
        file_read_secs,
        ipc_encode_secs,
        ipc_decode_secs,
        ipc_bytes,
    })
}

/// Calls `put` with pieces of `sources`, cycling through them, until `n` bytes are handed out.
fn copy_cycling(sources: &[Buffer], n: usize, mut put: impl FnMut(&[u8])) {
    let mut left = n;
    while left > 0 {
        for source in sources {
            let take = source.len().min(left);
            put(&source.as_slice()[..take]);
            left -= take;
            if left == 0 {
                return;
            }
        }
    }
}

/// Every distinct buffer of every shard, in write order.
fn distinct_buffers(input: &Input) -> Vec<Buffer> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (_, shard) in input.shards() {
        for column in shard.columns() {
            collect(&column.to_data(), &mut seen, &mut out);
        }
    }
    out
}

fn collect(data: &ArrayData, seen: &mut HashSet<usize>, out: &mut Vec<Buffer>) {
    let nulls = data.nulls().map(|n| n.buffer().clone());
    for buffer in data.buffers().iter().cloned().chain(nulls) {
        if buffer.is_empty() {
            continue;
        }
        if seen.insert(buffer.as_ptr() as usize) {
            out.push(buffer);
        }
    }
    for child in data.child_data() {
        collect(child, seen, out);
    }
}
