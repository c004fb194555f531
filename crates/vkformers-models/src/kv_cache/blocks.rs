//! Host bookkeeping of a paged KV cache: which pool blocks each row holds.
//!
//! A pool has `num_blocks` blocks of `block_size` positions. Row r's position p lives in block
//! `rows[r][p / block_size]` at offset `p % block_size`. Blocks come from a free list as rows
//! grow; a finished row gives all of its blocks back, and a sliding-window layer group gives back
//! the blocks wholly before the oldest position a query can still see (so its rows hold about
//! `window + block_size` positions however long they run). When the free list is empty the pool
//! doubles: block ids stay valid, the device pools are copied into bigger ones.

/// Block tables of every row of one layer group.
#[derive(Debug, Clone)]
pub(crate) struct BlockTables {
    block_size: usize,
    num_blocks: usize,
    free: Vec<u32>,
    /// `rows[r][i]`: the block holding positions `i·bs .. (i+1)·bs` of row r (None: not held).
    rows: Vec<Vec<Option<u32>>>,
}

impl BlockTables {
    /// `rows` empty rows over a pool of `num_blocks` (at least 1) blocks.
    pub(crate) fn new(rows: usize, block_size: usize, num_blocks: usize) -> Self {
        let num_blocks = num_blocks.max(1);
        // Popped from the end: low ids first.
        let free = (0..num_blocks as u32).rev().collect();
        BlockTables { block_size, num_blocks, free, rows: vec![Vec::new(); rows] }
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

    /// Makes row r hold the block of position p (taking one from the pool, which doubles when
    /// empty).
    pub(crate) fn hold(&mut self, r: usize, p: usize) {
        let i = p / self.block_size;
        if self.rows[r].len() <= i {
            self.rows[r].resize(i + 1, None);
        }
        if self.rows[r][i].is_some() {
            return;
        }
        if self.free.is_empty() {
            let old = self.num_blocks;
            self.num_blocks *= 2;
            self.free.extend((old as u32..self.num_blocks as u32).rev());
        }
        self.rows[r][i] = self.free.pop();
    }

    /// Gives back the blocks of row r whose positions all lie before `p`.
    pub(crate) fn drop_before(&mut self, r: usize, p: usize) {
        let whole = p / self.block_size;
        for slot in self.rows[r].iter_mut().take(whole) {
            if let Some(id) = slot.take() {
                self.free.push(id);
            }
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
}
