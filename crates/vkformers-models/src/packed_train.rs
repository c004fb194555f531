//! Training: a layer's q/k/v (and gate/up) parameters as row blocks of one packed f32 storage
//! (`Packer` places them with `Graph::parameter_rows` at load), so the training forward runs ONE
//! product for them and its backward one product for dX and one for dW
//! (`ops::packed_linear`), dW written straight into the packed gradient whose row blocks are
//! the parameters' own gradients. The optimizer, gradient clipping, checkpoints, saving and
//! LoRA see the separate names (the parameters are ordinary leaves that happen to share one
//! allocation). `VKFORMERS_TRAIN_PACKED=0` loads them apart: today's separate products.

use vkformers_tensor::ops::packed_linear::{packed_linear, Packed};
use vkformers_tensor::{Graph, Tensor};

use crate::error::Result;
use crate::packed::Pack;

/// Whether the loader packs trained q/k/v and gate/up parameters: on unless
/// `VKFORMERS_TRAIN_PACKED=0` (the A/B switch), and only with the inference packing on
/// (`VKFORMERS_FUSED_PROJ`).
pub(crate) fn enabled() -> bool {
    std::env::var("VKFORMERS_TRAIN_PACKED").map_or(true, |v| v != "0")
}

/// `x · W_packedᵀ (+ b_packed)` `[rows, Σ n_p]` of the trained pack `p` whose parts are
/// `params` (weights, and biases when packed), differentiable in x and every part.
pub(crate) fn product(
    g: &Graph<'_>,
    p: &Pack,
    params: &(Vec<Tensor>, Option<Vec<Tensor>>),
    x: &Tensor,
) -> Result<Tensor> {
    let (weights, biases) = params;
    let w = Packed { storage: &p.weight, parts: weights };
    let b = match (&p.bias, biases) {
        (Some(storage), Some(parts)) => Some(Packed { storage, parts }),
        _ => None,
    };
    Ok(packed_linear(g, x, w, b)?)
}
