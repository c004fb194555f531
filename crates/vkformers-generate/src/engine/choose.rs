//! How the engine chooses each row's next token: the device's argmax, the device's per-row
//! sampler, or the host's pipeline (the reference).

use vkformers_kernels::sample::rows::RowDraw;
use vkformers_tensor::{Graph, Tensor};

use super::{Engine, Running};
use crate::decode::DecodeError;
use crate::device_choice::{required, DeviceChooser};
use crate::generation::last_logits;
use crate::penalties::TokenLogprob;
use crate::row_choice::RowChooser;

impl Engine<'_> {
    /// The next token of each slot in `slots` from `logits [n, V]` (one row each, in order): the
    /// device's argmax when every row is plain greedy, else the device's per-row sampler (only ids,
    /// and the log-probabilities asked for, come back), else the host's pipeline.
    pub(super) fn choose(
        &mut self,
        g: &Graph<'_>,
        logits: &Tensor,
        slots: &[usize],
    ) -> Result<Vec<(u32, Option<TokenLogprob>)>, DecodeError> {
        let rows: Vec<&Running> = slots.iter().map(|&s| self.slots[s].as_ref().expect("a running slot")).collect();
        let n = rows.len();
        if rows.iter().all(|r| r.device_greedy()) {
            slots.iter().for_each(|&s| self.synced[s] = false);
            let chooser = match self.device.entry(n) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(DeviceChooser::new(g, n)?),
            };
            let ids = chooser.greedy(g, logits, 1)?;
            return ids.into_iter().map(|id| Ok((required(id)?, None))).collect();
        }
        let draws: Option<Vec<RowDraw>> =
            if self.host_sampling { None } else { slots.iter().zip(&rows).map(|(&s, r)| r.device_row(s)).collect() };
        if let Some(draws) = draws {
            return self.choose_on_device(g, logits, slots, &draws);
        }
        slots.iter().for_each(|&s| self.synced[s] = false);
        self.host_rows += n;
        let rows: Vec<&Running> = slots.iter().map(|&s| self.slots[s].as_ref().expect("a running slot")).collect();
        let mut scores = last_logits(g, logits, n, 1)?;
        scores.iter_mut().zip(rows).map(|(s, r)| r.choose_host(s)).collect()
    }

    /// The per-row device sampler's choice: uploads the state of the penalised slots it does not
    /// hold yet, then draws (the kernel records each choice in the state, so a slot stays in sync).
    fn choose_on_device(
        &mut self,
        g: &Graph<'_>,
        logits: &Tensor,
        slots: &[usize],
        draws: &[RowDraw],
    ) -> Result<Vec<(u32, Option<TokenLogprob>)>, DecodeError> {
        if self.rows.is_none() {
            self.rows = Some(RowChooser::new(g, self.slots.len(), self.spec().vocab)?);
        }
        let chooser = self.rows.as_ref().expect("just made");
        // Only the penalties read the state: other rows need no upload (an admission costs none).
        for (&s, d) in slots.iter().zip(draws) {
            if d.reads_state() && !self.synced[s] {
                let r = self.slots[s].as_ref().expect("a running slot");
                chooser.reset(g, s, &r.history, r.new.len())?;
                self.synced[s] = true;
            }
        }
        chooser.choose(g, logits, draws)
    }
}
