//! A residual add fused with the LayerNorm after it, for inference in post-LN encoders:
//! `y = LayerNorm(x + r)` (the sum itself is not stored), bit for bit the add then
//! [`super::layer_norm_forward`] in f32, with optionally the 16-bit copy of y the next products
//! read. One dispatch instead of the add, the norm and the cast.

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use super::{affine_mode, check_views, kname, row_groups, LayerNorm};
use crate::code;
use crate::code::NormLayerForwardAddPush;
use crate::dtype::{DType, Twin};
use crate::launch::{dispatch, err_named as err};

/// `y = LayerNorm(x + r)` over the last dim (`p.dtype` must be f32: x, r, w, b, y are f32),
/// with `w`, `b` as [`super::layer_norm_forward`]; `twin`, when given, receives y in its 16-bit
/// type. No mean/rstd are written: there is no backward.
pub fn add_layer_norm_forward(
    rec: &mut Recorder,
    p: &LayerNorm,
    (x, r): (BufferView<'_>, BufferView<'_>),
    (w, b): (Option<BufferView<'_>>, Option<BufferView<'_>>),
    y: BufferView<'_>,
    twin: Option<Twin<'_>>,
) -> Result<()> {
    let k = match twin.as_ref().map(|t| t.dtype) {
        None => &code::NORM_LAYER_FORWARD_ADD_F32,
        Some(DType::F16) => &code::NORM_LAYER_FORWARD_ADD_TWIN_F16,
        Some(DType::BF16) => &code::NORM_LAYER_FORWARD_ADD_TWIN_BF16,
        Some(DType::F32) => return Err(err("norm/layer_forward_add", "the twin must be f16 or bf16".into())),
    };
    let name = kname(k);
    if p.dtype != DType::F32 {
        return Err(err(name, format!("x, r, y must be f32, not {:?}", p.dtype)));
    }
    let tensors = [("x", &x), ("r", &r), ("y", &y)];
    check_views(name, (p.rows, p.dim, DType::F32), (&tensors, &[]), &[("w", w.as_ref()), ("b", b.as_ref())])?;
    let affine = affine_mode(name, w.is_some(), b.is_some())?;
    if let Some(t) = &twin {
        t.code(name, u64::from(p.rows) * u64::from(p.dim))?;
        crate::launch::check_storage(rec, k, t.dtype)?;
    }
    let params = NormLayerForwardAddPush { rows: p.rows, D: p.dim, eps: p.eps, affine };
    let twin_view = twin.map_or(y, |t| t.view);
    let args = [read(x), read(r), read(w.unwrap_or(x)), read(b.unwrap_or(x)), write(y), write(twin_view)];
    dispatch(rec, k, &[], &args, &params, row_groups(p.rows))
}
