//! The GEMM's 16-bit C (`GemmDesc::c_dtype` f16 / bf16): on odd shapes, every transpose and
//! tile, odd C offsets and leading dimensions (values sharing a 32-bit word with another
//! thread's, or with memory outside C), batches, bias and alpha, with f32, f16 and bf16
//! operands: each value within the 16-bit type's tolerance of the f64 reference, bit for bit
//! the cast kernel's rounding of the same GEMM's f32 C, and every 16-bit slot outside C left
//! as it was. Also the split-K path (its column sum writes the 16-bit C) and the errors.

use vkformers_kernels::dtype::cast;
use vkformers_kernels::matmul::auto::{gemm_split_k, split_k_plan};
use vkformers_kernels::matmul::{self, reference, DType, GemmDesc, Tile};
use vkformers_kernels::testutil::storage::{round, tol, unsupported, upload_words, widen16};
use vkformers_kernels::testutil::{assert_close, Rng};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result, VkError};

/// A 16-bit code no kernel writes (a NaN): an element left unwritten shows.
const UNTOUCHED: u16 = 0x7fc1;

/// Elements a stored operand spans: offset + (batch-1)·stride + (rows-1)·ld + cols.
fn span(offset: u64, stride: u64, batch: u32, (rows, ld, cols): (u32, u32, u32)) -> usize {
    (offset + u64::from(batch - 1) * stride + u64::from(rows - 1) * u64::from(ld) + u64::from(cols)) as usize
}

fn operand_lens(d: &GemmDesc) -> (usize, usize, usize) {
    let (ar, ac) = if d.trans_a { (d.k, d.m) } else { (d.m, d.k) };
    let (br, bc) = if d.trans_b { (d.n, d.k) } else { (d.k, d.n) };
    (
        span(d.a_offset, d.stride_a, d.batch, (ar, d.lda, ac)),
        span(d.b_offset, d.stride_b, d.batch, (br, d.ldb, bc)),
        span(d.c_offset, d.stride_c, d.batch, (d.m, d.ldc, d.n)),
    )
}

/// Whether element `i` of the C buffer belongs to C.
fn in_c(d: &GemmDesc, i: usize) -> bool {
    (0..u64::from(d.batch)).any(|bz| {
        let rel = i as i64 - (d.c_offset + bz * d.stride_c) as i64;
        let (row, col) = (rel.div_euclid(i64::from(d.ldc)), rel.rem_euclid(i64::from(d.ldc)));
        rel >= 0 && row < i64::from(d.m) && col < i64::from(d.n)
    })
}

/// Runs `d` (16-bit C) and the same GEMM with an f32 C followed by the cast kernel; checks the
/// 16-bit C against the f64 reference and the cast bit for bit, and the slots outside C.
fn check(ctx: &Context, d: &GemmDesc, split: Option<u32>, seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    let (a_len, b_len, c_len) = operand_lens(d);
    let (a_vals, b_vals) = (round(d.dtype, &rng.vec(a_len, 1.0)), round(d.dtype, &rng.vec(b_len, 1.0)));
    let bias = rng.vec(d.n as usize, 1.0);
    let (a, b) = (upload_words(ctx, d.dtype, &a_vals, "a")?, upload_words(ctx, d.dtype, &b_vals, "b")?);
    let bias_buf = ctx.buffer_from(&bias, "bias")?;
    let words = c_len.div_ceil(2);
    let c16 = ctx.buffer_from(&vec![u32::from(UNTOUCHED) * 0x1_0001; words], "c16")?;
    let c32 = ctx.buffer_from(&vec![0f32; words * 2], "c32")?;
    let cast16 = ctx.buffer((words * 4) as u64, "cast of c32")?;
    let wide = GemmDesc { c_dtype: DType::F32, ..*d };
    let bias_view = d.has_bias.then(|| bias_buf.view());
    let mut rec = ctx.recorder(false)?;
    match split {
        Some(s) => {
            let ws = ctx.buffer(u64::from(s) * u64::from(d.m) * u64::from(d.n) * 4, "split-K workspace")?;
            gemm_split_k(&mut rec, d, s, a.view(), b.view(), ws.view(), c16.view())?;
            gemm_split_k(&mut rec, &wide, s, a.view(), b.view(), ws.view(), c32.view())?;
        }
        None => {
            matmul::gemm(&mut rec, d, a.view(), b.view(), bias_view, c16.view())?;
            matmul::gemm(&mut rec, &wide, a.view(), b.view(), bias_view, c32.view())?;
        }
    }
    cast(&mut rec, c32.view(), DType::F32, cast16.view(), d.c_dtype)?;
    rec.submit()?;
    let got: Vec<u16> = ctx.read_vec(c16.view())?;
    let cast_bits: Vec<u16> = ctx.read_vec(cast16.view())?;
    let mut want = vec![0f64; c_len];
    let (av, bv): (Vec<f64>, Vec<f64>) =
        (a_vals.iter().map(|&x| x.into()).collect(), b_vals.iter().map(|&x| x.into()).collect());
    let bias64: Vec<f64> = bias.iter().map(|&x| x.into()).collect();
    reference::gemm(d, &av, &bv, d.has_bias.then_some(&bias64[..]), &mut want);
    let (mut got_c, mut want_c) = (vec![], vec![]);
    for i in 0..words * 2 {
        if i < c_len && in_c(d, i) {
            assert_eq!(got[i], cast_bits[i], "{d:?}: element {i} differs from the cast of the f32 C");
            got_c.push(widen16(d.c_dtype, got[i]));
            want_c.push(want[i]);
        } else {
            assert_eq!(got[i], UNTOUCHED, "{d:?}: slot {i} outside C was written");
        }
    }
    assert_close(&format!("{d:?}"), &got_c, &want_c, tol(d.c_dtype));
    Ok(())
}

const TRANS: [(bool, bool); 4] = [(false, false), (false, true), (true, false), (true, true)];
const TILES: [Tile; 5] = [Tile::Auto, Tile::T128x128, Tile::T128x128K16, Tile::T128x64, Tile::T64x64];

/// The layouts of one product: packed; C at an odd offset with an odd ldc; a batch of 3 with an
/// odd C stride, B broadcast, bias and alpha; A and B aligned for the vector loads.
fn layouts(p: GemmDesc) -> [GemmDesc; 4] {
    let odd_c = GemmDesc { c_offset: 3, ldc: p.n + 1 + (p.n % 2), ..p };
    let batched = GemmDesc {
        batch: 3,
        a_offset: 1,
        stride_b: 0,
        ldc: p.n + 2,
        stride_c: u64::from(p.m) * u64::from(p.n + 2) + 1,
        alpha: -0.75,
        has_bias: true,
        ..p
    };
    let (lda, ldb) = (p.lda.next_multiple_of(4) + 4, p.ldb.next_multiple_of(4));
    let a_rows = u64::from(if p.trans_a { p.k } else { p.m });
    let aligned = GemmDesc { lda, ldb, a_offset: 4, stride_a: a_rows * u64::from(lda), c_offset: 1, ..p };
    [p, odd_c, batched, aligned]
}

#[test]
fn gemm_16_bit_c_is_the_cast_of_the_f32_c() {
    on_every_device("gemm 16-bit C", |ctx| {
        let mut seed = 1;
        for c_dtype in [DType::F16, DType::BF16] {
            if unsupported(ctx, c_dtype, "gemm 16-bit C") {
                continue;
            }
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                for (m, n, k) in [(1, 1, 1), (17, 13, 29), (65, 34, 7), (130, 67, 129)] {
                    for (ta, tb) in TRANS {
                        let tiles: &[Tile] = if (m, n) == (17, 13) { &TILES } else { &TILES[..1] };
                        for &tile in tiles {
                            let p = GemmDesc { dtype, c_dtype, tile, ..GemmDesc::packed(m, n, k, ta, tb) };
                            for d in layouts(p) {
                                seed += 1;
                                check(ctx, &d, None, seed)?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    });
}

#[test]
fn split_k_writes_the_16_bit_c_in_its_column_sum() {
    on_every_device("gemm 16-bit C split-K", |ctx| {
        for (dtype, c_dtype) in [(DType::F32, DType::BF16), (DType::BF16, DType::BF16), (DType::F16, DType::F16)] {
            if unsupported(ctx, c_dtype, "gemm 16-bit C split-K") {
                continue;
            }
            // A weight gradient's shape: a thin C summed over a long K (the tokens).
            let d = GemmDesc { dtype, c_dtype, ..GemmDesc::packed(33, 19, 2048, true, false) };
            let (splits, _) = split_k_plan(&d).expect("the plan splits this product");
            check(ctx, &d, Some(splits), 7)?;
        }
        Ok(())
    });
}

#[test]
fn a_16_bit_c_is_only_written() {
    on_every_device("gemm 16-bit C errors", |ctx| {
        let (a, c) = (ctx.buffer(64, "a")?, ctx.buffer(64, "c")?);
        let mut rec = ctx.recorder(false)?;
        let d = GemmDesc { c_dtype: DType::BF16, beta: 1.0, ..GemmDesc::packed(2, 2, 2, false, false) };
        let e = matmul::gemm(&mut rec, &d, a.view(), a.view(), None, c.view()).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { message, .. } if message.contains("only written")), "{e}");
        // 2 x 3 bf16 values at offset 1 end in the middle of the buffer's 4th 16-bit slot.
        let d = GemmDesc { c_dtype: DType::BF16, c_offset: 1, ..GemmDesc::packed(2, 3, 2, false, false) };
        let e = matmul::gemm(&mut rec, &d, a.view(), a.view(), None, c.slice(0, 12)).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { message, .. } if message.contains("writes up to byte 14")), "{e}");
        assert!(rec.is_empty());
        rec.submit()?;
        Ok(())
    });
}
