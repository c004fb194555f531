//! `rope_store::rope_store` (a decode step's rope of q and k and the store of k and v into the
//! paged pools, one dispatch) equals the two dispatches it replaces, `decode::rope_qk` then
//! `decode::store_from`, bit for bit: q, and both pools everywhere (the new rows at their slots,
//! skipped slots and the rest of the pools untouched). Both rope layouts, partial rotary dims (a
//! copied tail), mscale != 1, GQA and MQA head counts, several tokens at scattered positions and
//! slots (one skipped), f32 activations into f32, f16 and bf16 pools; q, k and v as dense
//! tensors and as the column blocks of one packed q/k/v product's rows `[N, (Hq + 2 Hkv) D]`
//! (strided, read in place) against the two dispatches on dense copies.

use vkformers_kernels::attention::decode::{self, Pools};
use vkformers_kernels::attention::rope_store::{self, NewRows};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::rope::{reference as rope_ref, Rope, RopeLayout};
use vkformers_kernels::testutil::paged::packed_rows;
use vkformers_kernels::testutil::storage::{download, unsupported, upload};
use vkformers_kernels::testutil::{same_bits, Rng};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

/// Tokens N, Hq, Hkv, D, rotary dim R, layout, mscale.
type Case = (u32, u32, u32, u32, u32, RopeLayout, f32);

const CASES: &[Case] = &[
    (1, 4, 2, 8, 8, RopeLayout::HalfSplit, 1.0),
    (3, 5, 1, 12, 6, RopeLayout::Interleaved, 1.3),
    (4, 6, 3, 64, 32, RopeLayout::HalfSplit, 0.9),
];

fn check(ctx: &Context, rng: &mut Rng, case: Case, dt: DType, packed: bool) -> Result<()> {
    let (n, hq, hkv, d, r, layout, mscale) = case;
    let p = Rope { batch: 1, seq: n, heads: hq, head_dim: d, rotary_dim: r, layout, mscale, dtype: DType::F32 };
    let (q, k, v) = (
        rng.vec((n * hq * d) as usize, 1.0),
        rng.vec((n * hkv * d) as usize, 1.0),
        rng.vec((n * hkv * d) as usize, 1.0),
    );
    let pos: Vec<i32> = (0..n as i32).map(|t| 41 * t + 7).collect();
    // Pool rows 0..2n+3; token t at row 2t + 1, the last token of several skipped.
    let rows = 2 * n + 3;
    let slots: Vec<i32> = (0..n as i32).map(|t| if n > 1 && t == n as i32 - 1 { -1 } else { 2 * t + 1 }).collect();
    let inv = rope_ref::default_inv_freq(r, 10_000.0);
    let width = hkv * d;
    let pool_init = rng.vec((rows * width) as usize, 1.0);
    let f32buf = |x: &[f32], what: &str| ctx.buffer_from(x, what);
    let (qb, kb, vb) = (f32buf(&q, "q")?, f32buf(&k, "k")?, f32buf(&v, "v")?);
    let (pb, sb, ib) = (ctx.buffer_from(&pos, "pos")?, ctx.buffer_from(&slots, "slots")?, f32buf(&inv, "inv")?);
    // Fused: qo and pools (a, b); unfused: qo, ko and pools (c, d).
    let qo = [f32buf(&vec![0.0; q.len()], "qo")?, f32buf(&vec![0.0; q.len()], "qo ref")?];
    let ko = f32buf(&vec![0.0; k.len()], "ko ref")?;
    let pools: Vec<_> = (0..4).map(|_| upload(ctx, dt, &pool_init, "pool")).collect::<Result<_>>()?;
    let fused = Pools { k: pools[0].view(), v: pools[1].view(), rows, width };
    let split = Pools { k: pools[2].view(), v: pools[3].view(), rows, width };
    let mut rec = ctx.recorder(false)?;
    let y = packed_rows(&q, &k, &v, n as usize);
    let yb = f32buf(&y, "packed qkv")?;
    let x = if packed {
        // Views of q, k and v in y from their first element to the last token's last one.
        let w = (hq + 2 * hkv) * d;
        let at = |col: u32, width: u32| yb.slice(4 * u64::from(col), 4 * u64::from((n - 1) * w + width));
        NewRows { q: at(0, hq * d), k: at(hq * d, hkv * d), v: at((hq + hkv) * d, hkv * d), strides: Some((w, w)) }
    } else {
        NewRows { q: qb.view(), k: kb.view(), v: vb.view(), strides: None }
    };
    rope_store::rope_store(&mut rec, &p, &x, (pb.view(), ib.view(), sb.view()), (qo[0].view(), &fused), dt)?;
    let io = (pb.view(), ib.view());
    decode::rope_qk(&mut rec, &p, hkv, (qb.view(), kb.view()), io, (qo[1].view(), ko.view()))?;
    decode::store_from(&mut rec, ((ko.view(), vb.view()), DType::F32), sb.view(), &split, dt)?;
    rec.submit()?;
    let what = format!("rope_store {dt:?} packed {packed} n {n} hq {hq} hkv {hkv} d {d} r {r} {layout:?}");
    same_bits(&format!("{what}: q"), &ctx.read_vec::<f32>(qo[0].view())?, &ctx.read_vec::<f32>(qo[1].view())?);
    let got: Vec<Vec<f32>> = pools.iter().map(|b| download(ctx, dt, b.view())).collect::<Result<_>>()?;
    same_bits(&format!("{what}: k pool"), &got[0], &got[2]);
    same_bits(&format!("{what}: v pool"), &got[1], &got[3]);
    // The skipped token's row (and every row no token owns) kept its old values.
    let init = download(ctx, dt, upload(ctx, dt, &pool_init, "init")?.view())?;
    let w = width as usize;
    for row in (0..rows as usize).filter(|&row| !slots.contains(&(row as i32))) {
        same_bits(
            &format!("{what}: untouched pool row {row}"),
            &got[0][row * w..(row + 1) * w],
            &init[row * w..(row + 1) * w],
        );
    }
    Ok(())
}

#[test]
fn rope_and_store_in_one_dispatch_equal_the_two_dispatches() {
    for dt in [DType::F32, DType::F16, DType::BF16] {
        on_every_device(&format!("decode rope + store {dt:?}"), |ctx| {
            if unsupported(ctx, dt, "rope_store") {
                return Ok(());
            }
            let mut rng = Rng::new(91);
            for &case in CASES {
                for packed in [false, true] {
                    check(ctx, &mut rng, case, dt, packed)?;
                }
            }
            Ok(())
        });
    }
}
