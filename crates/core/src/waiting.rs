//! The waiting line of one room: live waiting tickets by position, with exact `ahead` counts.
//!
//! `ahead` must count only live tickets (SPEC §6.1) and must be cheap: every status poll asks
//! for it. A Fenwick tree over positions (relative to a moving base) answers "how many wait
//! below position p" and "which is the k-th waiting ticket" in O(log n); a `BTreeMap` keeps the
//! tickets in position order for FIFO admission.

use std::collections::BTreeMap;

use crate::ids::TicketId;

/// Live waiting tickets of one room, ordered by position.
#[derive(Debug, Clone, Default)]
pub struct WaitingLine {
    by_position: BTreeMap<u64, TicketId>,
    /// Position that index 0 of `tree` stands for.
    base: u64,
    /// Fenwick tree (1-based internally) of 0/1 presence counts.
    tree: Vec<u32>,
}

impl WaitingLine {
    /// An empty line.
    pub fn new() -> WaitingLine {
        WaitingLine::default()
    }

    /// Number of waiting tickets.
    pub fn len(&self) -> u64 {
        self.by_position.len() as u64
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.by_position.is_empty()
    }

    /// Adds a ticket at `position`; positions are unique.
    pub fn insert(&mut self, position: u64, ticket: TicketId) {
        if self.by_position.is_empty() && self.tree.is_empty() {
            self.base = position;
        }
        if position < self.base || position - self.base >= self.tree.len() as u64 {
            self.by_position.insert(position, ticket);
            self.rebuild();
            return;
        }
        if self.by_position.insert(position, ticket).is_none() {
            self.add(position - self.base, 1);
        }
    }

    /// Removes the ticket at `position`, returning it.
    pub fn remove(&mut self, position: u64) -> Option<TicketId> {
        let ticket = self.by_position.remove(&position)?;
        self.add(position - self.base, -1);
        self.maybe_compact();
        Some(ticket)
    }

    /// How many tickets wait at positions strictly below `position`.
    pub fn count_below(&self, position: u64) -> u64 {
        if position <= self.base {
            return 0;
        }
        let index = (position - self.base).min(self.tree.len() as u64);
        self.prefix_sum(index)
    }

    /// The waiting ticket with the lowest position.
    pub fn first(&self) -> Option<(u64, TicketId)> {
        self.by_position.first_key_value().map(|(p, t)| (*p, *t))
    }

    /// The `k`-th waiting ticket in position order (0-based), in O(log n).
    pub fn nth(&self, k: u64) -> Option<(u64, TicketId)> {
        if k >= self.len() {
            return None;
        }
        // Fenwick descent: find the smallest index whose prefix sum exceeds k.
        let mut index = 0usize;
        let mut remaining = k;
        let mut step = self.tree.len().next_power_of_two();
        while step > 0 {
            let next = index + step;
            if next <= self.tree.len() && u64::from(self.tree[next - 1]) <= remaining {
                index = next;
                remaining -= u64::from(self.tree[next - 1]);
            }
            step /= 2;
        }
        let position = self.base + index as u64;
        self.by_position
            .get(&position)
            .map(|ticket| (position, *ticket))
    }

    /// Waiting tickets in position order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, TicketId)> + '_ {
        self.by_position.iter().map(|(p, t)| (*p, *t))
    }

    fn add(&mut self, index: u64, delta: i32) {
        let mut i = index as usize + 1;
        while i <= self.tree.len() {
            self.tree[i - 1] = self.tree[i - 1].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    fn prefix_sum(&self, count: u64) -> u64 {
        let mut i = count as usize;
        let mut sum = 0u64;
        while i > 0 {
            sum += u64::from(self.tree[i - 1]);
            i -= i & i.wrapping_neg();
        }
        sum
    }

    /// Rebases onto the lowest waiting position once the dead prefix dominates the tree.
    fn maybe_compact(&mut self) {
        let Some((&first, _)) = self.by_position.first_key_value() else {
            self.tree.clear();
            return;
        };
        let dead_prefix = first - self.base;
        if dead_prefix > 1024 && dead_prefix > self.tree.len() as u64 / 2 {
            self.rebuild();
        }
    }

    /// Rebuilds the tree over `[lowest, highest]` with room to grow.
    fn rebuild(&mut self) {
        let (Some((&lowest, _)), Some((&highest, _))) = (
            self.by_position.first_key_value(),
            self.by_position.last_key_value(),
        ) else {
            self.tree.clear();
            return;
        };
        self.base = lowest;
        let span = (highest - lowest + 1) as usize;
        let capacity = (span * 2).max(1024);
        self.tree = vec![0; capacity];
        for position in self.by_position.keys() {
            let i = (position - self.base) as usize + 1;
            self.tree[i - 1] += 1;
        }
        // Linear-time Fenwick construction: push each node's total into its parent.
        for i in 1..=capacity {
            let parent = i + (i & i.wrapping_neg());
            if parent <= capacity {
                self.tree[parent - 1] += self.tree[i - 1];
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn id(n: u64) -> TicketId {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&n.to_le_bytes());
        TicketId::from_bytes(bytes)
    }

    #[test]
    fn counts_only_live_tickets_below() {
        let mut line = WaitingLine::new();
        for p in 1..=10 {
            line.insert(p, id(p));
        }
        line.remove(3);
        line.remove(7);
        assert_eq!(line.count_below(1), 0);
        assert_eq!(line.count_below(5), 3);
        assert_eq!(line.count_below(10), 7);
        assert_eq!(line.count_below(100), 8);
        assert_eq!(line.nth(2), Some((4, id(4))));
        assert_eq!(line.first(), Some((1, id(1))));
    }

    proptest! {
        #[test]
        fn matches_a_sorted_set(ops in proptest::collection::vec((any::<bool>(), 0u64..5000), 1..400)) {
            let mut line = WaitingLine::new();
            let mut model = BTreeSet::new();
            let mut next = 1u64;
            for (insert, pick) in ops {
                if insert || model.is_empty() {
                    next += pick % 7;
                    line.insert(next, id(next));
                    model.insert(next);
                    next += 1;
                } else {
                    let victim = *model.iter().nth((pick as usize) % model.len()).unwrap();
                    model.remove(&victim);
                    prop_assert_eq!(line.remove(victim), Some(id(victim)));
                }
                prop_assert_eq!(line.len(), model.len() as u64);
                let probe = pick % (next + 2);
                prop_assert_eq!(line.count_below(probe), model.range(..probe).count() as u64);
                if !model.is_empty() {
                    let k = pick % model.len() as u64;
                    let expected = *model.iter().nth(k as usize).unwrap();
                    prop_assert_eq!(line.nth(k).map(|(p, _)| p), Some(expected));
                }
            }
        }
    }
}
