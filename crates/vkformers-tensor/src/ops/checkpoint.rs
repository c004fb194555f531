//! Gradient checkpointing (`torch.utils.checkpoint`): a block's forward keeps none of its
//! activations, only its inputs; backward recomputes the block with the tape on and
//! back-propagates through the recomputed nodes.
//!
//! The forward runs as a training forward whose nodes are dropped (not under `no_grad`): the
//! same kernels run (a few-row product would otherwise take the GEMV path, whose rounding
//! differs), dropout that applies only while training is drawn, and the output is flagged for
//! gradients when an input or a parameter the block reads requires them. Parameters are
//! captured by the block, not passed in: the recompute makes their nodes again and
//! back-propagating through them accumulates into their `.grad()` as usual.
//!
//! The recorder holds every buffer of a batch until it is submitted, so dropping activations
//! frees device memory only at a submission: the block submits the batch after its forward
//! and after its recompute's backward. Peak activation memory is then about one block's
//! forward and backward plus the kept inputs, at the cost of two submissions per block.

use crate::{Graph, Result, Tensor, VkError};

/// `f(g, inputs)`, recomputed in backward instead of keeping its activations.
///
/// `f` must be deterministic given `inputs` and what it captures (dropout seeds fixed by the
/// caller, not drawn from a counter), and must take every tensor that requires grad and is
/// not a parameter through `inputs` (a captured one is an error in backward, its gradient
/// having nowhere to go). Non-tensor inputs (positions, LongRoPE factors) are captured.
/// Without grad mode, or nested in another checkpointed block's forward, `f` simply runs.
pub fn checkpoint<F>(g: &Graph<'_>, inputs: &[Tensor], f: F) -> Result<Tensor>
where
    F: Fn(&Graph<'_>, &[Tensor]) -> Result<Tensor> + 'static,
{
    if !g.grad_enabled() || g.discarding_nodes() {
        return f(g, inputs);
    }
    let mark = g.tape_mark();
    let out = g.with_grad(true, || f(g, inputs))?;
    // 16-bit copies of the block's activations (shared by its products) go with them.
    g.drop_casts_since(&mark);
    g.sync()?;
    let saved = inputs.to_vec();
    g.push_node(&out, inputs.to_vec(), Box::new(move |g, dy| recompute(g, &f, &saved, dy)));
    Ok(out)
}

/// The backward of a checkpointed block: reruns `f` on detached copies of the inputs that
/// require grad (same storage, new ids with no producer on the tape), back-propagates `dy`
/// through the nodes it pushed, and returns the gradients that reached those copies.
fn recompute<F>(g: &Graph<'_>, f: &F, inputs: &[Tensor], dy: &Tensor) -> Result<Vec<Option<Tensor>>>
where
    F: Fn(&Graph<'_>, &[Tensor]) -> Result<Tensor>,
{
    let copies: Vec<Tensor> = inputs.iter().map(|t| if t.requires_grad() { g.detach(t) } else { t.clone() }).collect();
    let mark = g.tape_mark();
    let out = g.with_grad(false, || f(g, &copies))?;
    let mut grads = g.backward_segment(&out, dy, &mark)?;
    let mut result = Vec::with_capacity(inputs.len());
    for (t, c) in inputs.iter().zip(&copies) {
        result.push(if t.requires_grad() { grads.remove(&c.id()) } else { None });
    }
    if !grads.is_empty() {
        return Err(VkError::Kernel {
            kernel: "checkpoint".into(),
            message: format!(
                "the block read {} tensor(s) that require grad without taking them as inputs; pass them in `inputs`",
                grads.len()
            ),
        });
    }
    // Submit so that the recomputed activations are released before the next block's.
    g.sync()?;
    Ok(result)
}
