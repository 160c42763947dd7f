//! A room's regular waiting line as one bit per position ([`LineMasks`]): what a node's SSE
//! streams need to tell each visitor its `ahead`, at a sixty-fourth of the bytes of the
//! positions themselves and read from Redis without visiting a ticket.
//!
//! The line is cut into buckets of [`BUCKET`] positions (the Redis store's line buckets, whose
//! masks it already keeps for `ahead`), each a mask of its live positions. The count of live
//! positions before each bucket is summed once when the line is made, so `ahead` of any
//! position is one lookup and one population count.

use std::collections::BTreeMap;

/// Positions per bucket (the Redis store's `LINE_BUCKET`).
const BUCKET: u64 = 128;

/// The live waiting positions of a room's regular line (not the priority lane).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineMasks {
    /// The bucket of `masks[0]`.
    first_bucket: u64,
    /// One mask per bucket from `first_bucket` on: bit k is position `bucket * BUCKET + k`.
    masks: Vec<u128>,
    /// Live positions in the buckets before each of `masks`.
    before: Vec<u64>,
}

impl LineMasks {
    /// The line of `positions` (in any order; a position given twice counts once).
    pub fn from_positions(positions: impl IntoIterator<Item = u64>) -> LineMasks {
        let mut masks: BTreeMap<u64, u128> = BTreeMap::new();
        for position in positions {
            *masks.entry(position / BUCKET).or_default() |= 1u128 << (position % BUCKET);
        }
        let Some((&first_bucket, _)) = masks.first_key_value() else {
            return LineMasks::default();
        };
        let mut dense = Vec::new();
        for (bucket, mask) in masks {
            let index = usize::try_from(bucket - first_bucket).unwrap_or(usize::MAX);
            dense.resize(index, 0);
            dense.push(mask);
        }
        LineMasks::from_masks(first_bucket, dense)
    }

    /// The line whose bucket `first_bucket + i` holds the positions of `masks[i]`.
    pub fn from_masks(first_bucket: u64, mut masks: Vec<u128>) -> LineMasks {
        while masks.last() == Some(&0) {
            masks.pop();
        }
        let leading = masks.iter().take_while(|&&mask| mask == 0).count();
        if leading == masks.len() {
            return LineMasks::default();
        }
        masks.drain(..leading);
        let mut before = Vec::with_capacity(masks.len());
        let mut count = 0;
        for mask in &masks {
            before.push(count);
            count += u64::from(mask.count_ones());
        }
        LineMasks {
            first_bucket: first_bucket + leading as u64,
            masks,
            before,
        }
    }

    /// Live positions before `position`, or `None` when `position` is not in the line.
    pub fn ahead_of(&self, position: u64) -> Option<u64> {
        let index = usize::try_from((position / BUCKET).checked_sub(self.first_bucket)?).ok()?;
        let mask = *self.masks.get(index)?;
        let offset = position % BUCKET;
        if mask & (1u128 << offset) == 0 {
            return None;
        }
        let below = mask & ((1u128 << offset) - 1);
        Some(self.before[index] + u64::from(below.count_ones()))
    }

    /// How many positions are in the line.
    pub fn len(&self) -> u64 {
        match (self.before.last(), self.masks.last()) {
            (Some(before), Some(mask)) => before + u64::from(mask.count_ones()),
            _ => 0,
        }
    }

    /// Whether the line is empty.
    pub fn is_empty(&self) -> bool {
        self.masks.is_empty()
    }

    /// The positions, ascending.
    pub fn positions(&self) -> impl Iterator<Item = u64> + '_ {
        self.masks
            .iter()
            .enumerate()
            .flat_map(move |(index, &mask)| {
                let base = (self.first_bucket + index as u64) * BUCKET;
                (0..BUCKET)
                    .filter(move |offset| mask & (1u128 << offset) != 0)
                    .map(move |offset| base + offset)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ahead_counts_the_live_positions_before_one_in_the_line() {
        let positions = [3, 4, 127, 128, 129, 1_000, 70_000];
        let line = LineMasks::from_positions(positions.iter().rev().copied());
        for (ahead, position) in positions.iter().enumerate() {
            assert_eq!(line.ahead_of(*position), Some(ahead as u64), "{position}");
        }
        for absent in [0, 2, 5, 126, 130, 999, 69_999, 70_001, u64::MAX] {
            assert_eq!(line.ahead_of(absent), None, "{absent}");
        }
        assert_eq!(line.len(), positions.len() as u64);
        assert_eq!(line.positions().collect::<Vec<_>>(), positions);
    }

    #[test]
    fn empty_buckets_at_either_end_are_dropped() {
        let line = LineMasks::from_masks(4, vec![0, 0, 1 << 5, 0, 1, 0]);
        assert_eq!(
            line,
            LineMasks::from_positions([6 * BUCKET + 5, 8 * BUCKET])
        );
        assert_eq!(line.ahead_of(8 * BUCKET), Some(1));
        assert_eq!(LineMasks::from_masks(9, vec![0, 0]), LineMasks::default());
        assert!(LineMasks::from_positions([]).is_empty());
        assert_eq!(LineMasks::default().ahead_of(0), None);
    }
}
