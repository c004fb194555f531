//! Undoing a decode step that a generation recorded ahead and did not need.

use super::KvCache;

impl KvCache {
    /// Forgets the last column of every selected row, which the last forward fed as one real
    /// token a row (a decode step that ran ahead of the host after every row had finished): the
    /// cache then holds what it held before that forward, and the next forward stores its own
    /// columns over the forgotten one. The block that forward took for the column stays held (the
    /// next forward at that position writes into it); blocks a sliding window gave back are those
    /// no query from that position on can see, which the next forward would give back as well.
    pub fn forget_last_column(&self) {
        let rows = self.selected.borrow();
        let (mut lens, mut cols) = (self.lens.borrow_mut(), self.cols.borrow_mut());
        for &r in rows.iter() {
            lens[r] = lens[r].saturating_sub(1);
            cols[r] = cols[r].saturating_sub(1);
        }
    }
}
