//! Host side of the tests of the `twin` launchers (kernels that also write their f32 output as
//! a 16-bit copy, or write that copy only): twin views and the RoPE inputs they draw.

use vkformers_vk::{Buffer, BufferView, Context, Result};

use super::Rng;
use crate::dtype::{DType, Twin};
use crate::rope::{reference, Rope, RopeLayout};

/// The RMSNorm cases of the twin tests: `(rows, dim)` and whether a weight is read.
pub const RMS_CASES: [((usize, usize), bool); 4] = [((1, 1), true), ((3, 7), false), ((5, 33), true), ((2, 300), true)];

/// The RoPE shapes of the twin tests: `(batch, seq, heads, head_dim, rotary_dim)`.
pub const ROPE_SHAPES: [(u32, u32, u32, u32, u32); 3] = [(1, 1, 1, 2, 2), (2, 3, 3, 7, 4), (1, 5, 2, 10, 10)];

/// The first `n` 16-bit values of `b` as a twin of `dt`.
pub fn twin(b: &Buffer, n: usize, dt: DType) -> Twin<'_> {
    Twin { view: b.slice(0, n as u64 * 2), dtype: dt }
}

/// A RoPE launch of f32 x over random positions (below 4096) and the default inverse
/// frequencies (base 10⁴), on the host and on the device.
pub struct RopeInputs {
    pub p: Rope,
    /// x `[rows, head_dim]`, uniform in [-2, 2).
    pub xs: Vec<f32>,
    /// One position per token (`batch · seq`).
    pub pos_v: Vec<i32>,
    /// `rotary_dim / 2` inverse frequencies.
    pub inv_v: Vec<f32>,
    pub x: Buffer,
    pub pos: Buffer,
    pub inv: Buffer,
}

impl RopeInputs {
    /// Draws x, then the positions, of `(batch, seq, heads, head_dim, rotary_dim)`.
    pub fn draw(
        ctx: &Context,
        rng: &mut Rng,
        (b, t, h, dh, r): (u32, u32, u32, u32, u32),
        (layout, mscale): (RopeLayout, f32),
    ) -> Result<Self> {
        let p = Rope { batch: b, seq: t, heads: h, head_dim: dh, rotary_dim: r, layout, mscale, dtype: DType::F32 };
        let xs = rng.vec(p.rows() as usize * dh as usize, 2.0);
        let pos_v: Vec<i32> = (0..(b * t) as usize).map(|_| rng.below(4096) as i32).collect();
        let inv_v = reference::default_inv_freq(r, 10_000.0);
        let (x, pos, inv) =
            (ctx.buffer_from(&xs, "x")?, ctx.buffer_from(&pos_v, "pos")?, ctx.buffer_from(&inv_v, "inv")?);
        Ok(RopeInputs { p, xs, pos_v, inv_v, x, pos, inv })
    }

    /// Values of x (and of the output).
    pub fn n(&self) -> usize {
        self.xs.len()
    }

    /// x, positions and inverse frequencies, as the launchers take them.
    pub fn views(&self) -> (BufferView<'_>, BufferView<'_>, BufferView<'_>) {
        (self.x.view(), self.pos.view(), self.inv.view())
    }
}

/// A GLU's gate, up and upstream gradient of `n` values each (uniform in ±3, ±2, ±1), drawn in
/// that order.
pub fn glu_values(rng: &mut Rng, n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    (rng.vec(n, 3.0), rng.vec(n, 2.0), rng.vec(n, 1.0))
}

/// [`glu_values`] on the host and as f32 device buffers.
pub struct GluInputs {
    pub gs: Vec<f32>,
    pub us: Vec<f32>,
    pub ds: Vec<f32>,
    pub gate: Buffer,
    pub up: Buffer,
    pub dout: Buffer,
}

impl GluInputs {
    pub fn draw(ctx: &Context, rng: &mut Rng, n: usize) -> Result<Self> {
        let (gs, us, ds) = glu_values(rng, n);
        let (gate, up, dout) =
            (ctx.buffer_from(&gs, "gate")?, ctx.buffer_from(&us, "up")?, ctx.buffer_from(&ds, "dout")?);
        Ok(GluInputs { gs, us, ds, gate, up, dout })
    }
}
