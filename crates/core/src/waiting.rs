//! The waiting line of one room: live waiting tickets by position, with exact `ahead` counts.
//!
//! `ahead` must count only live tickets (SPEC §6.1) and must be cheap: every status poll asks
//! for it. A Fenwick tree over positions (relative to a moving base) answers "how many wait
//! below position p" and "which is the k-th waiting ticket" in O(log n). Beside it the tickets
//! sit in an array indexed by position, cut into blocks of `BLOCK` positions that exist only
//! while one of their positions waits. Positions are handed out densely in join order, so the
//! regular lane costs about 16 bytes and a bit per ticket (a map ordered by position cost
//! about 47, measured by the engine's memory test); a sparse line (the priority lane, whose
//! positions are scattered among the regular ones) costs at most one block per ticket, and one
//! emptied block is kept for the next (an open room's line empties after every join).

use std::collections::VecDeque;

use crate::ids::TicketId;

/// Positions per block: small enough that a lone priority ticket costs little (4 KiB), large
/// enough that the block pointers are noise beside the ids.
const BLOCK: usize = 256;

/// The ids of `BLOCK` consecutive positions, and which of them wait.
#[derive(Debug, Clone)]
struct Block {
    ids: [TicketId; BLOCK],
    present: [u64; BLOCK / 64],
    count: u32,
}

impl Block {
    fn empty() -> Box<Block> {
        Box::new(Block {
            ids: [TicketId::from_bytes([0; 16]); BLOCK],
            present: [0; BLOCK / 64],
            count: 0,
        })
    }

    fn holds(&self, offset: usize) -> bool {
        self.present[offset / 64] & (1 << (offset % 64)) != 0
    }

    fn get(&self, offset: usize) -> Option<TicketId> {
        self.holds(offset).then(|| self.ids[offset])
    }
}

/// Whether [`WaitingLine::place`] keeps the tree up to date (a loader builds it once at the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tree {
    Kept,
    Deferred,
}

/// A line being filled in any order, as a restore reads its tickets: the tickets go into their
/// blocks and the tree is built once, in linear time, by [`finish`](LineLoader::finish),
/// instead of O(log n) scattered updates per ticket.
#[derive(Debug, Default)]
pub struct LineLoader {
    line: WaitingLine,
}

impl LineLoader {
    /// An empty loader.
    pub fn new() -> LineLoader {
        LineLoader::default()
    }

    /// Adds a ticket at `position`, or replaces the one there.
    pub fn insert(&mut self, position: u64, ticket: TicketId) {
        self.line.place(position, ticket, Tree::Deferred);
    }

    /// The loaded line, its tree built.
    pub fn finish(mut self) -> WaitingLine {
        if self.line.is_empty() {
            return WaitingLine::new();
        }
        self.line.rebuild();
        self.line
    }
}

/// Live waiting tickets of one room, ordered by position.
#[derive(Debug, Clone, Default)]
pub struct WaitingLine {
    /// Position of the first slot of `blocks[0]`; a multiple of `BLOCK`.
    base: u64,
    /// Blocks in position order; `None` where no position of the block waits.
    blocks: VecDeque<Option<Box<Block>>>,
    len: u64,
    /// Fenwick tree (1-based internally) of 0/1 presence counts, one leaf per slot.
    tree: Vec<u32>,
    /// The last block emptied, kept for the next block needed: in an open room every ticket
    /// leaves the line as soon as it came, which would allocate and free a block per join.
    spare: Option<Box<Block>>,
}

impl WaitingLine {
    /// An empty line.
    pub fn new() -> WaitingLine {
        WaitingLine::default()
    }

    /// Number of waiting tickets.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a ticket at `position`, or replaces the one there.
    pub fn insert(&mut self, position: u64, ticket: TicketId) {
        if self.place(position, ticket, Tree::Kept) {
            self.add(position - self.base, 1);
        }
    }

    /// Puts `ticket` into its block, growing the blocks (and, when kept, the tree) to reach
    /// it; whether the position was empty before.
    fn place(&mut self, position: u64, ticket: TicketId, tree: Tree) -> bool {
        let block_start = position - position % BLOCK as u64;
        if self.blocks.is_empty() {
            self.base = block_start;
        }
        if block_start < self.base {
            let missing = Self::block_index(block_start, self.base);
            for _ in 0..missing {
                self.blocks.push_front(None);
            }
            self.base = block_start;
            if tree == Tree::Kept {
                self.rebuild();
            }
        }
        let index = Self::block_index(self.base, position);
        while index >= self.blocks.len() {
            self.blocks.push_back(None);
            if tree == Tree::Kept {
                self.grow_tree();
            }
        }
        let offset = (position % BLOCK as u64) as usize;
        let spare = &mut self.spare;
        let block =
            self.blocks[index].get_or_insert_with(|| spare.take().unwrap_or_else(Block::empty));
        block.ids[offset] = ticket;
        if block.holds(offset) {
            return false;
        }
        block.present[offset / 64] |= 1 << (offset % 64);
        block.count += 1;
        self.len += 1;
        true
    }

    /// Removes the ticket at `position`, returning it.
    pub fn remove(&mut self, position: u64) -> Option<TicketId> {
        let index = self.slot_block(position)?;
        let offset = (position % BLOCK as u64) as usize;
        let slot = self.blocks.get_mut(index)?;
        let block = slot.as_mut()?;
        let ticket = block.get(offset)?;
        block.present[offset / 64] &= !(1 << (offset % 64));
        block.count -= 1;
        let emptied = block.count == 0;
        if emptied {
            // Nothing in it waits any more (its ids are only read where a bit is set).
            self.spare = slot.take();
        }
        self.len -= 1;
        self.add(position - self.base, -1);
        if emptied {
            self.maybe_compact();
        }
        Some(ticket)
    }

    /// The ticket waiting at `position`, if any.
    pub fn get(&self, position: u64) -> Option<TicketId> {
        let index = self.slot_block(position)?;
        self.blocks
            .get(index)?
            .as_ref()?
            .get((position % BLOCK as u64) as usize)
    }

    /// How many tickets wait at positions strictly below `position`.
    pub fn count_below(&self, position: u64) -> u64 {
        if position <= self.base {
            return 0;
        }
        let index = (position - self.base).min(self.tree.len() as u64);
        self.prefix_sum(index as usize)
    }

    /// The waiting ticket with the lowest position.
    pub fn first(&self) -> Option<(u64, TicketId)> {
        self.nth(0)
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
        self.get(position).map(|ticket| (position, ticket))
    }

    /// Waiting tickets in position order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, TicketId)> + '_ {
        self.blocks
            .iter()
            .enumerate()
            .filter_map(|(index, block)| block.as_ref().map(|block| (index, block)))
            .flat_map(move |(index, block)| {
                let start = self.base + (index * BLOCK) as u64;
                (0..BLOCK).filter_map(move |offset| {
                    block
                        .get(offset)
                        .map(|ticket| (start + offset as u64, ticket))
                })
            })
    }

    fn block_index(base: u64, position: u64) -> usize {
        ((position - base) / BLOCK as u64) as usize
    }

    /// The index of the block that would hold `position`, when it lies within the blocks.
    fn slot_block(&self, position: u64) -> Option<usize> {
        if position < self.base {
            return None;
        }
        let index = Self::block_index(self.base, position);
        (index < self.blocks.len()).then_some(index)
    }

    /// Appends the empty leaves of one more block to the tree.
    fn grow_tree(&mut self) {
        if self.len == 0 {
            // Nobody waits, so every node sums to zero. An open room's line empties after each
            // join (the visitor is admitted at once), so this is the usual case there.
            self.tree.resize(self.tree.len() + BLOCK, 0);
            return;
        }
        for _ in 0..BLOCK {
            // Node i (1-based) sums the leaves (i - lowbit(i), i]; the new leaf i is empty,
            // so the node holds what the leaves before it in that range hold.
            let i = self.tree.len() + 1;
            let from = i - (i & i.wrapping_neg());
            let sum = self.prefix_sum(i - 1) - self.prefix_sum(from);
            self.tree.push(u32::try_from(sum).unwrap_or(u32::MAX));
        }
    }

    fn add(&mut self, index: u64, delta: i32) {
        let mut i = index as usize + 1;
        while i <= self.tree.len() {
            self.tree[i - 1] = self.tree[i - 1].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    fn prefix_sum(&self, count: usize) -> u64 {
        let mut i = count;
        let mut sum = 0u64;
        while i > 0 {
            sum += u64::from(self.tree[i - 1]);
            i -= i & i.wrapping_neg();
        }
        sum
    }

    /// Drops the empty blocks in front once they are most of the line, and everything once
    /// nobody waits.
    fn maybe_compact(&mut self) {
        if self.len == 0 {
            self.blocks.clear();
            self.tree = Vec::new();
            return;
        }
        let dead = self
            .blocks
            .iter()
            .take_while(|block| block.is_none())
            .count();
        if dead > 4 && dead > self.blocks.len() / 2 {
            self.blocks.drain(..dead);
            self.base += (dead * BLOCK) as u64;
            self.rebuild();
        }
    }

    /// Rebuilds the tree over the blocks from their presence bits, in linear time.
    fn rebuild(&mut self) {
        let capacity = self.blocks.len() * BLOCK;
        let mut tree = vec![0u32; capacity];
        for (index, block) in self.blocks.iter().enumerate() {
            let Some(block) = block else { continue };
            for offset in (0..BLOCK).filter(|offset| block.holds(*offset)) {
                tree[index * BLOCK + offset] = 1;
            }
        }
        // Push each node's total into its parent.
        for i in 1..=capacity {
            let parent = i + (i & i.wrapping_neg());
            if parent <= capacity {
                tree[parent - 1] += tree[i - 1];
            }
        }
        self.tree = tree;
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

    /// An open room's line: every ticket leaves it as soon as it came, across block borders,
    /// and the counts are exact when tickets stay again (the tree grown while nobody waits).
    #[test]
    fn a_line_emptied_after_every_ticket_still_counts_exactly() {
        let mut line = WaitingLine::new();
        for p in 1..=600 {
            line.insert(p, id(p));
            assert_eq!(line.count_below(p + 1), 1);
            assert_eq!(line.remove(p), Some(id(p)));
            assert!(line.is_empty());
        }
        for p in 601..=1000 {
            line.insert(p, id(p));
        }
        line.remove(700);
        assert_eq!(line.count_below(601), 0);
        assert_eq!(line.count_below(800), 198);
        assert_eq!(line.count_below(1001), 399);
        assert_eq!(line.nth(99), Some((701, id(701))));
        assert_eq!(line.nth(100), Some((702, id(702))));
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
                prop_assert_eq!(line.get(probe), model.contains(&probe).then(|| id(probe)));
                prop_assert_eq!(line.iter().map(|(p, _)| p).collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
                if !model.is_empty() {
                    let k = pick % model.len() as u64;
                    let expected = *model.iter().nth(k as usize).unwrap();
                    prop_assert_eq!(line.nth(k).map(|(p, _)| p), Some(expected));
                }
            }
        }

        /// A restore inserts positions in any order, far apart, and the line empties out.
        #[test]
        fn matches_a_sorted_set_in_any_order(ops in proptest::collection::vec((0u8..3, 0u64..20_000), 1..300)) {
            let mut line = WaitingLine::new();
            let mut model = BTreeSet::new();
            for (op, pick) in ops {
                if op > 0 || model.is_empty() {
                    line.insert(pick, id(pick));
                    model.insert(pick);
                } else {
                    let victim = *model.iter().nth((pick as usize) % model.len()).unwrap();
                    model.remove(&victim);
                    prop_assert_eq!(line.remove(victim), Some(id(victim)));
                    prop_assert_eq!(line.remove(victim), None);
                }
                prop_assert_eq!(line.len(), model.len() as u64);
                prop_assert_eq!(line.count_below(pick), model.range(..pick).count() as u64);
                prop_assert_eq!(line.first().map(|(p, _)| p), model.first().copied());
                let k = pick % (model.len() as u64 + 1);
                prop_assert_eq!(line.nth(k).map(|(p, _)| p), model.iter().nth(k as usize).copied());
            }
            prop_assert_eq!(line.iter().collect::<Vec<_>>(), model.iter().map(|p| (*p, id(*p))).collect::<Vec<_>>());
        }

        /// A loaded line answers as one filled ticket by ticket, and goes on like one.
        #[test]
        fn a_loaded_line_matches_a_sorted_set(positions in proptest::collection::vec(1u64..20_000, 0..300), later in 20_000u64..21_000) {
            let mut loader = LineLoader::new();
            for &position in &positions {
                loader.insert(position, id(position));
            }
            let mut line = loader.finish();
            let mut model: BTreeSet<u64> = positions.iter().copied().collect();
            line.insert(later, id(later));
            model.insert(later);
            prop_assert_eq!(line.len(), model.len() as u64);
            prop_assert_eq!(line.iter().map(|(p, _)| p).collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            for (k, &position) in model.iter().enumerate() {
                prop_assert_eq!(line.count_below(position), k as u64);
                prop_assert_eq!(line.nth(k as u64), Some((position, id(position))));
            }
            for &position in &positions {
                prop_assert_eq!(line.remove(position).is_some(), model.remove(&position));
                prop_assert_eq!(line.first().map(|(p, _)| p), model.first().copied());
            }
        }
    }
}
