//! Writing one spill run: each chosen partition's batches as segments of at most the
//! configured segment size, in one run file (rotating past the file size), with no lock held.

use arrow_shards_spill::{SegmentRef, SpillError};

use super::side::SpillSide;
use crate::state::SizedBatches;

/// Writes one run: each partition's batches as segments of at most `segment_bytes` (or one
/// batch, if a batch is larger), so a reader never decodes more than that at once.
pub(super) fn write_run(
    side: &SpillSide,
    chosen: &[(u32, SizedBatches)],
) -> Result<Vec<(u32, Vec<SegmentRef>)>, SpillError> {
    let schema = chosen[0].1[0].0.schema();
    let mut run = side.dir.run_writer(schema, side.config.options.clone());
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
