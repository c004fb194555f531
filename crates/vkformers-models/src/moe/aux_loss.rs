//! The load-balancing loss of transformers' `load_balancing_loss_func` (Switch Transformer eq.
//! 4-6), over the L MoE layers of one forward with attention mask m [n] (n = B·T rows):
//!
//! ```text
//! C_e = sum_l sum_t m_t · [e chosen for t in layer l]     (counts; no gradient)
//! P_e = sum_l sum_t m_t · p_l[t, e]                       (router probabilities)
//! R   = L · sum_t m_t
//! aux = E · sum_e (C_e / R) · (P_e / R)
//! ```
//!
//! The top-k of the counts is the routing's own (softmax then top-k, as the function recomputes).

use vkformers_tensor::ops::{broadcast, matmul, shape};
use vkformers_tensor::{Graph, Tensor};

use crate::error::{ModelError, Result};

/// One MoE layer's router output: probabilities `[n, E]` and the 0/1 choice `[n, E]`.
pub(crate) struct RouterOut {
    pub probs: Tensor,
    pub sel: Tensor,
}

/// `aux [1]` from the layers' router outputs and the mask `[n]` (1 real, 0 padding).
pub(crate) fn aux_loss(g: &Graph<'_>, layers: &[RouterOut], mask: &[i32]) -> Result<Tensor> {
    let first = layers.first().ok_or_else(|| ModelError::Config("a load-balancing loss without MoE layers".into()))?;
    let (n, e) = (first.probs.rows(), first.probs.last_dim());
    let m: Vec<f32> = mask.iter().map(|&v| v as f32).collect();
    let rows = layers.len() as f64 * m.iter().map(|&v| f64::from(v)).sum::<f64>();
    let mt = g.constant(&m, &[1, n])?;
    let (mut c, mut p): (Option<Tensor>, Option<Tensor>) = (None, None);
    for l in layers {
        let cl = matmul::matmul(g, &mt, &l.sel)?;
        let pl = matmul::matmul(g, &mt, &l.probs)?;
        c = Some(match c {
            Some(c) => broadcast::add(g, &c, &cl)?,
            None => cl,
        });
        p = Some(match p {
            Some(p) => broadcast::add(g, &p, &pl)?,
            None => pl,
        });
    }
    let (c, p) = (c.expect("one layer"), p.expect("one layer"));
    let dot = shape::reshape(g, &matmul::matmul_nt(g, &c, &p)?, &[1])?;
    Ok(broadcast::scale(g, &dot, (e as f64 / (rows * rows)) as f32)?)
}
