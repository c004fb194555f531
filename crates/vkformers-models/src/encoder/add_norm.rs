//! The post-LN residual `norm(x + y)` of an encoder layer. In inference a LayerNorm runs fused
//! with the add (one dispatch; inside `Graph::inference` under autocast it also writes the
//! 16-bit copy the next products read): the same values as the add and the norm apart, which
//! training and every other norm still run.

use vkformers_tensor::ops::{broadcast, norm};
use vkformers_tensor::{Graph, Tensor};

use crate::decoder::{apply_norm, Weights};
use crate::error::Result;
use crate::spec::Norm;

/// `norm(x + y)` with the norm `which` named `name` (`x + y` alone without one).
pub(super) fn add_then_norm(
    g: &Graph<'_>,
    w: &Weights,
    which: &Option<Norm>,
    name: &str,
    (x, y): (&Tensor, &Tensor),
) -> Result<Tensor> {
    if let Some(Norm::Layer { eps, bias }) = which {
        let (gain, shift) =
            (w.opt(&format!("{name}.weight")), if *bias { w.opt(&format!("{name}.bias")) } else { None });
        if let Some(out) = norm::add_layer_norm_inference(g, (x, y), (gain, shift), *eps)? {
            return Ok(out);
        }
    }
    let sum = broadcast::add(g, x, y)?;
    match which {
        Some(n) => apply_norm(g, n, w, name, &sum),
        None => Ok(sum),
    }
}
