//! Choosing the next token of every row on the device (`vkformers_kernels::sample`), so that a
//! decode step reads back only the chosen ids `[B]` (4 bytes per row), not the logits `[B, V]`.

use vkformers_kernels::sample::{self, NO_TOKEN};
use vkformers_tensor::{Graph, Tensor};
use vkformers_vk::Buffer;

use crate::decode::DecodeError;
use crate::error::GenerateError;

/// Device state of the choice: the ids buffer `[B]` u32 the kernels write and the host reads.
pub struct DeviceChooser {
    ids: Buffer,
    rows: usize,
}

impl DeviceChooser {
    /// A chooser for `rows` rows.
    pub fn new(g: &Graph<'_>, rows: usize) -> Result<Self, DecodeError> {
        Ok(Self { ids: g.ctx().buffer((rows.max(1) * 4) as u64, "chosen ids")?, rows })
    }

    /// Greedy: the argmax (first index on ties, NaN skipped) of the last column of every row of
    /// `logits [B·T, V]`, read back as `[B]`. Submits the pending forward with the choice.
    pub fn greedy(&self, g: &Graph<'_>, logits: &Tensor, t: usize) -> Result<Vec<Option<u32>>, DecodeError> {
        let ids = self.ids.slice(0, self.rows as u64 * 4);
        g.record(|rec| sample::argmax_last(rec, logits.view(), ids, self.rows, t, logits.last_dim()))?;
        g.sync()?;
        let got: Vec<u32> = g.ctx().read_vec(ids)?;
        Ok(got.into_iter().map(|id| (id != NO_TOKEN).then_some(id)).collect())
    }
}

/// The id of a row that must produce a token, or the error of a row with nothing to choose.
pub fn required(id: Option<u32>) -> Result<u32, GenerateError> {
    id.ok_or(GenerateError::NothingToSample)
}
