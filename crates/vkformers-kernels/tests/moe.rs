//! Mixture-of-experts kernels against their references: top-k, the grouping of assignments by
//! expert, the grouped products; and the reference backward (grouped_rows with the flag flipped
//! for dA, grouped_wgrad for dB) against finite differences.

use vkformers_kernels::moe::{self, reference};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, Tol, TOL_F32};
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
    moe::grouped_rows(&mut rec, ab.view(), bb.view(), ct.view(), idx[1].view(), (slots, inner, cols, experts), true)?;
    // The input-gradient form: L [S, cols] ·_e B_e with B_e [cols, inner] untransposed.
    moe::grouped_rows(&mut rec, lb.view(), bb.view(), cn.view(), idx[1].view(), (slots, cols, inner, experts), false)?;
    moe::grouped_wgrad(&mut rec, lb.view(), ab.view(), db.view(), offb.view(), (slots, cols, inner, experts))?;
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
