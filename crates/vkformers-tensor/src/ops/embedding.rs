//! Token embedding: a row gather `out [.., D] = W[ids, :]` from `W [V, D]` with int32
//! `ids [..]` (an id outside `[0, V)` gives a zero row). Backward: a fresh zero `dW [V, D]`
//! into which the kernel scatter-adds `dW[ids[n], :] += dout[n, :]` deterministically, except
//! into row `padding_idx` when one is given (torch's `nn.Embedding(padding_idx=..)`).

use vkformers_kernels::dtype::DType;
use vkformers_kernels::elementwise;
use vkformers_kernels::embedding::{self as k, Embedding};

use crate::{Graph, Result, Tensor, VkError};

fn err(message: String) -> VkError {
    VkError::Kernel { kernel: "embedding".into(), message }
}

fn dim32(v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| err(format!("{v} does not fit in 32 bits")))
}

/// `out [.., D] = w[ids, :]` for a table `w [V, D]` and int32 `ids [..]`.
pub fn embedding(g: &Graph<'_>, w: &Tensor, ids: &Tensor) -> Result<Tensor> {
    embedding_padded(g, w, ids, None)
}

/// As [`embedding`], with row `padding_idx` of `w` getting no gradient (its lookups still read
/// it), as transformers' decoders build `nn.Embedding(vocab, hidden, padding_idx=pad_token_id)`.
pub fn embedding_padded(g: &Graph<'_>, w: &Tensor, ids: &Tensor, padding_idx: Option<usize>) -> Result<Tensor> {
    let ws = w.shape();
    if ws.len() != 2 {
        return Err(err(format!("table {ws:?} is not [V, D]")));
    }
    let padding_idx = padding_idx.map(dim32).transpose()?;
    let (vocab, dim, tokens) = (dim32(ws[0])?, dim32(ws[1])?, dim32(ids.numel())?);
    let shape: Vec<usize> = ids.shape().iter().copied().chain([ws[1]]).collect();
    if w.dtype() != DType::F32 {
        return frozen_16bit_table(g, w, ids, Embedding { vocab, dim, tokens, dtype: w.dtype(), padding_idx }, &shape);
    }
    let p = Embedding { vocab, dim, tokens, dtype: DType::F32, padding_idx };
    let out = g.output(&shape, &[w])?;
    g.record(|rec| k::embedding_forward(rec, &p, w.view(), ids.view(), out.view()))?;
    let (table_shape, saved_ids) = (ws.to_vec(), ids.clone());
    g.push_node(
        &out,
        vec![w.clone(), ids.clone()],
        Box::new(move |g, dout| {
            let dw = g.empty(&table_shape)?;
            let scratch = g.ctx().buffer(k::backward_scratch_bytes(p.vocab, p.tokens), "embedding backward scratch")?;
            let s = scratch.slice(0, scratch.size());
            if crate::zero_fills() {
                g.record(|rec| {
                    elementwise::fill(rec, dw.view(), 0.0)?;
                    k::embedding_backward(rec, &p, saved_ids.view(), dout.view(), dw.view(), s)
                })?;
            } else {
                // Every row of dw written (rows of absent ids zero): no [V, D] fill first.
                g.record(|rec| k::embedding_backward_fresh(rec, &p, saved_ids.view(), dout.view(), dw.view(), s))?;
            }
            Ok(vec![Some(dw), None])
        }),
    );
    Ok(out)
}

/// The lookup of a 16-bit table (inference keeps a decoder's table in the model's type, as
/// `from_pretrained(dtype=...)` does): rows widened to f32 in the gather (exact). Such a table
/// is a constant: it takes no gradient.
fn frozen_16bit_table(g: &Graph<'_>, w: &Tensor, ids: &Tensor, p: Embedding, shape: &[usize]) -> Result<Tensor> {
    if w.requires_grad() {
        return Err(err(format!("a {:?} table takes no gradient: train with an f32 table", w.dtype())));
    }
    // No tape node: nothing upstream of a constant table takes a gradient.
    let out = g.empty(shape)?;
    g.record(|rec| k::embedding_forward_wide(rec, &p, w.view(), ids.view(), out.view()))?;
    Ok(out)
}
