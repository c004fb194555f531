//! ESM's batch-dependent embedding scales (`EmbedMasking`), as per-token columns `[B·T, 1]`
//! that multiply the embeddings `[B·T, E]` (constants: the gradient flows through the product
//! to the embeddings only).

use vkformers_tensor::ops::broadcast;
use vkformers_tensor::{Graph, Tensor};

use super::EncoderBatch;
use crate::error::{ModelError, Result};

/// `1 - 0.15 · 0.8`: ESM pre-training masked 15% of tokens and replaced 80% of those by
/// `<mask>` (a Python float in transformers, rounded to f32 where it meets the embeddings).
const KEEP_TRAIN: f64 = 1.0 - 0.15 * 0.8;

/// `token_dropout`: per token 0 on a mask token, else `(1 - 0.12) / (1 - r_b)` with
/// `r_b = #mask tokens in row b / #attention-mask ones in row b` (f32, as transformers).
pub(super) fn token_dropout_scale(batch: &EncoderBatch<'_>, mask_id: i32) -> Result<Vec<f32>> {
    let t = batch.seq;
    let mut out = Vec::with_capacity(batch.ids.len());
    for (ids, mask) in batch.ids.chunks(t).zip(batch.mask.chunks(t)) {
        let masks = ids.iter().filter(|&&id| id == mask_id).count();
        let real: i32 = mask.iter().sum();
        let ratio = masks as f32 / real as f32;
        if real <= 0 || ratio >= 1.0 {
            return Err(ModelError::Config(format!(
                "token_dropout on a row of {masks} mask tokens in {real} attended tokens (ESM divides by the rest)"
            )));
        }
        let keep = KEEP_TRAIN as f32 / (1.0 - ratio);
        out.extend(ids.iter().map(|&id| if id == mask_id { 0.0 } else { keep }));
    }
    Ok(out)
}

/// `x [B·T, E] * column [B·T]` (the column broadcast over E).
pub(super) fn scale_rows(g: &Graph<'_>, x: &Tensor, column: &[f32]) -> Result<Tensor> {
    let c = g.constant(column, &[column.len(), 1])?;
    Ok(broadcast::mul(g, x, &c)?)
}

/// The attention mask as a column of 0 / 1.
pub(super) fn padding_column(batch: &EncoderBatch<'_>) -> Vec<f32> {
    batch.mask.iter().map(|&m| m as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_dropout_zeroes_mask_tokens_and_rescales_by_the_rows_attended_length() {
        // Row 0: 1 mask (id 3) in 4 attended tokens; row 1: 1 mask in 2 (the padding counts
        // neither as attended nor, being id 1, as a mask).
        let (ids, mask) = ([5, 3, 6, 7, 3, 8, 1, 1], [1, 1, 1, 1, 1, 1, 0, 0]);
        let b = EncoderBatch { ids: &ids, mask: &mask, token_types: None, batch: 2, seq: 4 };
        let got = token_dropout_scale(&b, 3).unwrap();
        let (k0, k1) = (0.88f32 / 0.75, 0.88f32 / 0.5);
        assert_eq!(got, vec![k0, 0.0, k0, k0, 0.0, k1, k1, k1]);
        assert_eq!(padding_column(&b), vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]);
        let all_masks = EncoderBatch { ids: &[3, 3], mask: &[1, 1], token_types: None, batch: 1, seq: 2 };
        assert!(token_dropout_scale(&all_masks, 3).is_err());
    }
}
