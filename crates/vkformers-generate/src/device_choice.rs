//! Choosing the next token of every row on the device (`vkformers_kernels::sample`), so that a
//! decode step reads back only the chosen ids `[B]` (4 bytes per row), not the logits `[B, V]`.

use vkformers_kernels::sample::{self, Processors, NO_TOKEN};
use vkformers_tensor::{Graph, Tensor};
use vkformers_vk::Buffer;

use crate::decode::DecodeError;
use crate::error::GenerateError;
use crate::processors::{LogitsProcessor, Pipeline};

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

/// The device form of a host pipeline (same processors, same order, the host's f32 parameters), or
/// `None` when it cannot be expressed (a processor twice, or different `min_tokens_to_keep`s).
pub fn device_processors(pipeline: &Pipeline) -> Option<Processors> {
    let mut p = Processors { penalty: None, temperature: None, top_k: None, top_p: None, min_p: None, keep: 1 };
    let mut keep = None;
    let mut same_keep = |k: usize| keep.replace(k).is_none_or(|old| old == k);
    for proc in &pipeline.processors {
        let fresh = match *proc {
            LogitsProcessor::RepetitionPenalty { penalty } => p.penalty.replace(penalty as f32).is_none(),
            LogitsProcessor::Temperature { temperature } => p.temperature.replace(temperature as f32).is_none(),
            LogitsProcessor::TopK { top_k, min_tokens_to_keep } => {
                same_keep(min_tokens_to_keep) && p.top_k.replace(top_k).is_none()
            }
            LogitsProcessor::TopP { top_p, min_tokens_to_keep } => {
                same_keep(min_tokens_to_keep) && p.top_p.replace(top_p).is_none()
            }
            LogitsProcessor::MinP { min_p, min_tokens_to_keep } => {
                same_keep(min_tokens_to_keep) && p.min_p.replace(min_p as f32).is_none()
            }
        };
        if !fresh {
            return None;
        }
    }
    p.keep = keep.unwrap_or(1);
    in_transformers_order(pipeline).then_some(p)
}

/// Whether the processors run in the order the device applies them (penalty, temperature, top-k,
/// top-p, min-p), as `SamplingParams::processors` builds them.
fn in_transformers_order(pipeline: &Pipeline) -> bool {
    let rank = |p: &LogitsProcessor| match p {
        LogitsProcessor::RepetitionPenalty { .. } => 0,
        LogitsProcessor::Temperature { .. } => 1,
        LogitsProcessor::TopK { .. } => 2,
        LogitsProcessor::TopP { .. } => 3,
        LogitsProcessor::MinP { .. } => 4,
    };
    pipeline.processors.windows(2).all(|w| rank(&w[0]) < rank(&w[1]))
}
