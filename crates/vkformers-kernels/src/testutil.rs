//! Helpers shared by kernel tests: a seeded RNG, f64 comparisons with per-dtype tolerances,
//! and central finite differences to check reference backward passes.
//! Public (but hidden from docs) so the integration tests of every crate can use it.

/// SplitMix64: tiny, seeded, reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [-scale, scale), as f32.
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| ((self.uniform() * 2.0 - 1.0) * f64::from(scale)) as f32).collect()
    }

    /// Integer in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Widens f32 data for the f64 references.
pub fn f64s(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v)).collect()
}

/// Tolerance: `|got - want| <= abs + rel * |want|` elementwise.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub abs: f64,
    pub rel: f64,
}

/// Per-dtype tolerances of GPU results against the f64 reference. f32 kernels accumulate in
/// f32 (error grows like sqrt(K) * 2^-24); f16/bf16 round their inputs to 11/8 mantissa bits.
pub const TOL_F32: Tol = Tol { abs: 1e-5, rel: 1e-4 };
pub const TOL_F16: Tol = Tol { abs: 2e-3, rel: 2e-3 };
pub const TOL_BF16: Tol = Tol { abs: 2e-2, rel: 1.6e-2 };

/// Panics with the worst element when `got` and `want` differ beyond `tol`.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], tol: Tol) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(g) - w).abs();
        let excess = err - (tol.abs + tol.rel * w.abs());
        if (excess > 0.0 || excess.is_nan()) && worst.is_none_or(|(_, e)| excess > e) {
            worst = Some((i, excess));
        }
    }
    if let Some((i, _)) = worst {
        panic!("{what}: element {i}: got {} want {} (tol abs {} rel {})", got[i], want[i], tol.abs, tol.rel);
    }
}

/// ‖got − want‖ / ‖want‖ (0 when both are zero).
pub fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(g, w)| (g - w).powi(2)).sum::<f64>().sqrt();
    let den: f64 = want.iter().map(|w| w * w).sum::<f64>().sqrt();
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Central finite differences of a scalar function: d f / d x_i ≈ (f(x+h e_i) − f(x−h e_i)) / 2h.
pub fn finite_diff(f: impl Fn(&[f64]) -> f64, x: &[f64], h: f64) -> Vec<f64> {
    let mut xp = x.to_vec();
    (0..x.len())
        .map(|i| {
            let orig = xp[i];
            xp[i] = orig + h;
            let up = f(&xp);
            xp[i] = orig - h;
            let down = f(&xp);
            xp[i] = orig;
            (up - down) / (2.0 * h)
        })
        .collect()
}

/// Checks an analytic gradient of the f64 reference against finite differences
/// (relative L2 error ≤ 1e-6; f64 central differences with h = 1e-5 are accurate to ~1e-9).
pub fn assert_grad_matches_fd(what: &str, f: impl Fn(&[f64]) -> f64, x: &[f64], analytic: &[f64]) {
    let fd = finite_diff(f, x, 1e-5);
    let err = rel_l2(analytic, &fd);
    assert!(err <= 1e-6, "{what}: analytic gradient vs finite differences: rel L2 error {err:e}");
}

/// Panics at the first element of `got` whose bits differ from `want`'s (any NaN equals any
/// NaN: a pool row no one wrote stays a NaN pattern).
pub fn same_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{what}: element {i}: {g} != {w}");
    }
}

/// Panics unless `e` is a typed kernel error of `kernel` whose text contains `text`.
pub fn assert_kernel_error(e: &vkformers_vk::VkError, kernel: &str, text: &str) {
    assert!(matches!(e, vkformers_vk::VkError::Kernel { kernel: k, .. } if k == kernel), "{e}");
    assert!(e.to_string().contains(text), "{e}");
}

/// Host side of tests of 16-bit storage variants: round, upload, download and tolerate data in
/// a `DType`.
pub mod storage {
    use vkformers_vk::{Buffer, BufferView, Context, Result};

    use super::{Rng, Tol, TOL_BF16, TOL_F16, TOL_F32};
    use crate::dtype::DType;

    /// `xs` rounded to the storage type (to nearest even).
    pub fn round(dt: DType, xs: &[f32]) -> Vec<f32> {
        match dt {
            DType::F32 => xs.to_vec(),
            DType::F16 => xs.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
            DType::BF16 => xs.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect(),
        }
    }

    /// The host's rounding of `xs` to the 16-bit `dt` (to nearest even), as bit patterns (bf16
    /// for any other `dt`).
    pub fn bits16(dt: DType, xs: &[f32]) -> Vec<u16> {
        match dt {
            DType::F16 => xs.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect(),
            _ => xs.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect(),
        }
    }

    /// The f32 value of the 16-bit pattern `b` of `dt` (exact; bf16 for any other `dt`).
    pub fn widen16(dt: DType, b: u16) -> f32 {
        match dt {
            DType::F16 => half::f16::from_bits(b).to_f32(),
            _ => half::bf16::from_bits(b).to_f32(),
        }
    }

    /// `xs` stored as `dt` in a buffer of whole 4-byte words (16-bit operands are read as
    /// words: an odd count gets a zero pad).
    pub fn upload_words(ctx: &Context, dt: DType, xs: &[f32], what: &str) -> Result<Buffer> {
        if dt == DType::F32 {
            return ctx.buffer_from(xs, what);
        }
        let mut bits = bits16(dt, xs);
        bits.resize(bits.len().next_multiple_of(2), 0);
        ctx.buffer_from(&bits, what)
    }

    /// `xs` stored in a buffer as the storage type; `view()` covers exactly those elements (the
    /// buffer itself may be longer: buffers hold at least 4 bytes).
    pub struct Stored {
        pub buf: Buffer,
        pub len: u64,
    }

    impl Stored {
        pub fn view(&self) -> BufferView<'_> {
            self.buf.slice(0, self.len)
        }
    }

    pub fn upload(ctx: &Context, dt: DType, xs: &[f32], what: &str) -> Result<Stored> {
        let buf = match dt {
            DType::F32 => ctx.buffer_from(xs, what)?,
            DType::F16 => {
                ctx.buffer_from(&xs.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect::<Vec<_>>(), what)?
            }
            DType::BF16 => {
                ctx.buffer_from(&xs.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect::<Vec<_>>(), what)?
            }
        };
        Ok(Stored { buf, len: xs.len() as u64 * dt.bytes() })
    }

    /// The elements of a view in the storage type, widened to f32.
    pub fn download(ctx: &Context, dt: DType, v: BufferView<'_>) -> Result<Vec<f32>> {
        Ok(match dt {
            DType::F32 => ctx.read_vec(v)?,
            DType::F16 => ctx.read_vec::<u16>(v)?.into_iter().map(|b| half::f16::from_bits(b).to_f32()).collect(),
            DType::BF16 => ctx.read_vec::<u16>(v)?.into_iter().map(|b| half::bf16::from_bits(b).to_f32()).collect(),
        })
    }

    pub fn tol(dt: DType) -> Tol {
        match dt {
            DType::F32 => TOL_F32,
            DType::F16 => TOL_F16,
            DType::BF16 => TOL_BF16,
        }
    }

    /// An uninitialised device tensor of `n` values of `dt` (kernel outputs).
    pub fn alloc(ctx: &Context, dt: DType, n: usize, what: &str) -> Result<Stored> {
        let len = n as u64 * dt.bytes();
        Ok(Stored { buf: ctx.buffer(len, what)?, len })
    }

    /// A stored tensor read back, widened to f32.
    pub fn read(ctx: &Context, dt: DType, t: &Stored) -> Result<Vec<f32>> {
        download(ctx, dt, t.view())
    }

    /// Runs `check` for f16 and then bf16 storage on every device that has it (saying so where
    /// it does not), with one RNG seeded `seed` per device: the 16-bit half of a kernel's tests.
    pub fn on_halves(test: &str, seed: u64, check: impl Fn(&Context, &mut Rng, DType) -> Result<()>) {
        vkformers_vk::testing::on_every_device(test, |ctx| {
            let mut rng = Rng::new(seed);
            for dt in [DType::F16, DType::BF16] {
                if !unsupported(ctx, dt, test) {
                    check(ctx, &mut rng, dt)?;
                }
            }
            Ok(())
        });
    }

    /// Whether the device can run the variant of `dt` (says so when it cannot).
    pub fn supported(ctx: &Context, dt: DType, what: &str) -> bool {
        !unsupported(ctx, dt, what)
    }

    /// Whether the device lacks 16-bit storage for `dt` (then the test of `dt` is skipped).
    pub fn unsupported(ctx: &Context, dt: DType, what: &str) -> bool {
        let skip = dt != DType::F32 && !ctx.caps().fp16;
        if skip {
            eprintln!("{what}: skipping {dt:?}: no 16-bit storage on {}", ctx.caps().name);
        }
        skip
    }
}

pub mod dense_grads;
pub mod masks;
pub mod paged;
pub mod twins;
