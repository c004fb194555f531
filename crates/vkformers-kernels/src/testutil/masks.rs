//! The score options every attention kernel test varies (causal, window, chunk, softcap, ALiBi,
//! learned sinks), their builders, and the values and options they stand for: one definition for
//! the fused, cooperative-matrix, paged-decode and latent-decode tests.

use vkformers_vk::BufferView;

use crate::attention::decode::DecodeOptions;
use crate::attention::{self, reference};
use crate::dtype::DType;

/// A case's masks and score transforms; `Default` is none of them (not causal).
#[derive(Clone, Debug, Default)]
pub struct Masks {
    pub causal: bool,
    /// Sliding window W (0 = off).
    pub window: usize,
    /// Chunked attention C, Llama 4 (0 = off).
    pub chunk: usize,
    /// Logit softcap c (0 = off).
    pub softcap: f64,
    /// ALiBi with [`alibi_slopes`].
    pub alibi: bool,
    /// Learned sinks with [`sink_logits`].
    pub sinks: bool,
}

/// ALiBi slopes 2^(-8 (h+1) / Hq), the usual geometric sequence, rounded to the f32 the kernels
/// read (the references widen these same values).
pub fn alibi_slopes(hq: usize) -> Vec<f32> {
    (0..hq).map(|h| 2f64.powf(-8.0 * (h as f64 + 1.0) / hq as f64) as f32).collect()
}

/// Learned sink logits, exact in f32: from below every score to above most, so the sink takes
/// from nothing to most of a row's weight.
pub fn sink_logits(hq: usize) -> Vec<f32> {
    (0..hq).map(|h| [-3.0, 0.75, 2.5, -0.25][h % 4]).collect()
}

/// The test-case builders of [`Masks`] for any case that holds one.
pub trait WithMasks: Sized {
    fn masks_mut(&mut self) -> &mut Masks;

    fn causal(mut self) -> Self {
        self.masks_mut().causal = true;
        self
    }

    fn not_causal(mut self) -> Self {
        self.masks_mut().causal = false;
        self
    }

    fn window(mut self, w: usize) -> Self {
        self.masks_mut().window = w;
        self
    }

    fn chunk(mut self, c: usize) -> Self {
        self.masks_mut().chunk = c;
        self
    }

    fn softcap(mut self, c: f64) -> Self {
        self.masks_mut().softcap = c;
        self
    }

    fn alibi(mut self) -> Self {
        self.masks_mut().alibi = true;
        self
    }

    fn sinks(mut self) -> Self {
        self.masks_mut().sinks = true;
        self
    }
}

/// A case's ALiBi slopes and sink logits as the references read them (f64 of the f32 values the
/// kernels get), `None` where the case has none.
pub struct Widened {
    pub slopes: Option<Vec<f64>>,
    pub sinks: Option<Vec<f64>>,
}

impl Masks {
    /// [`alibi_slopes`] when ALiBi is on.
    pub fn slopes(&self, hq: usize) -> Option<Vec<f32>> {
        self.alibi.then(|| alibi_slopes(hq))
    }

    /// [`sink_logits`] when sinks are on.
    pub fn sink_values(&self, hq: usize) -> Option<Vec<f32>> {
        self.sinks.then(|| sink_logits(hq))
    }

    pub fn widened(&self, hq: usize) -> Widened {
        let wide = |v: Vec<f32>| v.into_iter().map(f64::from).collect();
        Widened { slopes: self.slopes(hq).map(wide), sinks: self.sink_values(hq).map(wide) }
    }

    /// The f64 reference's options for these masks at `scale`, with `kmask` and the widened
    /// slopes and sinks of `w`.
    pub fn reference<'a>(&self, scale: f64, kmask: Option<&'a [i32]>, w: &'a Widened) -> reference::Options<'a> {
        reference::Options {
            scale,
            causal: self.causal,
            window: self.window,
            chunk: self.chunk,
            softcap: self.softcap,
            kmask,
            slopes: w.slopes.as_deref(),
            sinks: w.sinks.as_deref(),
        }
    }

    /// The fused attention kernels' options for these masks: head dim `d`'s scale, storage `dt`,
    /// the device copies of the key mask, slopes and sinks (read only when the case has them).
    pub fn fused<'a>(
        &self,
        d: usize,
        (kmask, slopes, sinks): (Option<BufferView<'a>>, Option<BufferView<'a>>, Option<BufferView<'a>>),
        dt: DType,
    ) -> attention::Options<'a> {
        attention::Options {
            scale: 1.0 / (d as f32).sqrt(),
            causal: self.causal,
            window: self.window as u32,
            chunk: self.chunk as u32,
            softcap: self.softcap as f32,
            kmask,
            alibi: if self.alibi { slopes } else { None },
            sinks: if self.sinks { sinks } else { None },
            dtype: dt,
        }
    }

    /// The paged-decode kernels' options for these masks: head dim `d`'s scale, pools of `dt`, q/o
    /// of `act`; `slopes` and `sinks` are device copies of [`Masks::slopes`] / [`Masks::sink_values`]
    /// (read only when the mask is on).
    pub fn decode<'a>(
        &self,
        d: u32,
        (slopes, sinks): (Option<BufferView<'a>>, Option<BufferView<'a>>),
        (dt, act): (DType, DType),
    ) -> DecodeOptions<'a> {
        let mut opt = DecodeOptions::new(d);
        opt.causal = self.causal;
        opt.window = self.window as u32;
        opt.chunk = self.chunk as u32;
        opt.softcap = self.softcap as f32;
        opt.alibi = if self.alibi { slopes } else { None };
        opt.sinks = if self.sinks { sinks } else { None };
        opt.dtype = dt;
        opt.act = Some(act);
        opt
    }
}

/// A case of the dense (non-paged) attention tests: a shape, its masks, an optional key mask
/// [B, Tk] and the magnitude of q and k.
#[derive(Clone, Debug)]
pub struct DenseCase {
    pub name: &'static str,
    pub shape: reference::Shape,
    pub masks: Masks,
    pub kmask: Option<Vec<i32>>,
    /// q and k uniform in [-amp, amp] (v in [-1, 1]).
    pub amp: f32,
}

impl WithMasks for DenseCase {
    fn masks_mut(&mut self) -> &mut Masks {
        &mut self.masks
    }
}

impl DenseCase {
    pub fn new(name: &'static str, shape: reference::Shape) -> Self {
        DenseCase { name, shape, masks: Masks::default(), kmask: None, amp: 1.0 }
    }

    pub fn amp(mut self, amp: f32) -> Self {
        self.amp = amp;
        self
    }

    /// Key padding: batch 0 right-padded by `right`, batch 1 (if any) left-padded by `left`.
    pub fn padding(mut self, right: usize, left: usize) -> Self {
        let (b, tk) = (self.shape.batch, self.shape.tk);
        let mut m = vec![1; b * tk];
        m[tk - right..tk].fill(0);
        if b > 1 {
            m[tk..tk + left].fill(0);
        }
        self.kmask = Some(m);
        self
    }

    /// The slopes and sinks the reference reads (f64 of the f32 values the kernels get).
    pub fn widened(&self) -> Widened {
        self.masks.widened(self.shape.hq)
    }

    /// The kernels' shape of the case.
    pub fn gpu_shape(&self) -> attention::Shape {
        let s = &self.shape;
        let u = |x: usize| x as u32;
        attention::Shape {
            batch: u(s.batch),
            tq: u(s.tq),
            tk: u(s.tk),
            hq: u(s.hq),
            hkv: u(s.hkv),
            d: u(s.d),
            dv: u(s.dv),
        }
    }

    /// The reference's options at scale 1/sqrt(D), slopes and sinks from `wide`.
    pub fn options<'a>(&'a self, wide: &'a Widened) -> reference::Options<'a> {
        self.masks.reference(1.0 / (self.shape.d as f64).sqrt(), self.kmask.as_deref(), wide)
    }
}

/// A shape with value head dim equal to the q/k one.
pub fn shape(batch: usize, tq: usize, tk: usize, hq: usize, hkv: usize, d: usize) -> reference::Shape {
    reference::Shape { batch, tq, tk, hq, hkv, d, dv: d }
}
