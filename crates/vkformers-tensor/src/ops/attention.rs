//! Fused (flash-style) attention with its fused backward.
//! q `[B, Tq, Hq, D]`, k and v `[B, Tk, Hkv, D]` (GQA: Hq a multiple of Hkv) -> o `[B, Tq, Hq, D]`,
//! `o = softmax(scale · q kᵀ (softcapped) + ALiBi + masks) · v`; the row log-sum-exp is saved
//! for the backward, which recomputes the probabilities tile by tile.

use vkformers_kernels::attention::{self as k, Grads, Qkv, Saved, Shape};
use vkformers_vk::VkError;

use crate::{Graph, Result, Tensor};

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
}

impl Default for AttnOptions {
    fn default() -> Self {
        AttnOptions { scale: None, causal: true, window: 0, softcap: 0.0, kmask: None, alibi: None }
    }
}

fn shape_of(q: &Tensor, kt: &Tensor) -> Result<Shape> {
    let (qs, ks) = (q.shape(), kt.shape());
    if qs.len() != 4 || ks.len() != 4 {
        return Err(VkError::Kernel {
            kernel: "attention".into(),
            message: format!("q {qs:?} and k {ks:?} must be [B, T, H, D]"),
        });
    }
    Ok(Shape {
        batch: qs[0] as u32,
        tq: qs[1] as u32,
        hq: qs[2] as u32,
        d: qs[3] as u32,
        tk: ks[1] as u32,
        hkv: ks[2] as u32,
    })
}

fn kernel_options<'a>(o: &'a AttnOptions, d: u32) -> k::Options<'a> {
    let mut ko = k::Options::new(d);
    if let Some(s) = o.scale {
        ko.scale = s;
    }
    ko.causal = o.causal;
    ko.window = o.window;
    ko.softcap = o.softcap;
    ko.kmask = o.kmask.as_ref().map(|t| t.view());
    ko.alibi = o.alibi.as_ref().map(|t| t.view());
    ko
}

/// Fused attention; gradients flow to q, k and v.
pub fn attention(g: &Graph<'_>, q: &Tensor, kt: &Tensor, v: &Tensor, opts: &AttnOptions) -> Result<Tensor> {
    let s = shape_of(q, kt)?;
    let o = g.output(q.shape(), &[q, kt, v])?;
    let lse = g.empty(&[s.batch as usize, s.hq as usize, s.tq as usize])?;
    g.record(|rec| {
        k::forward(
            rec,
            &Qkv { q: q.view(), k: kt.view(), v: v.view() },
            &Saved { o: o.view(), lse: lse.view() },
            &s,
            &kernel_options(opts, s.d),
        )
    })?;
    let (qs, ks, vs, os, opts) = (q.clone(), kt.clone(), v.clone(), o.clone(), opts.clone());
    g.push_node(
        &o,
        vec![q.clone(), kt.clone(), v.clone()],
        Box::new(move |g, d_o| {
            let dq = g.empty(qs.shape())?;
            let dk = g.empty(ks.shape())?;
            let dv = g.empty(vs.shape())?;
            let delta = g.empty(lse.shape())?;
            g.record(|rec| {
                k::backward(
                    rec,
                    &Qkv { q: qs.view(), k: ks.view(), v: vs.view() },
                    &Saved { o: os.view(), lse: lse.view() },
                    d_o.view(),
                    &Grads { dq: dq.view(), dk: dk.view(), dv: dv.view(), delta: delta.view() },
                    &s,
                    &kernel_options(&opts, s.d),
                )
            })?;
            Ok(vec![Some(dq), Some(dk), Some(dv)])
        }),
    );
    Ok(o)
}
