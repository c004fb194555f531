//! Choosing tokens on the device: the argmax kernel against the CPU reference (itself checked
//! against a direct definition) on random logits with ties, NaN, -inf and all-NaN rows, odd
//! vocabulary sizes (not a multiple of the workgroup), B = 3, T > 1 and V = 50,000; the draw
//! kernel's properties that hold whatever the uniform (a filter that leaves one token draws it,
//! draws land in the kept set, presence marks the choice, shapes are checked). Its equality with
//! the host's processors and sampler is tested in `vkformers-generate/tests/device_sampling.rs`.

use vkformers_kernels::sample::{self, reference, Draw, Processors, NO_TOKEN};
use vkformers_kernels::testutil::Rng;
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

/// The device's ids for the last column of each row of logits `[rows * t, v]`.
fn device_argmax(ctx: &Context, logits: &[f32], rows: usize, t: usize, v: usize) -> Result<Vec<u32>> {
    let x = ctx.buffer_from(logits, "logits")?;
    let ids = ctx.buffer(rows as u64 * 4, "ids")?;
    let mut rec = ctx.recorder(false)?;
    sample::argmax_last(&mut rec, x.view(), ids.slice(0, rows as u64 * 4), rows, t, v)?;
    rec.submit()?;
    ctx.read_vec(ids.slice(0, rows as u64 * 4))
}

/// Random logits drawn from few distinct values (many ties), with some NaN and -inf.
fn tied_logits(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| match rng.below(20) {
            0 => f32::NAN,
            1 => f32::NEG_INFINITY,
            _ => (rng.below(7) as f32 - 3.0) * 0.5,
        })
        .collect()
}

#[test]
fn reference_matches_the_definition() {
    let mut rng = Rng::new(5);
    for _ in 0..200 {
        let n = 1 + rng.below(40);
        let row = tied_logits(&mut rng, n);
        let finite: Vec<(usize, f32)> = row.iter().copied().enumerate().filter(|(_, x)| !x.is_nan()).collect();
        let want = finite.iter().map(|&(_, x)| x).fold(None, |m: Option<f32>, x| Some(m.map_or(x, |m| m.max(x))));
        let want = want.map(|m| finite.iter().find(|&&(_, x)| x == m).unwrap().0 as u32);
        assert_eq!(reference::argmax(&row), want, "{row:?}");
    }
    assert_eq!(reference::argmax(&[f32::NAN, f32::NAN]), None);
    assert_eq!(reference::argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), Some(0));
}

#[test]
fn argmax_matches_reference() {
    on_every_device("sample argmax", |ctx| {
        let mut rng = Rng::new(31);
        for (rows, t, v) in [(1, 1, 1), (3, 1, 7), (3, 4, 257), (2, 3, 1000), (5, 1, 4099), (3, 2, 50_000)] {
            for tied in [false, true] {
                let n = rows * t * v;
                let logits = if tied { tied_logits(&mut rng, n) } else { rng.vec(n, 10.0) };
                let want: Vec<u32> =
                    reference::argmax_last(&logits, rows, t, v).into_iter().map(|i| i.unwrap_or(NO_TOKEN)).collect();
                assert_eq!(device_argmax(ctx, &logits, rows, t, v)?, want, "rows {rows} t {t} v {v} tied {tied}");
            }
        }
        Ok(())
    });
}

#[test]
fn argmax_edge_rows() {
    on_every_device("sample argmax edges", |ctx| {
        let v = 300;
        let mut logits = vec![f32::NAN; 3 * v]; // row 0: all NaN
        logits[v..2 * v].fill(f32::NEG_INFINITY); // row 1: all -inf -> first index
        logits[2 * v..].fill(1.0); // row 2: the max twice, at 299 and at 17 -> 17
        logits[2 * v + 17] = 2.0;
        logits[2 * v + 299] = 2.0;
        assert_eq!(device_argmax(ctx, &logits, 3, 1, v)?, [NO_TOKEN, 0, 17]);
        Ok(())
    });
}

#[test]
fn argmax_rejects_bad_shapes() {
    on_every_device("sample argmax shapes", |ctx| {
        let x = ctx.buffer(40, "logits")?;
        let ids = ctx.buffer(8, "ids")?;
        let mut rec = ctx.recorder(false)?;
        assert!(sample::argmax_last(&mut rec, x.slice(0, 40), ids.slice(0, 8), 2, 1, 3).is_err());
        assert!(sample::argmax_last(&mut rec, x.slice(0, 40), ids.slice(0, 8), 2, 1, 0).is_err());
        assert!(sample::argmax_last(&mut rec, x.slice(0, 40), ids.slice(0, 8), 2, 1, 5).is_ok());
        Ok(())
    });
}

const OFF: Processors =
    Processors { penalty: None, temperature: None, top_k: None, top_p: None, min_p: None, keep: 1, greedy: false };

/// The draw kernel's ids and presence after one call.
fn device_draw(
    ctx: &Context,
    logits: &[f32],
    presence: &[u32],
    (rows, t, v): (usize, usize, usize),
    p: &Processors,
    d: Draw,
) -> Result<(Vec<u32>, Vec<u32>)> {
    let x = ctx.buffer_from(logits, "logits")?;
    let pres = ctx.buffer_from(presence, "presence")?;
    let ids = ctx.buffer(rows as u64 * 4, "ids")?;
    let mut rec = ctx.recorder(false)?;
    sample::draw_last(&mut rec, x.view(), pres.view(), ids.view(), (rows, t, v), p, d)?;
    rec.submit()?;
    Ok((ctx.read_vec(ids.view())?, ctx.read_vec(pres.view())?))
}

#[test]
fn a_filter_that_leaves_one_token_draws_the_argmax() {
    on_every_device("sample draw one left", |ctx| {
        let mut rng = Rng::new(41);
        let one_left = [
            Processors { top_k: Some(1), ..OFF },
            Processors { top_p: Some(0.0), ..OFF },
            Processors { min_p: Some(1.0), ..OFF },
            Processors { greedy: true, ..OFF },
        ];
        for (rows, t, v) in [(3, 1, 7), (3, 2, 1000), (2, 1, 50_000)] {
            let logits = rng.vec(rows * t * v, 5.0);
            let want: Vec<u32> = reference::argmax_last(&logits, rows, t, v).into_iter().map(Option::unwrap).collect();
            for p in &one_left {
                for seed in 0..3 {
                    let presence = vec![0; rows * v];
                    let (ids, after) = device_draw(ctx, &logits, &presence, (rows, t, v), p, Draw { seed, step: 4 })?;
                    assert_eq!(ids, want, "{p:?} v {v}");
                    let marked: Vec<usize> =
                        after.iter().enumerate().filter(|(_, &m)| m != 0).map(|(i, _)| i).collect();
                    assert_eq!(marked, (0..rows).map(|r| r * v + want[r] as usize).collect::<Vec<_>>());
                }
            }
        }
        Ok(())
    });
}

#[test]
fn draws_land_in_the_top_k_and_follow_the_seed() {
    on_every_device("sample draw top-k", |ctx| {
        let mut rng = Rng::new(42);
        let (rows, v) = (3, 777);
        let logits = rng.vec(rows * v, 3.0);
        let p = Processors { top_k: Some(5), temperature: Some(2.0), ..OFF };
        let mut seen = std::collections::BTreeSet::new();
        for step in 0..40 {
            let (ids, _) = device_draw(ctx, &logits, &vec![0; rows * v], (rows, 1, v), &p, Draw { seed: 9, step })?;
            let again = device_draw(ctx, &logits, &vec![0; rows * v], (rows, 1, v), &p, Draw { seed: 9, step })?.0;
            assert_eq!(ids, again, "a seeded draw repeats");
            for (r, &id) in ids.iter().enumerate() {
                let row = &logits[r * v..][..v];
                let above = row.iter().filter(|&&x| x > row[id as usize]).count();
                assert!(above < 5, "row {r}: token {id} is not in the top 5");
                seen.insert((r, id));
            }
        }
        assert!(seen.len() > 3 * 3, "40 draws of 3 rows hit only {} (row, token) pairs", seen.len());
        Ok(())
    });
}

#[test]
fn draw_rejects_bad_shapes() {
    on_every_device("sample draw shapes", |ctx| {
        let x = ctx.buffer(24, "logits")?;
        let pres = ctx.buffer(24, "presence")?;
        let ids = ctx.buffer(8, "ids")?;
        let d = Draw { seed: 0, step: 0 };
        let mut rec = ctx.recorder(false)?;
        let mut call = |shape, keep| {
            let p = Processors { keep, ..OFF };
            sample::draw_last(&mut rec, x.view(), pres.view(), ids.view(), shape, &p, d).is_ok()
        };
        assert!(call((2, 1, 3), 1));
        assert!(!call((2, 1, 4), 1), "logits too short");
        assert!(!call((2, 1, 0), 1), "empty vocabulary");
        assert!(!call((2, 1, 3), 0), "min_tokens_to_keep 0");
        assert!(!call((3, 1, 2), 1), "ids too short");
        Ok(())
    });
}

/// A counted draw (`draw_last_counted`, what a replayed decode step records) of step s with
/// `runs[0] = r` draws exactly what the plain draw of step s + r draws, the carry into the
/// step's high word included.
#[test]
fn a_counted_draw_is_the_draw_of_its_step_plus_the_runs() {
    on_every_device("sample draw counted", |ctx| {
        let mut rng = Rng::new(43);
        let (rows, t, v) = (3, 1, 300);
        let p = Processors { temperature: Some(2.0), top_p: Some(0.9), ..OFF };
        for (step, r) in [(5u64, 0u32), (5, 7), (u64::from(u32::MAX) - 2, 9)] {
            let logits = rng.vec(rows * t * v, 4.0);
            let presence = vec![0u32; rows * v];
            let plain =
                device_draw(ctx, &logits, &presence, (rows, t, v), &p, Draw { seed: 9, step: step + u64::from(r) })?;
            let x = ctx.buffer_from(&logits, "logits")?;
            let pres = ctx.buffer_from(&presence, "presence")?;
            let ids = ctx.buffer(rows as u64 * 4, "ids")?;
            let runs = ctx.buffer_from(&[r], "runs")?;
            let mut rec = ctx.recorder(false)?;
            let d = Draw { seed: 9, step };
            let both = (ids.view(), runs.slice(0, 4));
            sample::draw_last_counted(&mut rec, x.view(), pres.view(), both, (rows, t, v), &p, d)?;
            rec.submit()?;
            let counted = (ctx.read_vec::<u32>(ids.view())?, ctx.read_vec::<u32>(pres.view())?);
            assert_eq!(counted, plain, "step {step} + {r} runs");
        }
        Ok(())
    });
}
