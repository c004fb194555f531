//! The tensor-core GEMM against an f64 reference, on every device that has it (the NVIDIA H200
//! here; lavapipe has no cooperative matrices, so there the test only checks that it is skipped
//! for the right reason); its 16-bit C (`c_half`) also bit for bit against the cast kernel's
//! rounding of the f32 C. Engines the launcher picks get every shape, layout and tuning; the
//! sweep-only ones a smoke set (`picked_by_launcher`).

use half::{bf16, f16};
use vkformers_kernels::dtype::{cast, DType};
use vkformers_kernels::gemm_coopmat::{choose_engine, gemm_coopmat, CoopGemm, Elem, Engine, Tuning};
use vkformers_kernels::testutil::storage::tol;
use vkformers_kernels::testutil::{assert_close, Rng, Tol};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, Context};

/// Rounds to the operand type and returns (device bytes, the rounded values as f64).
fn quantize(x: &[f32], elem: Elem) -> (Vec<u8>, Vec<f64>) {
    let mut bytes = Vec::with_capacity(x.len() * 2);
    let mut vals = Vec::with_capacity(x.len());
    for &v in x {
        let (bits, back) = match elem {
            Elem::F16 => (f16::from_f32(v).to_bits(), f16::from_f32(v).to_f64()),
            Elem::Bf16 => (bf16::from_f32(v).to_bits(), bf16::from_f32(v).to_f64()),
        };
        bytes.extend_from_slice(&bits.to_le_bytes());
        vals.push(back);
    }
    (bytes, vals)
}

/// f64 reference of the strided batched product, same conventions as the shader.
fn reference(d: &CoopGemm, a: &[f64], b: &[f64], bias: Option<&[f64]>, c0: &[f64]) -> Vec<f64> {
    let mut c = c0.to_vec();
    for bt in 0..d.batch as usize {
        for m in 0..d.m as usize {
            for n in 0..d.n as usize {
                let mut s = 0.0;
                for k in 0..d.k as usize {
                    let ai = d.a_off as usize
                        + bt * d.a_bstride as usize
                        + if d.trans_a { k * d.lda as usize + m } else { m * d.lda as usize + k };
                    let bi = d.b_off as usize
                        + bt * d.b_bstride as usize
                        + if d.trans_b { n * d.ldb as usize + k } else { k * d.ldb as usize + n };
                    s += a[ai] * b[bi];
                }
                let ci = d.c_off as usize + bt * d.c_bstride as usize + m * d.ldc as usize + n;
                let mut v = f64::from(d.alpha) * s + bias.map_or(0.0, |bb| bb[n]);
                if d.beta_one {
                    v += c0[ci];
                }
                c[ci] = v;
            }
        }
    }
    c
}

/// A and B of `d` (with their offsets and batch strides) drawn from `rng` (A first), uniform
/// in ±1 and rounded to the operand type: the device buffers and the rounded values.
struct Operands {
    a: Buffer,
    b: Buffer,
    a_vals: Vec<f64>,
    b_vals: Vec<f64>,
}

impl Operands {
    fn draw(ctx: &Context, rng: &mut Rng, d: &CoopGemm) -> vkformers_vk::Result<Self> {
        let a_len = if d.trans_a { d.k * d.lda } else { d.m * d.lda } as usize
            + (d.a_off + d.a_bstride * (d.batch - 1)) as usize;
        let b_len = if d.trans_b { d.n * d.ldb } else { d.k * d.ldb } as usize
            + (d.b_off + d.b_bstride * (d.batch - 1)) as usize;
        let (a_bytes, a_vals) = quantize(&rng.vec(a_len, 1.0), d.elem);
        let (b_bytes, b_vals) = quantize(&rng.vec(b_len, 1.0), d.elem);
        let a = ctx.buffer(a_bytes.len() as u64, "A")?;
        ctx.upload(&a, 0, &a_bytes)?;
        let b = ctx.buffer(b_bytes.len() as u64, "B")?;
        ctx.upload(&b, 0, &b_bytes)?;
        Ok(Operands { a, b, a_vals, b_vals })
    }
}

/// Values of C's buffer: C and its offset and batch strides.
fn c_len(d: &CoopGemm) -> usize {
    (d.m * d.ldc) as usize + (d.c_off + d.c_bstride * (d.batch - 1)) as usize
}

/// The (element type, engine) pairs this device runs (the KHR kernel wherever any
/// cooperative-matrix engine runs, with 32-wide subgroups; the cm2 kernels where cm2 is
/// chosen), saying which it skips.
fn engines_here(ctx: &Context) -> Vec<(Elem, Engine)> {
    let all = [Elem::F16, Elem::Bf16].into_iter().flat_map(|e| Engine::ALL.map(|g| (e, g)));
    all.filter(|&(elem, engine)| {
        let best = choose_engine(ctx.caps(), elem, 4096, 4096, 1);
        let available = match engine {
            e if e.is_khr() => best.is_some() && ctx.caps().subgroup_size == 32,
            _ => best.is_some_and(Engine::is_coopmat2),
        };
        if !available {
            eprintln!("{}: no {elem:?} {engine:?} GEMM here (skipped)", ctx.caps().name);
        }
        available
    })
    .collect()
}

/// Whether the launcher picks `engine` for some product on this device ([`choose_engine`] over a
/// skinny, a small and a full grid): those get every shape, layout and tuning below; the engines
/// only `vkformers bench gemm --engine` runs (the tile sweeps) a smoke set of two shapes in all
/// four layouts, since each of their pipelines costs NVIDIA's compiler about a second and the
/// whole matrix over all 13 engines ran past 200 s of an H200 call.
fn picked_by_launcher(ctx: &Context, elem: Elem, engine: Engine) -> bool {
    [(16, 4096), (256, 256), (4096, 4096)]
        .iter()
        .any(|&(m, n)| choose_engine(ctx.caps(), elem, m, n, 1) == Some(engine))
}

/// The shapes `engine` is tested on: all of `shapes`, or the smoke set's (see
/// [`picked_by_launcher`]): an odd one with edge blocks and an interior-only one.
fn shapes_for(ctx: &Context, (elem, engine): (Elem, Engine), shapes: &[(u32, u32, u32)]) -> Vec<(u32, u32, u32)> {
    if picked_by_launcher(ctx, elem, engine) {
        shapes.to_vec()
    } else {
        vec![(130, 67, 129), (256, 512, 128)]
    }
}

/// A dense `m x n x k` product on `engine` with A transposed or not (`ta`), B too (`tb`), and
/// padded leading dimensions (multiples of 4, the kernel's requirement; ldc odd).
fn padded(elem: Elem, engine: Engine, (m, n, k): (u32, u32, u32), (ta, tb): (bool, bool)) -> CoopGemm {
    let mut d = CoopGemm::dense(m, n, k, tb, elem);
    d.engine = engine;
    d.trans_a = ta;
    d.lda = (if ta { m } else { k }).next_multiple_of(8) + 8;
    d.ldb = (if tb { k } else { n }).next_multiple_of(8);
    d.ldc = n + 3;
    d
}

fn run_case(ctx: &Context, d: &CoopGemm, with_bias: bool, seed: u64) -> vkformers_vk::Result<()> {
    let mut rng = Rng::new(seed);
    let Operands { a, b, a_vals, b_vals } = Operands::draw(ctx, &mut rng, d)?;
    let c0 = rng.vec(c_len(d), 1.0);
    let bias = rng.vec(d.n as usize, 1.0);
    let c = ctx.buffer_from(&c0, "C")?;
    let bias_buf = ctx.buffer_from(&bias, "bias")?;
    let mut rec = ctx.recorder(false)?;
    gemm_coopmat(&mut rec, d, a.view(), b.view(), with_bias.then(|| bias_buf.view()), c.view())?;
    rec.submit()?;
    let got: Vec<f32> = ctx.read_vec(c.view())?;
    let bias64: Vec<f64> = bias.iter().map(|&v| f64::from(v)).collect();
    let c064: Vec<f64> = c0.iter().map(|&v| f64::from(v)).collect();
    let want = reference(d, &a_vals, &b_vals, with_bias.then_some(&bias64[..]), &c064);
    // Inputs are exact in the operand type, so only f32 accumulation error remains: ~sqrt(K)·2^-24.
    let tol = Tol { abs: 1e-5 * f64::from(d.k).sqrt(), rel: 1e-5 };
    assert_close(&format!("{d:?}"), &got, &want, tol);
    Ok(())
}

#[test]
fn coopmat_gemm_matches_reference() {
    on_every_device("coopmat gemm", |ctx| {
        // Every engine the device has.
        for (elem, engine) in engines_here(ctx) {
            let mut seed = 1;
            let shapes = [
                (1, 1, 1),
                (17, 13, 29),
                (130, 67, 129),
                (128, 128, 64),
                (257, 300, 100),
                (256, 512, 128),
                (300, 520, 320),
            ];
            for (m, n, k) in shapes_for(ctx, (elem, engine), &shapes) {
                for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                    let d = padded(elem, engine, (m, n, k), (ta, tb));
                    seed += 1;
                    run_case(ctx, &d, seed % 2 == 0, seed)?;
                }
            }
            // Interior blocks on the fast path and edge blocks on the clamped one, under every
            // tuning: plain and grouped block order, with and without the fast path, unroll
            // tails (K = 320 is 5 slices of 64, 10 of 32, 20 of 16).
            if !engine.is_khr() && picked_by_launcher(ctx, elem, engine) {
                for (fast, raster, unroll) in [(false, 1, 1), (true, 1, 4), (true, 3, 2), (true, 8, 3)] {
                    let mut d = CoopGemm::dense(600, 530, 320, false, elem);
                    d.engine = engine;
                    d.tuning = Tuning { fast, raster, unroll, ..Tuning::default() };
                    seed += 1;
                    run_case(ctx, &d, seed % 2 == 0, seed)?;
                }
            }
            // Batched with a broadcast B, offsets, alpha and accumulation into C.
            let mut d = CoopGemm::dense(70, 45, 36, true, elem);
            d.engine = engine;
            d.batch = 3;
            d.lda = 40;
            d.ldb = 40;
            d.a_off = 8;
            d.a_bstride = 70 * 40;
            d.c_off = 5;
            d.c_bstride = 70 * 45 + 1;
            d.alpha = 0.5;
            d.beta_one = true;
            run_case(ctx, &d, true, 99)?;
        }
        Ok(())
    });
}

/// Runs `d` with a 16-bit C (`c_half`) and with an f32 C followed by the cast kernel: the two are
/// equal bit for bit, within the 16-bit tolerance of the f64 reference, and the 16-bit slots
/// outside C (row padding, the slot before `c_off`) are left as they were.
fn run_half_case(ctx: &Context, d: &CoopGemm, with_bias: bool, seed: u64) -> vkformers_vk::Result<()> {
    const UNTOUCHED: u16 = 0x7fc1;
    let mut rng = Rng::new(seed);
    let c_len = c_len(d).next_multiple_of(2);
    let Operands { a, b, a_vals, b_vals } = Operands::draw(ctx, &mut rng, d)?;
    let bias = rng.vec(d.n as usize, 1.0);
    let c16 = ctx.buffer_from(&vec![UNTOUCHED; c_len], "C16")?;
    let c32 = ctx.buffer_from(&vec![0f32; c_len], "C32")?;
    let cast16 = ctx.buffer((c_len * 2) as u64, "cast of C32")?;
    let bias_buf = ctx.buffer_from(&bias, "bias")?;
    let half = CoopGemm { c_half: true, beta_one: false, ..*d };
    let wide = CoopGemm { c_half: false, ..half };
    let dt = match d.elem {
        Elem::F16 => DType::F16,
        Elem::Bf16 => DType::BF16,
    };
    let mut rec = ctx.recorder(false)?;
    gemm_coopmat(&mut rec, &half, a.view(), b.view(), with_bias.then(|| bias_buf.view()), c16.view())?;
    gemm_coopmat(&mut rec, &wide, a.view(), b.view(), with_bias.then(|| bias_buf.view()), c32.view())?;
    cast(&mut rec, c32.view(), DType::F32, cast16.view(), dt)?;
    rec.submit()?;
    let (got, cast_bits): (Vec<u16>, Vec<u16>) = (ctx.read_vec(c16.view())?, ctx.read_vec(cast16.view())?);
    let bias64: Vec<f64> = bias.iter().map(|&v| f64::from(v)).collect();
    let want = reference(&half, &a_vals, &b_vals, with_bias.then_some(&bias64[..]), &vec![f64::NAN; c_len]);
    let (mut got_c, mut want_c) = (vec![], vec![]);
    for (i, w) in want.iter().enumerate() {
        if w.is_nan() {
            assert_eq!(got[i], UNTOUCHED, "{half:?}: slot {i} outside C was written");
            continue;
        }
        assert_eq!(got[i], cast_bits[i], "{half:?}: element {i} differs from the cast of the f32 C");
        got_c.push(match d.elem {
            Elem::F16 => f16::from_bits(got[i]).to_f32(),
            Elem::Bf16 => bf16::from_bits(got[i]).to_f32(),
        });
        want_c.push(*w);
    }
    assert_close(&format!("{half:?}"), &got_c, &want_c, tol(dt));
    Ok(())
}

#[test]
fn coopmat_gemm_16_bit_c_is_the_cast_of_the_f32_c() {
    on_every_device("coopmat gemm 16-bit C", |ctx| {
        for (elem, engine) in engines_here(ctx) {
            let mut seed = 500;
            // Odd shapes (edge blocks), an interior-only one (the fast path), odd ldc and c_off.
            let shapes = [(1, 1, 1), (17, 13, 29), (130, 67, 129), (256, 512, 128), (300, 520, 320)];
            for (m, n, k) in shapes_for(ctx, (elem, engine), &shapes) {
                for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                    let d = CoopGemm { c_off: 1, ..padded(elem, engine, (m, n, k), (ta, tb)) };
                    seed += 1;
                    run_half_case(ctx, &d, seed % 2 == 0, seed)?;
                }
            }
            // Batched, broadcast B, alpha.
            let mut d = CoopGemm::dense(70, 45, 36, true, elem);
            (d.engine, d.batch, d.lda, d.ldb, d.a_off, d.a_bstride) = (engine, 3, 40, 40, 8, 70 * 40);
            (d.c_off, d.c_bstride, d.alpha) = (5, 70 * 45 + 1, 0.5);
            run_half_case(ctx, &d, true, 599)?;
        }
        Ok(())
    });
}

/// C of `d` under static strides `ss` (`None`: the launcher's choice by size), f32 C from zero.
fn c_under(ctx: &Context, d: &CoopGemm, ss: Option<u32>, ops: &Operands) -> vkformers_vk::Result<Vec<u32>> {
    let d = CoopGemm { tuning: Tuning { static_strides: ss, ..d.tuning }, ..*d };
    let c = ctx.buffer_from(&vec![0f32; c_len(&d)], "C")?;
    let mut rec = ctx.recorder(false)?;
    gemm_coopmat(&mut rec, &d, ops.a.view(), ops.b.view(), None, c.view())?;
    rec.submit()?;
    let got: Vec<f32> = ctx.read_vec(c.view())?;
    Ok(got.into_iter().map(f32::to_bits).collect())
}

/// Static strides (strides and layout dimensions as specialization constants: the default of
/// products of 2^34 multiply-adds and up) change how the driver compiles the loads, not the
/// sums: C equals the plain kernel's bit for bit, on padded strides in all four layouts with
/// edge blocks, and on a product large enough to take them by default (4096 x 2048 x 2048, the
/// 1.1B model's o projection over 4096 tokens). The engine is the one products of that size get
/// (each stride triple is a pipeline of its own: every engine's would take minutes to compile);
/// the plain kernel is checked against the f64 reference above.
#[test]
fn coopmat_gemm_static_strides_give_the_plain_kernels_c() {
    on_every_device("coopmat gemm static strides", |ctx| {
        for elem in [Elem::F16, Elem::Bf16] {
            let Some(engine) = choose_engine(ctx.caps(), elem, 4096, 2048, 1).filter(|e| e.is_coopmat2()) else {
                eprintln!("{}: no {elem:?} cm2 GEMM here (skipped)", ctx.caps().name);
                continue;
            };
            let small = padded(elem, engine, (300, 520, 320), (false, true));
            assert_eq!(vkformers_kernels::gemm_coopmat::static_strides_by_size(&small), 0);
            for (seed, (ta, tb)) in [(false, false), (false, true), (true, false), (true, true)].into_iter().enumerate()
            {
                let d = padded(elem, engine, (300, 520, 320), (ta, tb));
                let ops = Operands::draw(ctx, &mut Rng::new(700 + seed as u64), &d)?;
                let plain = c_under(ctx, &d, Some(0), &ops)?;
                assert!(c_under(ctx, &d, Some(2), &ops)? == plain, "{d:?}: static strides 2");
            }
            let mut big = CoopGemm::dense(4096, 2048, 2048, true, elem);
            big.engine = engine;
            assert_eq!(vkformers_kernels::gemm_coopmat::static_strides_by_size(&big), 2);
            let ops = Operands::draw(ctx, &mut Rng::new(799), &big)?;
            assert!(c_under(ctx, &big, None, &ops)? == c_under(ctx, &big, Some(0), &ops)?, "{big:?}");
        }
        Ok(())
    });
}
