//! PhiMoE's eval-mode sparsemixer router kernel against its f64 reference: the two choices, the
//! per-choice masks (relative distance to the chosen score above 2·eps, the first choice masked
//! from the second), on odd shapes, with ties, negative maxima and every expert within reach.

use vkformers_kernels::moe::sparsemixer::{reference, sparsemixer};
use vkformers_kernels::testutil::{assert_close, f64s, Rng, Tol};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };

fn read_ints(ctx: &Context, b: &vkformers_vk::Buffer) -> Result<Vec<f32>> {
    Ok(ctx.read_vec::<i32>(b.view())?.into_iter().map(|x| x as f32).collect())
}

/// Scores on a 1/16 grid (so f32 and f64 agree on every comparison; 2·eps = 0.2746 is no ratio
/// of small grid values), offset by `shift` to make whole rows negative.
fn check(ctx: &Context, rng: &mut Rng, rows: usize, experts: usize, shift: f32, eps: f32) -> Result<()> {
    let what = format!("sparsemixer rows {rows} E {experts} shift {shift} eps {eps}");
    let mut s: Vec<f32> = rng.vec(rows * experts, 2.0).iter().map(|v| (v * 16.0).round() / 16.0 + shift).collect();
    s[1] = s[0]; // a tie in row 0: the lower expert is chosen first
    let (mask, ids, flat, sel) = reference(&f64s(&s), experts, f64::from(eps));
    let sb = ctx.buffer_from(&s, "scores")?;
    let words = |n: usize, what| ctx.buffer(n as u64 * 4, what);
    let (mb, ib, fb, selb) =
        (words(rows * 2 * experts, "mask")?, words(rows * 2, "ids")?, words(rows * 2, "flat")?, words(s.len(), "sel")?);
    let mut rec = ctx.recorder(false)?;
    sparsemixer(&mut rec, sb.view(), (mb.view(), ib.view(), fb.view(), selb.view()), (rows, experts), eps)?;
    rec.submit()?;
    let ints = |v: &[i32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    assert_close(&format!("{what}: ids"), &read_ints(ctx, &ib)?, &ints(&ids), EXACT);
    assert_close(&format!("{what}: flat"), &read_ints(ctx, &fb)?, &ints(&flat), EXACT);
    assert_close(&format!("{what}: sel"), &ctx.read_vec::<f32>(selb.view())?, &sel, EXACT);
    assert_close(&format!("{what}: mask"), &ctx.read_vec::<f32>(mb.view())?, &mask, EXACT);
    // Both kinds of mask entry occur (the shapes exercise the threshold, not one side of it).
    if experts > 3 && eps < 1.0 {
        assert!(mask.contains(&0.0) && mask.iter().filter(|&&m| m != 0.0).count() > rows, "{what}");
    }
    Ok(())
}

#[test]
fn sparsemixer_matches_reference_on_odd_shapes() {
    on_every_device("moe sparsemixer", |ctx| {
        let mut rng = Rng::new(17);
        check(ctx, &mut rng, 5, 7, 0.0, 0.1373)?;
        check(ctx, &mut rng, 3, 2, 0.0, 0.1373)?;
        check(ctx, &mut rng, 9, 16, -3.0, 0.1373)?;
        check(ctx, &mut rng, 301, 5, 1.0, 0.01)?;
        // A large eps: every expert within reach of the first choice.
        check(ctx, &mut rng, 4, 6, 0.5, 50.0)
    });
}
