//! How much a spill round frees: a pure function of the pool's figures and the buffer's spill
//! settings, so that the rules (threshold, goal, writers' need, floor, cap) are in one place
//! and tested on their own.

use crate::config::{MIN_SPILL_ROUND_BYTES, SpillConfig};

/// How far over the goal (a share of the band between threshold and target) a later round of
/// a wake-up needs the pool to be, with no writer waiting, to go on (see [`to_free`]).
pub(super) const CONTINUE_SHARE: (usize, usize) = (1, 4);

/// What a round knows when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Figures {
    /// The pool's limit (`usize::MAX` without one).
    pub(super) limit: usize,
    /// What the whole pool holds now.
    pub(super) reserved: usize,
    /// What waiting writers (and a refused `try_write`) need.
    pub(super) need: usize,
    /// The first round after a wake-up (later ones continue down to the goal).
    pub(super) first: bool,
}

/// The bytes a round frees, or `None` if it has nothing to do.
///
/// - The first round after a wake-up starts only if the pool is still at the threshold or a
///   writer still needs room (a charge that woke the spiller may be gone by then).
/// - It frees down to `goal = min(target, limit - need)`, which leaves room for the need.
/// - When the pool's figures say the need fits already but a writer still waits, either its
///   need is stale (it fits now and will stop waiting) or the limit that binds is not the one
///   the pool reports (a pool shared with other consumers, such as DataFusion's fair share,
///   refuses before its own limit): nothing else would wake that writer, so free its need.
/// - A later round with no writer waiting goes on only while the pool is at least a quarter of
///   the band between threshold and target over the goal ([`CONTINUE_SHARE`]). Producers keep
///   writing while a round writes its run: without this, each later round spilled just what
///   came in during the one before (2-4 MB under 256 MiB, measured), a run and a file each,
///   and the pool hovered over the target; now the wake-up ends and the next one comes at the
///   threshold, with a round the size of the band.
/// - At most `max_round_bytes`, and at least [`MIN_SPILL_ROUND_BYTES`] (the floor: a round
///   that frees only one writer's few KiB makes runs of a few KiB) unless the cap is lower.
pub(super) fn to_free(figures: &Figures, config: &SpillConfig) -> Option<usize> {
    let Figures {
        limit,
        reserved,
        need,
        first,
    } = *figures;
    if first && need == 0 && reserved < config.threshold_bytes {
        return None;
    }
    let goal = config.target_bytes.min(limit.saturating_sub(need));
    let over = match reserved.checked_sub(goal).filter(|&over| over > 0) {
        Some(over) => over,
        None if need > 0 => need,
        None => return None,
    };
    let (share, of) = CONTINUE_SHARE;
    let band = config.threshold_bytes.saturating_sub(config.target_bytes);
    if !first && need == 0 && over < band / of * share {
        return None;
    }
    Some(
        over.min(config.max_round_bytes)
            .max(MIN_SPILL_ROUND_BYTES.min(config.max_round_bytes)),
    )
}

#[cfg(test)]
mod tests {
    use arrow_shards_spill::SpillOptions;

    use super::*;

    const MIB: usize = 1 << 20;

    /// A 100 MiB limit: threshold 80 MiB, target 50 MiB, rounds of at most 64 MiB.
    fn config() -> SpillConfig {
        SpillConfig {
            root: std::env::temp_dir(),
            threshold_bytes: 80 * MIB,
            target_bytes: 50 * MIB,
            max_round_bytes: 64 * MIB,
            segment_bytes: 4 * MIB,
            options: SpillOptions::default(),
            local_quota: None,
            overflow: None,
        }
    }

    fn figures(reserved: usize, need: usize, first: bool) -> Figures {
        Figures {
            limit: 100 * MIB,
            reserved,
            need,
            first,
        }
    }

    #[test]
    fn a_first_round_below_the_threshold_with_no_writer_waiting_does_nothing() {
        assert_eq!(to_free(&figures(79 * MIB, 0, true), &config()), None);
        // a later round of the same wake-up continues down to the target
        assert_eq!(
            to_free(&figures(79 * MIB, 0, false), &config()),
            Some(29 * MIB)
        );
    }

    #[test]
    fn a_later_round_goes_on_only_for_a_quarter_of_the_band_unless_a_writer_waits() {
        // threshold 80 MiB, target 50 MiB: a later round needs 7.5 MiB over the target
        assert_eq!(
            to_free(&figures(57 * MIB, 0, false), &config()),
            None,
            "what came in during the last round waits for the threshold"
        );
        assert_eq!(
            to_free(&figures(58 * MIB, 0, false), &config()),
            Some(8 * MIB)
        );
        // a writer waiting for room is served whatever the amount
        assert_eq!(
            to_free(&figures(52 * MIB, MIB, false), &config()),
            Some(2 * MIB)
        );
    }

    #[test]
    fn a_round_frees_down_to_the_target_or_lower_for_the_need() {
        assert_eq!(
            to_free(&figures(90 * MIB, 0, true), &config()),
            Some(40 * MIB)
        );
        // a writer needs 70 MiB: the goal is 30 MiB, so 60 MiB go
        assert_eq!(
            to_free(&figures(90 * MIB, 70 * MIB, true), &config()),
            Some(60 * MIB)
        );
    }

    #[test]
    fn a_need_the_pool_says_fits_is_freed_all_the_same() {
        assert_eq!(
            to_free(&figures(10 * MIB, 3 * MIB, true), &config()),
            Some(3 * MIB)
        );
        assert_eq!(to_free(&figures(10 * MIB, 0, false), &config()), None);
    }

    #[test]
    fn rounds_are_capped_and_have_a_floor() {
        // capped at max_round_bytes
        assert_eq!(
            to_free(&figures(200 * MIB, 0, true), &config()),
            Some(64 * MIB)
        );
        // a few KiB needed: the floor
        let floor = MIN_SPILL_ROUND_BYTES;
        assert_eq!(
            to_free(&figures(10 * MIB, 4096, true), &config()),
            Some(floor)
        );
        // unless the cap is lower still
        let small = SpillConfig {
            max_round_bytes: 1024,
            ..config()
        };
        assert_eq!(to_free(&figures(10 * MIB, 4096, true), &small), Some(1024));
    }
}
