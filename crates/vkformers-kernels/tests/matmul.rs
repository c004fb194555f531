//! GEMM: the f64 reference backward against finite differences, and the GPU kernel (every
//! tile variant, transpose, batch/broadcast, bias, alpha/beta, offsets, f16/bf16 storage)
//! against the reference on odd shapes, on every device with validation on.

use vkformers_kernels::matmul::{self, reference, DType, GemmDesc, Tile};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result, VkError};

const SHAPES: [(u32, u32, u32); 4] = [(1, 1, 1), (17, 13, 29), (65, 33, 7), (130, 67, 129)];
const TILES: [Tile; 5] = [Tile::Auto, Tile::T128x128, Tile::T128x128K16, Tile::T128x64, Tile::T64x64];
const TRANS: [(bool, bool); 4] = [(false, false), (false, true), (true, false), (true, true)];

/// Elements a stored operand spans: offset + (batch-1)·stride + (rows-1)·ld + cols.
fn span(offset: u64, stride: u64, batch: u32, rows: u32, ld: u32, cols: u32) -> usize {
    (offset + u64::from(batch - 1) * stride + u64::from(rows - 1) * u64::from(ld) + u64::from(cols)) as usize
}

fn a_len(d: &GemmDesc) -> usize {
    let (r, c) = if d.trans_a { (d.k, d.m) } else { (d.m, d.k) };
    span(d.a_offset, d.stride_a, d.batch, r, d.lda, c)
}

fn b_len(d: &GemmDesc) -> usize {
    let (r, c) = if d.trans_b { (d.n, d.k) } else { (d.k, d.n) };
    span(d.b_offset, d.stride_b, d.batch, r, d.ldb, c)
}

fn c_len(d: &GemmDesc) -> usize {
    span(d.c_offset, d.stride_c, d.batch, d.m, d.ldc, d.n)
}

/// The same GEMM with leading dimensions, offsets and batch strides padded to multiples of 4
/// elements, so that the kernel takes its vector-load path (edges still cut runs of 4).
fn aligned(p: GemmDesc) -> GemmDesc {
    let (lda, ldb) = (p.lda.next_multiple_of(4) + 4, p.ldb.next_multiple_of(4) + 4);
    let a_rows = u64::from(if p.trans_a { p.k } else { p.m });
    let b_rows = u64::from(if p.trans_b { p.n } else { p.k });
    GemmDesc {
        lda,
        ldb,
        a_offset: 4,
        b_offset: 8,
        stride_a: if p.stride_a == 0 { 0 } else { a_rows * u64::from(lda) + 4 },
        stride_b: if p.stride_b == 0 { 0 } else { b_rows * u64::from(ldb) },
        ..p
    }
}

/// f32 -> IEEE half bits, round to nearest even (test inputs are normal and small).
fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    if x == 0.0 || exp <= 0 {
        return sign; // flush tiny values (not produced by the tests' data)
    }
    let mant = b & 0x7f_ffff;
    let mut h = ((exp as u32) << 10) | (mant >> 13);
    let rest = mant & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (h & 1) == 1) {
        h += 1;
    }
    sign | h as u16
}

fn f16_value(h: u16) -> f32 {
    let exp = i32::from((h >> 10) & 0x1f);
    let mant = f32::from(h & 0x3ff);
    let v = if exp == 0 { mant * 2f32.powi(-24) } else { (1.0 + mant / 1024.0) * 2f32.powi(exp - 15) };
    if h & 0x8000 != 0 {
        -v
    } else {
        v
    }
}

/// f32 -> bf16 bits, round to nearest even.
fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// Rounds values to the dtype; returns (the values as the GPU sees them, the bytes to upload,
/// padded to a multiple of 4).
fn encode(x: &[f32], dtype: DType) -> (Vec<f64>, Vec<u8>) {
    let (vals, mut bytes): (Vec<f64>, Vec<u8>) = match dtype {
        DType::F32 => (f64s(x), bytemuck::cast_slice(x).to_vec()),
        DType::F16 => {
            let h: Vec<u16> = x.iter().map(|&v| f16_bits(v)).collect();
            (h.iter().map(|&v| f64::from(f16_value(v))).collect(), bytemuck::cast_slice(&h).to_vec())
        }
        DType::BF16 => {
            let h: Vec<u16> = x.iter().map(|&v| bf16_bits(v)).collect();
            (
                h.iter().map(|&v| f64::from(f32::from_bits(u32::from(v) << 16))).collect(),
                bytemuck::cast_slice(&h).to_vec(),
            )
        }
    };
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    (vals, bytes)
}

/// Runs one GEMM on the GPU with random operands (and C, when beta != 0) and checks it
/// against the reference, including that C outside the written matrices is untouched.
fn check(ctx: &Context, desc: &GemmDesc, seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    let (av, ab) = encode(&rng.vec(a_len(desc), 1.0), desc.dtype);
    let (bv, bb) = encode(&rng.vec(b_len(desc), 1.0), desc.dtype);
    let bias = rng.vec(desc.n as usize, 1.0);
    let c0 = rng.vec(c_len(desc), 1.0);
    let a = ctx.buffer_from(&ab, "a")?;
    let b = ctx.buffer_from(&bb, "b")?;
    let bias_buf = ctx.buffer_from(&bias, "bias")?;
    let c = ctx.buffer_from(&c0, "c")?;
    let mut rec = ctx.recorder(false)?;
    let bias_view = desc.has_bias.then(|| bias_buf.view());
    matmul::gemm(&mut rec, desc, a.view(), b.view(), bias_view, c.view())?;
    rec.submit()?;
    let got: Vec<f32> = ctx.read_vec(c.view())?;
    let mut want = f64s(&c0);
    reference::gemm(desc, &av, &bv, desc.has_bias.then_some(&f64s(&bias)[..]), &mut want);
    assert_close(&format!("{desc:?}"), &got, &want, TOL_F32);
    Ok(())
}

#[test]
fn reference_backward_matches_finite_differences() {
    let (m, k, n) = (3, 5, 4);
    let mut rng = Rng::new(1);
    let a = f64s(&rng.vec(m * k, 1.0));
    let b = f64s(&rng.vec(k * n, 1.0));
    let w = f64s(&rng.vec(m * n, 1.0)); // loss = sum(w ⊙ C), so dC = w
    let dot = |c: &[f64]| c.iter().zip(&w).map(|(x, y)| x * y).sum::<f64>();
    let (da, db) = reference::matmul_backward(&a, &b, &w, m, k, n);
    assert_grad_matches_fd("dA", |x| dot(&reference::matmul(x, &b, m, k, n)), &a, &da);
    assert_grad_matches_fd("dB", |x| dot(&reference::matmul(&a, x, m, k, n)), &b, &db);
    let add_bias = |bias: &[f64]| {
        let mut c = reference::matmul(&a, &b, m, k, n);
        c.iter_mut().enumerate().for_each(|(i, v)| *v += bias[i % n]);
        dot(&c)
    };
    let bias = f64s(&rng.vec(n, 1.0));
    assert_grad_matches_fd("dbias", add_bias, &bias, &reference::bias_backward(&w, m, n));
}

#[test]
fn reference_gemm_matches_matmul_for_every_transpose() {
    let (m, k, n) = (4, 3, 5);
    let mut rng = Rng::new(2);
    let a = f64s(&rng.vec(m * k, 1.0));
    let b = f64s(&rng.vec(k * n, 1.0));
    let want = reference::matmul(&a, &b, m, k, n);
    let transpose = |x: &[f64], r: usize, c: usize| (0..r * c).map(|i| x[(i % r) * c + i / r]).collect::<Vec<_>>();
    for (ta, tb) in TRANS {
        let d = GemmDesc::packed(m as u32, n as u32, k as u32, ta, tb);
        let a_st = if ta { transpose(&a, m, k) } else { a.clone() };
        let b_st = if tb { transpose(&b, k, n) } else { b.clone() };
        let mut c = vec![f64::NAN; m * n];
        reference::gemm(&d, &a_st, &b_st, None, &mut c);
        assert!(c.iter().zip(&want).all(|(x, y)| (x - y).abs() < 1e-12), "trans {ta} {tb}");
    }
}

#[test]
fn gpu_gemm_odd_shapes_every_transpose_and_tile() {
    on_every_device("gemm shapes", |ctx| {
        let mut seed = 10;
        for (m, n, k) in SHAPES {
            for (ta, tb) in TRANS {
                for tile in TILES {
                    let desc = GemmDesc { tile, ..GemmDesc::packed(m, n, k, ta, tb) };
                    seed += 1;
                    check(ctx, &desc, seed)?;
                    seed += 1;
                    check(ctx, &aligned(desc), seed)?;
                }
            }
        }
        Ok(())
    });
}

#[test]
fn gpu_gemm_batch_broadcast_bias_alpha_beta_offsets() {
    on_every_device("gemm batched", |ctx| {
        let mut seed = 100;
        for (m, n, k) in [(17, 13, 29), (65, 33, 7), (1, 70, 3)] {
            for (ta, tb) in TRANS {
                for tile in [Tile::T128x128, Tile::T64x64] {
                    let p = GemmDesc::packed(m, n, k, ta, tb);
                    // Padded rows, odd offsets, batch 3 with B broadcast, bias, accumulate.
                    let desc = GemmDesc {
                        batch: 3,
                        lda: p.lda + 3,
                        ldb: p.ldb + 1,
                        ldc: n + 2,
                        a_offset: 5,
                        b_offset: 7,
                        c_offset: 3,
                        stride_a: p.stride_a + u64::from(p.lda + 3) * 2,
                        stride_b: 0,
                        stride_c: u64::from(m) * u64::from(n + 2) + 1,
                        alpha: -0.75,
                        beta: 1.0,
                        has_bias: true,
                        tile,
                        ..p
                    };
                    seed += 1;
                    check(ctx, &desc, seed)?;
                    let alt = GemmDesc { alpha: 2.0, beta: 0.0, has_bias: false, stride_a: 0, ..desc };
                    seed += 1;
                    check(ctx, &alt, seed)?;
                    seed += 1;
                    check(ctx, &aligned(desc), seed)?;
                    seed += 1;
                    check(ctx, &aligned(alt), seed)?;
                }
            }
        }
        // A batch larger than the z grid limit exercises the grid-stride batch loop.
        let many =
            GemmDesc { batch: 70_000, stride_a: 0, stride_b: 0, stride_c: 2, ..GemmDesc::packed(1, 2, 3, false, true) };
        check(ctx, &many, 7)
    });
}

#[test]
fn gpu_gemm_f16_and_bf16_storage() {
    on_every_device("gemm f16/bf16", |ctx| {
        let mut seed = 200;
        for dtype in [DType::F16, DType::BF16] {
            for (m, n, k) in [(1, 1, 1), (17, 13, 29), (130, 67, 129)] {
                for (ta, tb) in TRANS {
                    for tile in [Tile::T128x128, Tile::T128x128K16, Tile::T128x64, Tile::T64x64] {
                        let p = GemmDesc { dtype, tile, ..GemmDesc::packed(m, n, k, ta, tb) };
                        let desc = GemmDesc { a_offset: 1, b_offset: 3, ..p };
                        seed += 1;
                        check(ctx, &desc, seed)?;
                        seed += 1;
                        check(ctx, &aligned(p), seed)?;
                    }
                }
            }
            // Odd batch strides flip the parity of every other batch.
            let p = GemmDesc::packed(9, 11, 5, false, true);
            let desc = GemmDesc { dtype, batch: 3, stride_a: 45 + 1, stride_b: 55 + 3, a_offset: 1, ..p };
            check(ctx, &desc, 300)?;
        }
        Ok(())
    });
}

/// dA = dC · Bᵀ and dB = Aᵀ · dC by the GPU GEMM (dB accumulated onto an existing gradient, as
/// in gradient accumulation), against the reference backward.
#[test]
fn gpu_gemm_computes_matmul_backward() {
    on_every_device("gemm backward", |ctx| {
        let (m, k, n) = (37usize, 19usize, 23usize);
        let mut rng = Rng::new(400);
        let (a, b, dc, db0) = (rng.vec(m * k, 1.0), rng.vec(k * n, 1.0), rng.vec(m * n, 1.0), rng.vec(k * n, 1.0));
        let bufs: Vec<_> = [&a, &b, &dc, &db0].iter().map(|x| ctx.buffer_from(x, "operand")).collect::<Result<_>>()?;
        let da = ctx.buffer((m * k * 4) as u64, "dA")?;
        let (mu, ku, nu) = (m as u32, k as u32, n as u32);
        let mut rec = ctx.recorder(false)?;
        // dA [m, k] = dC [m, n] · (B [k, n])ᵀ
        matmul::gemm(
            &mut rec,
            &GemmDesc::packed(mu, ku, nu, false, true),
            bufs[2].view(),
            bufs[1].view(),
            None,
            da.view(),
        )?;
        // dB [k, n] += (A [m, k])ᵀ · dC [m, n]
        let acc = GemmDesc { beta: 1.0, ..GemmDesc::packed(ku, nu, mu, true, false) };
        matmul::gemm(&mut rec, &acc, bufs[0].view(), bufs[2].view(), None, bufs[3].view())?;
        rec.submit()?;
        let (want_da, mut want_db) = reference::matmul_backward(&f64s(&a), &f64s(&b), &f64s(&dc), m, k, n);
        want_db.iter_mut().zip(&db0).for_each(|(w, &d)| *w += f64::from(d));
        assert_close("dA", &ctx.read_vec::<f32>(da.view())?, &want_da, TOL_F32);
        assert_close("dB", &ctx.read_vec::<f32>(bufs[3].view())?, &want_db, TOL_F32);
        Ok(())
    });
}

#[test]
fn bad_descriptions_are_errors_naming_the_kernel() {
    on_every_device("gemm errors", |ctx| {
        let a = ctx.buffer(6 * 4, "a")?;
        let c = ctx.buffer(4 * 4, "c")?;
        let mut rec = ctx.recorder(false)?;
        let d = GemmDesc { tile: Tile::T64x64, ..GemmDesc::packed(2, 2, 3, false, false) };
        let is_gemm_err = |e: &VkError, what: &str| matches!(e, VkError::Kernel { kernel, message } if kernel == "matmul/gemm:f32_64x64" && message.contains(what));
        let e = matmul::gemm(&mut rec, &d, a.view(), a.slice(0, 20), None, c.view()).unwrap_err();
        assert!(is_gemm_err(&e, "B: the GEMM reads up to byte 24"), "{e}");
        let e = matmul::gemm(&mut rec, &GemmDesc { lda: 2, ..d }, a.view(), a.view(), None, c.view()).unwrap_err();
        assert!(is_gemm_err(&e, "leading dimension 2"), "{e}");
        let e =
            matmul::gemm(&mut rec, &GemmDesc { has_bias: true, ..d }, a.view(), a.view(), None, c.view()).unwrap_err();
        assert!(is_gemm_err(&e, "has_bias"), "{e}");
        let e = matmul::gemm(&mut rec, &GemmDesc { c_offset: 1, ..d }, a.view(), a.view(), None, c.view()).unwrap_err();
        assert!(is_gemm_err(&e, "C: the GEMM writes up to byte 20"), "{e}");
        let e = matmul::gemm(
            &mut rec,
            &GemmDesc { batch: 2, stride_a: 0, stride_b: 0, stride_c: 3, ..d },
            a.view(),
            a.view(),
            None,
            c.view(),
        )
        .unwrap_err();
        assert!(is_gemm_err(&e, "overlaps"), "{e}");
        assert!(rec.is_empty());
        rec.submit()?;
        Ok(())
    });
}

#[test]
fn flops_counts_multiply_adds_twice() {
    let d = GemmDesc { batch: 3, ..GemmDesc::packed(4, 5, 6, false, false) };
    assert_eq!(matmul::flops(&d), 2.0 * 4.0 * 5.0 * 6.0 * 3.0);
}
