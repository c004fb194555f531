//! Host bookkeeping of a paged KV cache: which pool blocks each row holds.
//!
//! A pool has `num_blocks` blocks of `block_size` positions. Row r's position p lives in block
//! `rows[r][p / block_size]` at offset `p % block_size`. Blocks come from a free list as rows
//! grow; a finished row gives all of its blocks back, and a sliding-window layer group gives back
//! the blocks wholly before the oldest position a query can still see (so its rows hold about
//! `window + block_size` positions however long they run). When the free list is empty the pool
//! doubles: block ids stay valid, the device pools are copied into bigger ones.
//!
//! Rows may share blocks (beam search: every beam starts on the prompt's blocks, and reordering
//! beams after a step re-points tables instead of copying caches). Each block counts the rows
//! holding it and goes back to the free list when the last one lets go. Writing into a shared
//! block is copy on write: the writing row takes a fresh block and the caller copies the shared
//! one's positions into it first (only a partly filled last block is ever written again).

/// Block tables of every row of one layer group.
#[derive(Debug, Clone)]
pub(crate) struct BlockTables {
    block_size: usize,
    num_blocks: usize,
    free: Vec<u32>,
    /// `refs[b]`: rows holding block b (0: free).
    refs: Vec<u32>,
    /// `rows[r][i]`: the block holding positions `i·bs .. (i+1)·bs` of row r (None: not held).
    rows: Vec<Vec<Option<u32>>>,
}

impl BlockTables {
    /// `rows` empty rows over a pool of `num_blocks` (at least 1) blocks.
    pub(crate) fn new(rows: usize, block_size: usize, num_blocks: usize) -> Self {
        let num_blocks = num_blocks.max(1);
        // Popped from the end: low ids first.
        let free = (0..num_blocks as u32).rev().collect();
        BlockTables { block_size, num_blocks, free, refs: vec![0; num_blocks], rows: vec![Vec::new(); rows] }
    }

    pub(crate) fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    pub(crate) fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks held by row r.
    #[cfg(test)]
    pub(crate) fn held(&self, r: usize) -> usize {
        self.rows[r].iter().flatten().count()
    }

    /// Blocks in use by every row.
    pub(crate) fn used(&self) -> usize {
        self.num_blocks - self.free.len()
    }

    /// Makes row r hold its own block of position p, to write p into: a block taken from the
    /// pool (which doubles when empty), or, when r's block of p is shared with other rows, a
    /// fresh one that the caller must fill with the shared block's contents first: returns
    /// `(shared block, fresh block)` then.
    pub(crate) fn hold(&mut self, r: usize, p: usize) -> Option<(u32, u32)> {
        let i = p / self.block_size;
        if self.rows[r].len() <= i {
            self.rows[r].resize(i + 1, None);
        }
        match self.rows[r][i] {
            Some(id) if self.refs[id as usize] == 1 => None,
            Some(id) => {
                self.refs[id as usize] -= 1;
                let fresh = self.take();
                self.rows[r][i] = Some(fresh);
                Some((id, fresh))
            }
            None => {
                self.rows[r][i] = Some(self.take());
                None
            }
        }
    }

    /// A free block (the pool doubles when none is left), held once.
    fn take(&mut self) -> u32 {
        if self.free.is_empty() {
            let old = self.num_blocks;
            self.num_blocks *= 2;
            self.free.extend((old as u32..self.num_blocks as u32).rev());
            self.refs.resize(self.num_blocks, 0);
        }
        let id = self.free.pop().expect("a doubled pool has free blocks");
        self.refs[id as usize] = 1;
        id
    }

    /// One holder of block `id` lets go; the last one frees it.
    fn give(&mut self, id: u32) {
        self.refs[id as usize] -= 1;
        if self.refs[id as usize] == 0 {
            self.free.push(id);
        }
    }

    /// Gives back the blocks of row r whose positions all lie before `p`.
    pub(crate) fn drop_before(&mut self, r: usize, p: usize) {
        let whole = p / self.block_size;
        let ids: Vec<u32> = self.rows[r].iter_mut().take(whole).filter_map(Option::take).collect();
        ids.into_iter().for_each(|id| self.give(id));
    }

    /// Gives back the blocks of row r that hold no position before `p` (blocks held ahead of
    /// the positions a row has stored, once they are not needed).
    pub(crate) fn drop_from(&mut self, r: usize, p: usize) {
        let first = p.div_ceil(self.block_size);
        let ids: Vec<u32> = self.rows[r].iter_mut().skip(first).filter_map(Option::take).collect();
        ids.into_iter().for_each(|id| self.give(id));
        // As long as the table of a row that never held ahead: the block of its last position.
        self.rows[r].truncate(first);
    }

    /// Row `dst[n]` becomes a holder of row `src[n]`'s blocks (what it held before is let go):
    /// `src` is read before any row changes, so rows may swap or repeat.
    pub(crate) fn point(&mut self, dst: &[usize], src: &[usize]) {
        let tables: Vec<Vec<Option<u32>>> = src.iter().map(|&s| self.rows[s].clone()).collect();
        for id in tables.iter().flatten().flatten() {
            self.refs[*id as usize] += 1;
        }
        for (&d, table) in dst.iter().zip(tables) {
            self.release(d);
            self.rows[d] = table;
        }
    }

    /// Gives back every block of row r.
    pub(crate) fn release(&mut self, r: usize) {
        self.drop_before(r, usize::MAX);
        self.rows[r].clear();
    }

    /// Pool row (`block · block_size + offset`) of position p of row r, if held.
    pub(crate) fn slot(&self, r: usize, p: usize) -> Option<i32> {
        let id = (*self.rows[r].get(p / self.block_size)?)?;
        Some((id as usize * self.block_size + p % self.block_size) as i32)
    }

    /// The device table `[rows.len(), max_blocks]` of `rows` (-1 where not held) and max_blocks.
    pub(crate) fn table(&self, rows: &[usize]) -> (Vec<i32>, usize) {
        let width = rows.iter().map(|&r| self.rows[r].len()).max().unwrap_or(0).max(1);
        let mut t = vec![-1; rows.len() * width];
        for (n, &r) in rows.iter().enumerate() {
            for (i, id) in self.rows[r].iter().enumerate() {
                t[n * width + i] = id.map_or(-1, |id| id as i32);
            }
        }
        (t, width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_take_blocks_as_they_grow_and_give_them_back() {
        let mut t = BlockTables::new(2, 4, 3);
        for p in 0..9 {
            t.hold(0, p);
        }
        assert_eq!((t.held(0), t.used(), t.num_blocks()), (3, 3, 3));
        assert_eq!(t.slot(0, 5), Some(5));
        // Row 1 needs a block of an empty pool: it doubles, old ids stay.
        t.hold(1, 0);
        assert_eq!((t.num_blocks(), t.slot(1, 2), t.slot(0, 8)), (6, Some(14), Some(8)));
        t.release(0);
        assert_eq!((t.used(), t.held(0), t.slot(0, 0)), (1, 0, None));
        // Freed blocks are reused before the pool grows again.
        for p in 0..12 {
            t.hold(0, p);
        }
        assert_eq!((t.num_blocks(), t.used()), (6, 4));
    }

    #[test]
    fn a_window_row_gives_back_blocks_before_what_it_can_see() {
        let mut t = BlockTables::new(1, 4, 2);
        for p in 0..40usize {
            // A query at p sees p − 3 ..= p (window 4).
            t.drop_before(0, p.saturating_sub(3));
            t.hold(0, p);
            assert!(t.held(0) <= 2, "position {p}: {} blocks", t.held(0));
            assert!(t.slot(0, p.saturating_sub(3)).is_some());
        }
        assert_eq!(t.num_blocks(), 2);
        let (table, width) = t.table(&[0]);
        assert_eq!(width, 10);
        // The last query (39) sees 36..=39: block 9 alone.
        assert_eq!(table.iter().filter(|&&b| b >= 0).count(), 1);
        assert!(table[9] >= 0);
    }

    #[test]
    fn shared_blocks_are_counted_once_copied_on_write_and_freed_by_the_last_holder() {
        let mut t = BlockTables::new(3, 4, 4);
        // A 6-position prompt on row 0: blocks 0 (full) and 1 (half).
        for p in 0..6 {
            assert_eq!(t.hold(0, p), None);
        }
        t.point(&[1, 2], &[0, 0]);
        assert_eq!((t.used(), t.held(1), t.slot(2, 5)), (2, 2, t.slot(0, 5)));
        // Rows 0 and 1 write position 6 into the shared half block: each copies it; the last
        // holder (row 2) writes in place.
        assert_eq!(t.hold(0, 6), Some((1, 2)));
        assert_eq!(t.hold(1, 6), Some((1, 3)));
        assert_eq!(t.hold(2, 6), None);
        assert_eq!((t.used(), t.slot(0, 0), t.slot(2, 6)), (4, Some(0), Some(6)));
        // Reordering: rows 0 and 1 both continue row 2, row 2 continues row 0.
        t.point(&[0, 1, 2], &[2, 2, 0]);
        assert_eq!((t.slot(0, 6), t.slot(1, 6), t.slot(2, 6)), (Some(6), Some(6), Some(10)));
        // Row 1's old block 3 went back; blocks 0, 1, 2 are in use.
        assert_eq!(t.used(), 3);
        (0..3).for_each(|r| t.release(r));
        assert_eq!(t.used(), 0);
    }
}
