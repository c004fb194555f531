//! What the cache does for a decode step recorded once and replayed (see
//! `vkformers_tensor::Graph::replay`): the step's tables (positions, block table, lengths, store
//! slots: one upload) are marked as the step's inputs, a captured step advances them itself for
//! the next run, the host holds ahead the blocks the runs will write (so the table never
//! changes between them), and each replayed run moves the host's lengths as a recorded one would.

use vkformers_kernels::attention::decode;
use vkformers_kernels::step;
use vkformers_tensor::Graph;

use super::KvCache;
use crate::error::{ModelError, Result};

impl KvCache {
    /// Whether decode steps on this cache can be replayed: no sliding-window group (whose
    /// tables give blocks back as rows grow), and every layer's decode attention has run (its
    /// sizes are known: [`KvCache::stable_steps`]).
    pub fn replayable(&self) -> bool {
        let windowed = self.groups.borrow().iter().any(|g| g.window.is_some());
        !windowed && self.layers.borrow().iter().all(|l| l.last_shape().is_some())
    }

    /// Steps of one token a row, starting with the next, over which every layer's decode
    /// attention keeps the split count of the next step (the split count is a constant of a
    /// recorded step), at most `most`.
    pub fn stable_steps(&self, most: usize) -> usize {
        let lens = self.lens.borrow();
        let next = self.selected.borrow().iter().map(|&r| lens[r]).max().unwrap_or(0) + 1;
        let shapes: Option<Vec<_>> = self.layers.borrow().iter().map(|l| l.last_shape()).collect();
        let Some(shapes) = shapes else { return 0 };
        let split = |k: usize| -> Vec<u32> {
            shapes.iter().map(|(s, kernel)| decode::splits_for_kernel(s, (next + k) as u32, *kernel)).collect()
        };
        let first = split(0);
        (0..most).take_while(|&k| split(k) == first).count()
    }

    /// The position id the next step gives its token: the largest of the selected rows.
    pub fn next_position(&self) -> usize {
        let lens = self.lens.borrow();
        self.selected.borrow().iter().map(|&r| lens[r]).max().unwrap_or(0)
    }

    /// Holds, for every selected row, the blocks of its next `steps` positions, so the block
    /// table a step uploads stays right for the steps replayed after it.
    pub fn hold_ahead(&self, steps: usize) -> Result<()> {
        let lens = self.lens.borrow();
        let rows = self.selected.borrow();
        for group in self.groups.borrow_mut().iter_mut() {
            if group.window.is_some() {
                return Err(ModelError::Config("decode replay over a sliding-window cache".into()));
            }
            for &r in rows.iter() {
                for p in lens[r]..lens[r] + steps {
                    if group.tables.hold(r, p).is_some() {
                        return Err(ModelError::Config("decode replay over a shared (copy on write) block".into()));
                    }
                }
            }
        }
        Ok(())
    }

    /// Gives back the blocks held ahead of every row's positions ([`KvCache::hold_ahead`]).
    pub fn release_ahead(&self) {
        let lens = self.lens.borrow();
        for group in self.groups.borrow_mut().iter_mut() {
            for (r, &len) in lens.iter().enumerate() {
                group.tables.drop_from(r, len);
            }
        }
    }

    /// The host's side of a replayed decode step: every selected row holds one more position,
    /// as after a recorded forward of one real token a row.
    pub fn advance_replayed(&self) {
        let rows = self.selected.borrow();
        let (mut lens, mut cols) = (self.lens.borrow_mut(), self.cols.borrow_mut());
        for &r in rows.iter() {
            lens[r] += 1;
            cols[r] += 1;
        }
        self.forwards.set(self.forwards.get() + 1);
    }

    /// In a captured step: records, out of the step's log, the advance of each group's tables
    /// to the next step's. A step that is not one real token a row refuses the capture.
    pub(crate) fn record_advance(&self, g: &Graph<'_>, mask: &[i32], t: usize) -> Result<()> {
        if !g.capturing() {
            return Ok(());
        }
        let step = self.step.borrow();
        let Some(step) = step.as_ref() else { return Ok(()) };
        if t != 1 || step.prefill || mask.contains(&0) {
            g.refuse_capture("the step is not one real token a row");
            return Ok(());
        }
        for st in &step.tables {
            let Some(layout) = st.advance_layout().filter(|_| st.copies.is_empty()) else {
                g.refuse_capture("the step's tables cannot be advanced on the device");
                return Ok(());
            };
            g.unlogged(|| g.record(|rec| step::advance(rec, st.ints().view(), &layout)))?;
        }
        Ok(())
    }
}
