//! Fused (flash-style) attention with its fused backward.
//! q `[B, Tq, Hq, D]`, k `[B, Tk, Hkv, D]` and v `[B, Tk, Hkv, Dv]` (GQA: Hq a multiple of Hkv;
//! Dv != D for multi-head latent attention) -> o `[B, Tq, Hq, Dv]`,
//! `o = softmax(scale · q kᵀ (softcapped) + ALiBi + masks) · v`; the row log-sum-exp is saved
//! for the backward, which recomputes the probabilities tile by tile. Learned sinks `[Hq]` (a
//! per-head logit in every row's softmax denominator, with no value) get their gradient too.

use vkformers_kernels::attention::{self as k, Grads, Qkv, Saved, Shape};
use vkformers_kernels::matmul::gemv::gemv_applies;
use vkformers_vk::VkError;

use super::cast::{autocast_copy, narrow};
use crate::{DType, Graph, Result, Tensor};

/// Attention options (see `vkformers_kernels::attention::Options`).
#[derive(Clone, Debug)]
pub struct AttnOptions {
    /// Score scale; `None` means `1/sqrt(D)`.
    pub scale: Option<f32>,
    /// Query i (at absolute position i + Tk - Tq) sees keys j <= its position.
    pub causal: bool,
    /// Sliding window W (0 = off): key j visible when qpos - j < W.
    pub window: u32,
    /// Logit softcap c (0 = off): s -> c·tanh(s/c).
    pub softcap: f32,
    /// Key padding mask `[B, Tk]` int32 (1 keep, 0 masked).
    pub kmask: Option<Tensor>,
    /// ALiBi slopes `[Hq]` f32.
    pub alibi: Option<Tensor>,
    /// Learned sink logits `[Hq]` (any storage type; read as f32): differentiable.
    pub sinks: Option<Tensor>,
}

impl Default for AttnOptions {
    fn default() -> Self {
        AttnOptions { scale: None, causal: true, window: 0, softcap: 0.0, kmask: None, alibi: None, sinks: None }
    }
}

fn shape_of(q: &Tensor, kt: &Tensor, v: &Tensor) -> Result<Shape> {
    let (qs, ks, vs) = (q.shape(), kt.shape(), v.shape());
    if qs.len() != 4 || ks.len() != 4 || vs.len() != 4 || vs[..3] != ks[..3] {
        return Err(VkError::Kernel {
            kernel: "attention".into(),
            message: format!("q {qs:?}, k {ks:?} must be [B, T, H, D] and v {vs:?} [B, Tk, Hkv, Dv]"),
        });
    }
    Ok(Shape {
        batch: qs[0] as u32,
        tq: qs[1] as u32,
        hq: qs[2] as u32,
        d: qs[3] as u32,
        tk: ks[1] as u32,
        hkv: ks[2] as u32,
        dv: vs[3] as u32,
    })
}

/// `sinks` is the f32 copy of the options' sinks (the kernels read f32).
fn kernel_options<'a>(o: &'a AttnOptions, sinks: Option<&'a Tensor>, d: u32, chunk: u32) -> k::Options<'a> {
    let mut ko = k::Options::new(d);
    ko.chunk = chunk;
    if let Some(s) = o.scale {
        ko.scale = s;
    }
    ko.causal = o.causal;
    ko.window = o.window;
    ko.softcap = o.softcap;
    ko.kmask = o.kmask.as_ref().map(|t| t.view());
    ko.alibi = o.alibi.as_ref().map(|t| t.view());
    ko.sinks = sinks.map(|t| t.view());
    ko
}

/// The storage type attention runs in: the autocast type, else that of q, k and v (which
/// must agree).
fn attention_dtype(g: &Graph<'_>, q: &Tensor, kt: &Tensor, v: &Tensor) -> Result<DType> {
    let dt = g.autocast().unwrap_or(q.dtype());
    for t in [q, kt, v] {
        if t.dtype() != dt && t.dtype() != DType::F32 {
            return Err(VkError::Kernel {
                kernel: "attention".into(),
                message: format!(
                    "q {:?} {:?}, k {:?} {:?}, v {:?} {:?}: mixed storage types",
                    q.shape(),
                    q.dtype(),
                    kt.shape(),
                    kt.dtype(),
                    v.shape(),
                    v.dtype()
                ),
            });
        }
    }
    Ok(dt)
}

/// True when attention in `dt` runs on the cooperative-matrix-2 kernels (16-bit storage on a
/// device that has them); `VKFORMERS_ATTENTION=fma` keeps the FMA kernels, for comparisons.
/// A value head dim other than the q/k one (MLA) keeps the FMA kernels too.
fn on_tensor_cores(caps: &vkformers_vk::Caps, dt: DType, s: &Shape) -> bool {
    static FORCE_FMA: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let fma = *FORCE_FMA.get_or_init(|| std::env::var("VKFORMERS_ATTENTION").is_ok_and(|v| v == "fma"));
    dt != DType::F32 && !fma && s.dv == s.d && k::coopmat2::supported(caps, dt, s.d)
}

/// Fused attention; gradients flow to q, k, v and the sinks. Under autocast f32 q, k, v are read as
/// 16-bit copies and o is returned in f32 (the kernels keep f32 softmax statistics).
pub fn attention(g: &Graph<'_>, q: &Tensor, kt: &Tensor, v: &Tensor, opts: &AttnOptions) -> Result<Tensor> {
    attention_chunked(g, q, kt, v, opts, 0)
}

/// [`attention`] for the product that reads o next (an encoder's o_proj). In inference under
/// autocast, on rows a GEMM multiplies, that product reads o's 16-bit copy: o is returned as
/// the 16-bit output the kernel writes (no f32 o widened from it, nor a cast back), the same
/// values the product would read; else [`attention`].
pub fn attention_for_product(g: &Graph<'_>, q: &Tensor, kt: &Tensor, v: &Tensor, opts: &AttnOptions) -> Result<Tensor> {
    let o16 = o16_for_product(g, q, kt, v, false)?;
    attention_typed(g, (q, kt, v), opts, 0, o16)
}

/// [`attention_chunked`] for the product that reads o next and nothing else (a decoder's o_proj
/// with no LoRA term or norm between): as [`attention_for_product`], and in training under
/// autocast too, o is the 16-bit output the kernel writes (the tape carries it; the product
/// reads it as it read o's kept copy, and its backward hands dO over in 16 bits, which this
/// backward reads with no cast). Same values, bit for bit; `VKFORMERS_ATTN_CASTS=1` or
/// `VKFORMERS_NO_TWINS=1` keep the f32 o in training.
pub fn attention_chunked_for_product(
    g: &Graph<'_>,
    (q, kt, v): (&Tensor, &Tensor, &Tensor),
    opts: &AttnOptions,
    chunk: u32,
) -> Result<Tensor> {
    let o16 = o16_for_product(g, q, kt, v, super::cast::half_grads_on(g))?;
    attention_typed(g, (q, kt, v), opts, chunk, o16)
}

/// Whether attention returns its 16-bit o for the product reading it: under autocast, on rows
/// a GEMM multiplies (the GEMV of a few rows reads f32), without a tape or with `taped`.
fn o16_for_product(g: &Graph<'_>, q: &Tensor, kt: &Tensor, v: &Tensor, taped: bool) -> Result<bool> {
    let dt = attention_dtype(g, q, kt, v)?;
    let rows = q.shape().first().copied().unwrap_or(0) * q.shape().get(1).copied().unwrap_or(0);
    let gemm_rows = u32::try_from(rows).is_ok_and(|m| !gemv_applies(m, g.ctx().caps()));
    Ok(dt != DType::F32 && (!g.grad_enabled() || taped) && gemm_rows)
}

/// [`attention`] with Llama 4's chunked mask on top of `opts`: query position p sees key j only
/// when `floor(j / chunk) == floor(p / chunk)` (`chunk` 0 = off).
pub fn attention_chunked(
    g: &Graph<'_>,
    q: &Tensor,
    kt: &Tensor,
    v: &Tensor,
    opts: &AttnOptions,
    chunk: u32,
) -> Result<Tensor> {
    attention_typed(g, (q, kt, v), opts, chunk, false)
}

/// The attention of [`attention_chunked`]; with `o16_out`, o in the attention's 16-bit type
/// whatever q's (see [`attention_for_product`]).
fn attention_typed(
    g: &Graph<'_>,
    (q, kt, v): (&Tensor, &Tensor, &Tensor),
    opts: &AttnOptions,
    chunk: u32,
    o16_out: bool,
) -> Result<Tensor> {
    let s = shape_of(q, kt, v)?;
    // o [B, Tq, Hq, Dv]
    let o_shape = [q.shape()[0], q.shape()[1], q.shape()[2], v.shape()[3]];
    let dt = attention_dtype(g, q, kt, v)?;
    let (q16, k16, v16) = (autocast_copy(g, q, dt)?, autocast_copy(g, kt, dt)?, autocast_copy(g, v, dt)?);
    let out_dtype = if q.dtype() == DType::F32 && !o16_out { DType::F32 } else { dt };
    let o = g.output_as(&o_shape, out_dtype, &[q, kt, v])?;
    let o16 = if out_dtype == dt { o.clone() } else { g.empty_as(&o_shape, dt)? };
    let lse = g.empty(&[s.batch as usize, s.hq as usize, s.tq as usize])?;
    // A tape cast, so a 16-bit sinks parameter gets its gradient back in its own type.
    let sinks = opts.sinks.as_ref().map(|t| super::cast::cast(g, t, DType::F32)).transpose()?;
    g.record(|rec| {
        let mut ko = kernel_options(opts, sinks.as_ref(), s.d, chunk);
        ko.dtype = dt;
        let (qkv, saved) =
            (Qkv { q: q16.view(), k: k16.view(), v: v16.view() }, Saved { o: o16.view(), lse: lse.view() });
        if on_tensor_cores(rec.caps(), dt, &s) {
            k::coopmat2::forward_cm2(rec, &qkv, &saved, &s, &ko)?;
        } else {
            k::forward(rec, &qkv, &saved, &s, &ko)?;
        }
        if out_dtype != dt {
            vkformers_kernels::dtype::cast(rec, o16.view(), dt, o.view(), out_dtype)?;
        }
        Ok(())
    })?;
    if out_dtype != dt {
        // o is o16 widened, so o16 is exactly o's 16-bit copy: the next product (o_proj)
        // reads it instead of casting o back.
        g.keep_cast(&o, &o16);
    }
    let in_types = [q.dtype(), kt.dtype(), v.dtype()];
    // Inputs whose producer's backward reads dq / dk / dv in 16 bits (RoPE, a product): those
    // are handed over as the kernels write them, with no widening cast.
    let half_in = [q, kt, v].map(|t| g.takes_half_grad(t));
    let opts = opts.clone();
    let os = o16;
    let mut inputs = vec![q.clone(), kt.clone(), v.clone()];
    inputs.extend(sinks.clone());
    g.push_node(
        &o,
        inputs,
        Box::new(move |g, d_o| {
            let do16 = narrow(g, d_o, dt)?;
            let dq = g.empty_as(q16.shape(), dt)?;
            let dk = g.empty_as(k16.shape(), dt)?;
            let dv = g.empty_as(v16.shape(), dt)?;
            let delta = g.empty(lse.shape())?;
            // GQA partial sums of dk/dv on the tensor-core path (none elsewhere).
            let scratch_len = if on_tensor_cores(g.ctx().caps(), dt, &s) {
                k::coopmat2::backward_scratch_len(&s, dt)? as usize
            } else {
                0
            };
            let scratch = (scratch_len > 0).then(|| g.empty(&[scratch_len])).transpose()?;
            let dsinks = sinks.as_ref().map(|t| g.empty(t.shape())).transpose()?;
            g.record(|rec| {
                let mut ko = kernel_options(&opts, sinks.as_ref(), s.d, chunk);
                ko.dtype = dt;
                let qkv = Qkv { q: q16.view(), k: k16.view(), v: v16.view() };
                let saved = Saved { o: os.view(), lse: lse.view() };
                let grads = Grads { dq: dq.view(), dk: dk.view(), dv: dv.view(), delta: delta.view() };
                if on_tensor_cores(rec.caps(), dt, &s) {
                    let scratch = scratch.as_ref().map(|t| t.view());
                    k::coopmat2::backward_cm2(rec, &qkv, &saved, do16.view(), &grads, scratch, &s, &ko)?;
                } else {
                    k::backward(rec, &qkv, &saved, do16.view(), &grads, &s, &ko)?;
                }
                match (&sinks, &dsinks) {
                    (Some(sk), Some(ds)) => {
                        k::sinks::backward(rec, (lse.view(), delta.view()), sk.view(), ds.view(), &s)
                    }
                    _ => Ok(()),
                }
            })?;
            let to = |t: Tensor, i: usize| -> Result<Tensor> {
                if in_types[i] == dt || half_in[i] {
                    Ok(t)
                } else {
                    let wide = g.empty(t.shape())?;
                    g.record(|rec| vkformers_kernels::dtype::cast(rec, t.view(), dt, wide.view(), in_types[i]))?;
                    if i == 2 {
                        // dv16 is exactly dv's 16-bit copy: v_proj's backward products read it
                        // instead of casting dv back. (dq and dk go through RoPE's backward
                        // first, so their copies would only be held, never read.)
                        g.keep_grad_cast(&wide, &t);
                    }
                    Ok(wide)
                }
            };
            let mut grads = vec![Some(to(dq, 0)?), Some(to(dk, 1)?), Some(to(dv, 2)?)];
            if dsinks.is_some() {
                grads.push(dsinks);
            }
            Ok(grads)
        }),
    );
    Ok(o)
}
