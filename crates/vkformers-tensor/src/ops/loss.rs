//! Cross-entropy over logits `[N, V]` with int32 labels `[N]` (-100, or any label outside
//! `[0, V)`, is ignored): the mean over counted rows of `logsumexp(logits) - logits[label]`.
//! The count stays on the device; the backward writes `(softmax - onehot) · dL / count`
//! reading dL from the upstream gradient buffer, so no value crosses to the host.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::loss::{self as k, CrossEntropy};
use vkformers_vk::{BufferView, VkError};

use crate::{Graph, Result, Tensor};

/// Mean cross-entropy `[1]` of `logits [N, V]` against `labels [N]`.
pub fn cross_entropy(g: &Graph<'_>, logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let (rows, vocab) = (logits.rows(), logits.last_dim());
    if labels.numel() != rows {
        return Err(VkError::Kernel {
            kernel: "cross_entropy".into(),
            message: format!("{} labels for {rows} rows of logits", labels.numel()),
        });
    }
    let count = g.empty(&[1])?;
    let loss_rows = g.empty(&[rows])?;
    let lse = g.empty(&[rows])?;
    let loss = g.output(&[1], &[logits])?;
    g.record(|rec| {
        k::count_labels(rec, labels.view(), vocab as u32, count.view())?;
        k::forward(rec, &operands(logits, labels), loss_rows.view(), lse.view())?;
        k::mean_loss(rec, loss_rows.view(), count.view(), loss.view())
    })?;
    let (lg, lb) = (logits.clone(), labels.clone());
    g.push_node(
        &loss,
        vec![logits.clone(), labels.clone()],
        Box::new(move |g, dloss| {
            let dlogits = backward(g, &operands(&lg, &lb), &lg, (lse.view(), count.view(), dloss.view()))?;
            Ok(vec![Some(dlogits), None])
        }),
    );
    Ok(loss)
}

/// dlogits `[N, V]` of the cross-entropy `ce` of `logits`: in the autocast type, written
/// directly by the kernel, when the op that produced the logits takes a 16-bit gradient (the
/// LM head's product: its backward products read it as they would read the f32 dlogits'
/// 16-bit copy; no f32 dlogits written, no cast); else f32.
pub(crate) fn backward(
    g: &Graph<'_>,
    ce: &CrossEntropy<'_>,
    logits: &Tensor,
    (lse, count, dloss): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
) -> Result<Tensor> {
    let takes_half = logits.dtype() == DType::F32 && g.takes_half_grad(logits);
    let half = g.autocast().filter(|_| takes_half && crate::ops::cast::half_outputs_on());
    match half {
        Some(dt) => {
            let dlogits = g.empty_as(logits.shape(), dt)?;
            let twin = vkformers_kernels::dtype::Twin { view: dlogits.view(), dtype: dt };
            g.record(|rec| k::backward_twin_only(rec, ce, (lse, count, dloss), twin))?;
            Ok(dlogits)
        }
        None => {
            let dlogits = g.empty_as(logits.shape(), logits.dtype())?;
            g.record(|rec| k::backward(rec, ce, lse, count, dloss, dlogits.view()))?;
            Ok(dlogits)
        }
    }
}

fn operands<'a>(logits: &'a Tensor, labels: &'a Tensor) -> CrossEntropy<'a> {
    CrossEntropy {
        logits: logits.view(),
        labels: labels.view(),
        rows: logits.rows() as u32,
        vocab: logits.last_dim() as u32,
        dtype: DType::F32,
    }
}
