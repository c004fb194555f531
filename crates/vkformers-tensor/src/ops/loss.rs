//! Cross-entropy over logits `[N, V]` with int32 labels `[N]` (-100, or any label outside
//! `[0, V)`, is ignored): the mean over counted rows of `logsumexp(logits) - logits[label]`.
//! The count stays on the device; the backward writes `(softmax - onehot) · dL / count`
//! reading dL from the upstream gradient buffer, so no value crosses to the host.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::loss::{self as k, CrossEntropy};
use vkformers_vk::VkError;

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
            let dlogits = g.empty(lg.shape())?;
            g.record(|rec| {
                k::backward(rec, &operands(&lg, &lb), lse.view(), count.view(), dloss.view(), dlogits.view())
            })?;
            Ok(vec![Some(dlogits), None])
        }),
    );
    Ok(loss)
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
