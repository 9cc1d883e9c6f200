//! Writing one spill run: each chosen partition's batches as segments of at most the
//! configured segment size, in one run file (rotating past the file size), with no lock held.
//! A run the local directory refuses as full goes, whole, to the overflow tier if there is one.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use arrow_shards_spill::{SegmentRef, SpillError, SpillStorage, run_writer};

use super::side::SpillSide;
use crate::state::SizedBatches;

type Written = Vec<(u32, Vec<SegmentRef>)>;

/// Writes one run: each partition's batches as segments of at most `segment_bytes` (or one
/// batch, if a batch is larger), so a reader never decodes more than that at once. To the local
/// directory; if it is full ([`SpillError::DiskFull`]: its quota, ENOSPC or EDQUOT) and the
/// buffer has an overflow tier, the whole run again to that.
pub(super) fn write_run(
    side: &SpillSide,
    chosen: &[(u32, SizedBatches)],
) -> Result<Written, SpillError> {
    let local: Arc<dyn SpillStorage> = side.dir.clone();
    // A full local directory (at its quota) is not tried; otherwise a run is, and a write
    // past the quota fails before it is made (in-memory sizes count shared allocations whole,
    // so they cannot tell beforehand whether a run fits).
    let over_quota = side
        .dir
        .quota()
        .is_some_and(|quota| side.dir.metrics().bytes_on_disk >= quota);
    let local_result = if over_quota && side.config.overflow.is_some() {
        Err(SpillError::DiskFull {
            dir: side.dir.path().to_path_buf(),
            source: std::io::ErrorKind::QuotaExceeded.into(),
        })
    } else {
        write_run_to(side, &local, chosen)
    };
    match local_result {
        Err(SpillError::DiskFull { .. }) if side.config.overflow.is_some() => {
            let Some(overflow) = &side.config.overflow else {
                unreachable!("checked by the guard");
            };
            let start = Instant::now();
            let written = write_run_to(side, overflow, chosen)?;
            let counters = &side.overflow;
            let bytes: u64 = written
                .iter()
                .flat_map(|(_, segments)| segments.iter().map(|s| s.len()))
                .sum();
            counters.runs.fetch_add(1, Ordering::Relaxed);
            counters.bytes_written.fetch_add(bytes, Ordering::Relaxed);
            let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            counters.write_nanos.fetch_add(nanos, Ordering::Relaxed);
            Ok(written)
        }
        result => result,
    }
}

fn write_run_to(
    side: &SpillSide,
    storage: &Arc<dyn SpillStorage>,
    chosen: &[(u32, SizedBatches)],
) -> Result<Written, SpillError> {
    let schema = chosen[0].1[0].0.schema();
    let mut run = run_writer(storage, schema, side.config.options.clone());
    let mut counts = Vec::with_capacity(chosen.len());
    let mut chunk = Vec::new();
    for (partition, batches) in chosen {
        let mut segments = 0;
        let mut bytes = 0;
        for (i, (batch, size)) in batches.iter().enumerate() {
            chunk.push(batch.clone());
            bytes += size;
            let next = batches.get(i + 1).map_or(0, |(_, size)| *size);
            if i + 1 == batches.len() || bytes + next > side.config.segment_bytes {
                run.append(*partition, &chunk)?;
                chunk.clear();
                segments += 1;
                bytes = 0;
            }
        }
        counts.push((*partition, segments));
    }
    let mut segments = run.finish()?.into_iter();
    Ok(counts
        .into_iter()
        .map(|(p, n)| (p, segments.by_ref().take(n).collect()))
        .collect())
}
