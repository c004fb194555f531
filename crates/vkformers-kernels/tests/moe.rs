//! Mixture-of-experts kernels against their references: top-k, the grouping of assignments by
//! expert, the grouped products; and the reference backward (grouped_rows with the flag flipped
//! for dA, grouped_wgrad for dB) against finite differences.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::moe::{self, reference, GroupTile, Storage};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, storage, Rng, Tol, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };

fn ints(v: &[i32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

fn read_ints(ctx: &Context, b: &vkformers_vk::Buffer) -> Result<Vec<f32>> {
    Ok(ctx.read_vec::<i32>(b.view())?.into_iter().map(|x| x as f32).collect())
}

#[test]
fn reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(5);
    let (experts, k, tokens, inner, cols) = (3, 2, 4, 3, 2);
    let probs = f64s(&rng.vec(tokens * experts, 1.0));
    let (ids, ..) = reference::topk(&probs, experts, k);
    let (offsets, _, slot_expert, _) = reference::group(&ids, experts, k);
    let rows = tokens * k;
    let a = f64s(&rng.vec(rows * inner, 1.0));
    let b = f64s(&rng.vec(experts * cols * inner, 1.0));
    let g = f64s(&rng.vec(rows * cols, 1.0));
    let dot = |c: Vec<f64>| c.iter().zip(&g).map(|(x, y)| x * y).sum::<f64>();
    // dA = G ·_e B_e (B_e [cols, inner] read untransposed), dB_e = G_eᵀ · A_e.
    let da = reference::grouped_rows(&g, &b, &slot_expert, cols, inner, false);
    let db = reference::grouped_wgrad(&g, &a, &offsets, cols, inner);
    let fa = |x: &[f64]| dot(reference::grouped_rows(x, &b, &slot_expert, inner, cols, true));
    assert_grad_matches_fd("grouped dA", fa, &a, &da);
    let fb = |x: &[f64]| dot(reference::grouped_rows(&a, x, &slot_expert, inner, cols, true));
    assert_grad_matches_fd("grouped dB", fb, &b, &db);
}

/// Top-k and grouping of `tokens` rows over `experts`, then both grouped products.
fn check(
    ctx: &Context,
    rng: &mut Rng,
    (tokens, experts, k): (usize, usize, usize),
    (inner, cols): (usize, usize),
) -> Result<()> {
    let what = format!("moe n {tokens} E {experts} k {k} inner {inner} cols {cols}");
    let mut probs = rng.vec(tokens * experts, 1.0);
    if experts > 2 {
        probs[1] = probs[0]; // a tie: the lower index comes first
    }
    let (ids, flat, sel) = reference::topk(&f64s(&probs), experts, k);
    let slots = tokens * k;
    let pb = ctx.buffer_from(&probs, "probs")?;
    let (idb, flatb, selb) = (
        ctx.buffer(slots as u64 * 4, "ids")?,
        ctx.buffer(slots as u64 * 4, "flat")?,
        ctx.buffer(probs.len() as u64 * 4, "sel")?,
    );
    let scratch = ctx.buffer(moe::group_scratch_bytes(experts as u32, slots as u32), "scratch")?;
    let offb = ctx.buffer((experts as u64 + 1) * 4, "offsets")?;
    let idx: Vec<_> = (0..3).map(|_| ctx.buffer(slots as u64 * 4, "slot index")).collect::<Result<_>>()?;
    let a = rng.vec(slots * inner, 1.0);
    let b = rng.vec(experts * inner * cols, 1.0);
    let l = rng.vec(slots * cols, 1.0);
    let (ab, bb, lb) = (ctx.buffer_from(&a, "a")?, ctx.buffer_from(&b, "b")?, ctx.buffer_from(&l, "l")?);
    let (ct, cn) =
        (ctx.buffer(slots as u64 * cols as u64 * 4, "c")?, ctx.buffer(slots as u64 * inner as u64 * 4, "cn")?);
    let db = ctx.buffer((experts * cols * inner) as u64 * 4, "d")?;
    let mut rec = ctx.recorder(false)?;
    moe::topk(&mut rec, pb.view(), (idb.view(), flatb.view(), selb.view()), tokens, experts, k)?;
    moe::group(
        &mut rec,
        idb.view(),
        experts as u32,
        k as u32,
        scratch.view(),
        offb.view(),
        (idx[0].view(), idx[1].view(), idx[2].view()),
    )?;
    let (st, auto) = (Storage::default(), GroupTile::Auto);
    let dims = (slots, inner, cols, experts);
    moe::grouped_rows(&mut rec, (ab.view(), bb.view(), ct.view()), offb.view(), dims, true, st, auto)?;
    // The input-gradient form: L [S, cols] ·_e B_e with B_e [cols, inner] untransposed.
    let dims = (slots, cols, inner, experts);
    moe::grouped_rows(&mut rec, (lb.view(), bb.view(), cn.view()), offb.view(), dims, false, st, auto)?;
    moe::grouped_wgrad(&mut rec, (lb.view(), ab.view(), db.view()), offb.view(), dims, st, auto)?;
    rec.submit()?;
    assert_close(&format!("{what}: ids"), &read_ints(ctx, &idb)?, &ints(&ids), EXACT);
    assert_close(&format!("{what}: flat"), &read_ints(ctx, &flatb)?, &ints(&flat), EXACT);
    assert_close(&format!("{what}: sel"), &ctx.read_vec::<f32>(selb.view())?, &sel, EXACT);
    let (offsets, st, se, asl) = reference::group(&ids, experts, k);
    assert_close(&format!("{what}: offsets"), &read_ints(ctx, &offb)?, &ints(&offsets), EXACT);
    for (name, buf, want) in
        [("slot_token", &idx[0], &st), ("slot_expert", &idx[1], &se), ("assign_slot", &idx[2], &asl)]
    {
        assert_close(&format!("{what}: {name}"), &read_ints(ctx, buf)?, &ints(want), EXACT);
    }
    let c = reference::grouped_rows(&f64s(&a), &f64s(&b), &se, inner, cols, true);
    assert_close(&format!("{what}: C"), &ctx.read_vec::<f32>(ct.view())?, &c, TOL_F32);
    let c = reference::grouped_rows(&f64s(&l), &f64s(&b), &se, cols, inner, false);
    assert_close(&format!("{what}: C untransposed"), &ctx.read_vec::<f32>(cn.view())?, &c, TOL_F32);
    let d = reference::grouped_wgrad(&f64s(&l), &f64s(&a), &offsets, cols, inner);
    assert_close(&format!("{what}: D"), &ctx.read_vec::<f32>(db.view())?, &d, TOL_F32);
    Ok(())
}

#[test]
fn gpu_matches_reference_on_odd_shapes() {
    on_every_device("moe kernels", |ctx| {
        let mut rng = Rng::new(7);
        // (tokens, experts, k), (inner, cols): top-1, all experts chosen, more slots than one
        // 256-chunk of the sort, experts that get no token (64 experts, few tokens).
        for (route, dims) in [
            ((1, 1, 1), (1, 1)),
            ((5, 4, 2), (3, 7)),
            ((300, 8, 2), (33, 17)),
            ((7, 64, 3), (16, 5)),
            ((9, 3, 3), (8, 8)),
        ] {
            check(ctx, &mut rng, route, dims)?;
        }
        Ok(())
    });
}

/// Offsets `[E + 1]` of the slot counts and the expert of every slot.
fn layout(counts: &[usize]) -> (Vec<i32>, Vec<i32>) {
    let mut offsets = vec![0i32];
    let mut slot_expert = Vec::new();
    for (e, &c) in counts.iter().enumerate() {
        offsets.push(offsets[e] + c as i32);
        slot_expert.extend(std::iter::repeat_n(e as i32, c));
    }
    (offsets, slot_expert)
}

/// The three grouped products (forward, input gradient, weight gradient) on slot `counts`
/// per expert, operands stored as `st` (inputs rounded to it on the host, so the f64
/// reference sees the same values and the f32 tolerance holds), with output `tile`.
fn check_grouped(
    ctx: &Context,
    rng: &mut Rng,
    counts: &[usize],
    (inner, cols): (usize, usize),
    st: Storage,
    tile: GroupTile,
) -> Result<()> {
    let what = format!("grouped counts {counts:?} inner {inner} cols {cols} {st:?} {tile:?}");
    let (experts, slots) = (counts.len(), counts.iter().sum::<usize>());
    let (offsets, se) = layout(counts);
    let offb = ctx.buffer_from(&offsets, "offsets")?;
    // A [S, inner] and L [S, cols] are activations (st.a), B [E, cols, inner] weights (st.b).
    let a = storage::round(st.a, &rng.vec(slots * inner, 1.0));
    let l = storage::round(st.a, &rng.vec(slots * cols, 1.0));
    let b = storage::round(st.b, &rng.vec(experts * inner * cols, 1.0));
    let (ab, lb) = (storage::upload(ctx, st.a, &a, "a")?, storage::upload(ctx, st.a, &l, "l")?);
    let bb = storage::upload(ctx, st.b, &b, "b")?;
    let ct = ctx.buffer((slots * cols).max(1) as u64 * 4, "c")?;
    let cn = ctx.buffer((slots * inner).max(1) as u64 * 4, "cn")?;
    let db = ctx.buffer((experts * cols * inner) as u64 * 4, "d")?;
    let (ctv, cnv) = (ct.slice(0, (slots * cols) as u64 * 4), cn.slice(0, (slots * inner) as u64 * 4));
    let mut rec = ctx.recorder(false)?;
    let fwd = (slots, inner, cols, experts);
    moe::grouped_rows(&mut rec, (ab.view(), bb.view(), ctv), offb.view(), fwd, true, st, tile)?;
    let back = (slots, cols, inner, experts);
    moe::grouped_rows(&mut rec, (lb.view(), bb.view(), cnv), offb.view(), back, false, st, tile)?;
    // D_e = L_eᵀ · A_e: both activations, so stored as st.a.
    let wst = Storage::both(st.a);
    moe::grouped_wgrad(&mut rec, (lb.view(), ab.view(), db.view()), offb.view(), back, wst, tile)?;
    rec.submit()?;
    let c = reference::grouped_rows(&f64s(&a), &f64s(&b), &se, inner, cols, true);
    assert_close(&format!("{what}: C"), &ctx.read_vec::<f32>(ctv)?, &c, TOL_F32);
    let c = reference::grouped_rows(&f64s(&l), &f64s(&b), &se, cols, inner, false);
    assert_close(&format!("{what}: C untransposed"), &ctx.read_vec::<f32>(cnv)?, &c, TOL_F32);
    let d = reference::grouped_wgrad(&f64s(&l), &f64s(&a), &offsets, cols, inner);
    assert_close(&format!("{what}: D"), &ctx.read_vec::<f32>(db.view())?, &d, TOL_F32);
    Ok(())
}

#[test]
fn grouped_gemm_matches_reference_on_odd_shapes() {
    on_every_device("grouped gemm", |ctx| {
        let mut rng = Rng::new(11);
        // Empty experts (first, middle, last), one expert holding every slot, slot counts that
        // are not multiples of a tile (and one past two 64-row tiles), inner not a multiple of
        // BK (16 / 8), cols not a multiple of BN, and no slots at all.
        let cases: [(&[usize], (usize, usize)); 6] = [
            (&[0, 5, 0, 130, 1, 0], (19, 33)),
            (&[0, 0, 70], (37, 65)),
            (&[3], (1, 1)),
            (&[129, 2], (8, 130)),
            (&[1, 1, 1, 1, 1, 1, 1], (17, 7)),
            (&[0, 0], (5, 3)),
        ];
        for (counts, dims) in cases {
            for tile in [GroupTile::T64, GroupTile::T128] {
                check_grouped(ctx, &mut rng, counts, dims, Storage::default(), tile)?;
            }
        }
        Ok(())
    });
}

#[test]
fn grouped_gemm_reads_16bit_storage() {
    on_every_device("grouped gemm 16-bit", |ctx| {
        let mut rng = Rng::new(13);
        let (counts, dims): (&[usize], _) = (&[0, 67, 3, 0, 20], (41, 23));
        for (a, b) in
            [(DType::F32, DType::BF16), (DType::F32, DType::F16), (DType::BF16, DType::BF16), (DType::F16, DType::F16)]
        {
            if storage::unsupported(ctx, DType::BF16, "grouped gemm") {
                return Ok(());
            }
            let st = Storage { a, b };
            check_grouped(ctx, &mut rng, counts, dims, st, GroupTile::T64)?;
            if a == b && a == DType::BF16 {
                check_grouped(ctx, &mut rng, counts, dims, st, GroupTile::T128)?;
            }
        }
        Ok(())
    });
}

/// The cooperative-matrix-2 grouped GEMM (tensor cores) on the odd shapes above, where the
/// device has it (an H200; lavapipe does not, and says so).
#[test]
fn grouped_gemm_coopmat2_matches_reference() {
    on_every_device("grouped gemm coopmat2", |ctx| {
        let mut rng = Rng::new(17);
        let cases: [(&[usize], (usize, usize)); 5] = [
            (&[0, 5, 0, 130, 1, 0], (19, 33)),
            (&[0, 0, 200], (37, 130)),
            (&[129, 2], (64, 128)),
            (&[1, 1, 1, 1, 1, 1, 1], (17, 7)),
            (&[0, 0], (5, 3)),
        ];
        for dt in [DType::BF16, DType::F16] {
            let st = Storage::both(dt);
            if !moe::grouped::coopmat2_supported(ctx.caps(), st) {
                eprintln!("grouped gemm coopmat2: no {dt:?} cooperative matrix 2 on {}: skipped", ctx.caps().name);
                continue;
            }
            for (counts, dims) in cases {
                check_grouped(ctx, &mut rng, counts, dims, st, GroupTile::Coopmat2)?;
            }
        }
        Ok(())
    });
}

/// The grouped products are deterministic: two runs give the same bits (fixed reduction order;
/// no atomics), on the portable tiles and on cooperative matrix 2 where the device has it.
#[test]
fn grouped_gemm_is_deterministic() {
    on_every_device("grouped gemm determinism", |ctx| {
        let mut rng = Rng::new(23);
        let (counts, inner, cols) = ([37usize, 0, 90, 5], 45usize, 70usize);
        let (offsets, _) = layout(&counts);
        let (experts, slots) = (counts.len(), counts.iter().sum::<usize>());
        let offb = ctx.buffer_from(&offsets, "offsets")?;
        let mut tiles = vec![(Storage::default(), GroupTile::T64), (Storage::default(), GroupTile::T128)];
        let bf = Storage::both(DType::BF16);
        if moe::grouped::coopmat2_supported(ctx.caps(), bf) {
            tiles.push((bf, GroupTile::Coopmat2));
        }
        for (st, tile) in tiles {
            let a = storage::upload(ctx, st.a, &rng.vec(slots * inner, 1.0), "a")?;
            let b = storage::upload(ctx, st.b, &rng.vec(experts * cols * inner, 1.0), "b")?;
            let l = storage::upload(ctx, st.a, &rng.vec(slots * cols, 1.0), "l")?;
            let mut runs = Vec::new();
            for _ in 0..2 {
                let c = ctx.buffer((slots * cols) as u64 * 4, "c")?;
                let d = ctx.buffer((experts * cols * inner) as u64 * 4, "d")?;
                let mut rec = ctx.recorder(false)?;
                let dims = (slots, inner, cols, experts);
                moe::grouped_rows(&mut rec, (a.view(), b.view(), c.view()), offb.view(), dims, true, st, tile)?;
                let back = (slots, cols, inner, experts);
                moe::grouped_wgrad(
                    &mut rec,
                    (l.view(), a.view(), d.view()),
                    offb.view(),
                    back,
                    Storage::both(st.a),
                    tile,
                )?;
                rec.submit()?;
                let bits = |x: Vec<f32>| x.into_iter().map(f32::to_bits).collect::<Vec<_>>();
                runs.push((bits(ctx.read_vec(c.view())?), bits(ctx.read_vec(d.view())?)));
            }
            assert!(runs[0] == runs[1], "{st:?} {tile:?}: two runs differ");
        }
        Ok(())
    });
}
