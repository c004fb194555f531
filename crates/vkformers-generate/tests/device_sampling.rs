//! Sampling on the device (`vkformers_kernels::sample::draw_last`) against the host pipeline and
//! sampler: on random logits, for every combination of the processors and many (seed, step, row),
//! the device's token is the host's. Draws that land within rounding of a boundary (the host's
//! choice changes when the uniform, top-p or min-p moves by 1e-5) are left out and counted; they
//! must be rare. Also: presence is updated with the chosen id, an all-NaN row gives NO_TOKEN, and
//! greedy decoding with a repetition penalty picks the host's argmax.

use vkformers_generate::device_choice::device_processors;
use vkformers_generate::{sample_at, uniform_f64, Pipeline, SamplingParams};
use vkformers_kernels::sample::{self, Draw, Processors, NO_TOKEN};
use vkformers_kernels::testutil::Rng;
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

/// One batch of logits `[rows * t, v]` with each row's history.
struct Case {
    logits: Vec<f32>,
    history: Vec<Vec<u32>>,
    rows: usize,
    t: usize,
    v: usize,
}

impl Case {
    fn random(rng: &mut Rng, rows: usize, t: usize, v: usize, scale: f32) -> Self {
        let mut logits = rng.vec(rows * t * v, scale);
        // A few filtered (-inf) entries, as an earlier processor would leave.
        for _ in 0..(rows * t * v / 50) {
            let i = rng.below(logits.len());
            logits[i] = f32::NEG_INFINITY;
        }
        // Histories with repeats and ids >= v (ignored by the penalty).
        let history = (0..rows).map(|_| (0..1 + rng.below(12)).map(|_| rng.below(v + 3) as u32).collect()).collect();
        Case { logits, history, rows, t, v }
    }

    fn last(&self, row: usize) -> Vec<f32> {
        self.logits[(row * self.t + self.t - 1) * self.v..][..self.v].to_vec()
    }

    /// `[rows, v]`: 1 where the id occurs in the row's history.
    fn presence(&self) -> Vec<u32> {
        let mut p = vec![0u32; self.rows * self.v];
        for (r, h) in self.history.iter().enumerate() {
            h.iter().filter(|&&i| (i as usize) < self.v).for_each(|&i| p[r * self.v + i as usize] = 1);
        }
        p
    }
}

/// The device's ids and the presence after the draw.
fn device_draw(ctx: &Context, c: &Case, pipeline: &Pipeline, d: Draw) -> Result<(Vec<u32>, Vec<u32>)> {
    device_draw_with(ctx, c, &device_processors(pipeline).expect("a pipeline SamplingParams builds"), d)
}

fn device_draw_with(ctx: &Context, c: &Case, p: &Processors, d: Draw) -> Result<(Vec<u32>, Vec<u32>)> {
    let logits = ctx.buffer_from(&c.logits, "logits")?;
    let presence = ctx.buffer_from(&c.presence(), "presence")?;
    let ids = ctx.buffer((c.rows * 4) as u64, "ids")?;
    let mut rec = ctx.recorder(false)?;
    sample::draw_last(&mut rec, logits.view(), presence.view(), ids.view(), (c.rows, c.t, c.v), p, d)?;
    rec.submit()?;
    Ok((ctx.read_vec(ids.view())?, ctx.read_vec(presence.view())?))
}

/// The host's token for `row` at uniform `u` under `params`.
fn host_at(c: &Case, row: usize, params: &SamplingParams, u: f64) -> Option<u32> {
    let mut s = c.last(row);
    params.processors().unwrap().apply(&mut s, &c.history[row]);
    sample_at(&s, u).ok()
}

/// Whether the host's choice moves when the draw, top-p or min-p moves by 1e-5 (relative).
fn near_a_boundary(c: &Case, row: usize, params: &SamplingParams, u: f64) -> bool {
    let base = host_at(c, row, params, u);
    let eps = 1e-5;
    let moved = |p: &SamplingParams, u: f64| host_at(c, row, p, u.clamp(0.0, 1.0 - 1e-12)) != base;
    let tp = |d: f64| SamplingParams { top_p: (params.top_p + d).clamp(0.0, 1.0), ..params.clone() };
    let mp = |f: f64| SamplingParams { min_p: params.min_p.map(|m| m * f), ..params.clone() };
    moved(params, u - eps)
        || moved(params, u + eps)
        || (params.top_p < 1.0 && (moved(&tp(-eps), u) || moved(&tp(eps), u)))
        || (params.min_p.is_some() && (moved(&mp(1.0 - eps), u) || moved(&mp(1.0 + eps), u)))
}

/// Every subset of {penalty, temperature, top-k, top-p, min-p}, with min_tokens_to_keep `keep`.
fn combinations(keep: usize) -> Vec<SamplingParams> {
    (0..32u32)
        .map(|m| SamplingParams {
            do_sample: true,
            repetition_penalty: if m & 1 != 0 { 1.3 } else { 1.0 },
            temperature: if m & 2 != 0 { 0.7 } else { 1.0 },
            top_k: if m & 4 != 0 { 40 } else { 0 },
            top_p: if m & 8 != 0 { 0.8 } else { 1.0 },
            min_p: (m & 16 != 0).then_some(0.05),
            min_tokens_to_keep: keep,
        })
        .collect()
}

#[test]
fn device_draw_equals_host_pipeline_and_sampler() {
    on_every_device("device sampling", |ctx| {
        let mut rng = Rng::new(77);
        let (mut compared, mut skipped) = (0usize, 0usize);
        for (rows, t, v, scale) in [(3, 1, 7, 2.0), (3, 2, 300, 4.0), (2, 1, 1000, 6.0), (3, 1, 4099, 8.0)] {
            for keep in [1, 3] {
                for params in combinations(keep) {
                    let c = Case::random(&mut rng, rows, t, v, scale);
                    let pipeline = params.processors().unwrap();
                    let d = Draw { seed: rng.next_u64(), step: rng.next_u64() % 1000 };
                    let (ids, presence) = device_draw(ctx, &c, &pipeline, d)?;
                    let mut want_presence = c.presence();
                    for (row, &id) in ids.iter().enumerate() {
                        let u = uniform_f64(d.seed, d.step, row as u32);
                        if near_a_boundary(&c, row, &params, u) {
                            skipped += 1;
                        } else {
                            compared += 1;
                            let want = host_at(&c, row, &params, u).unwrap();
                            assert_eq!(id, want, "v {v} row {row} {params:?} {d:?}");
                        }
                        want_presence[row * v + id as usize] = 1;
                    }
                    assert_eq!(presence, want_presence, "the chosen ids are marked present");
                }
            }
        }
        eprintln!("device sampling: {compared} draws equal the host's, {skipped} within 1e-5 of a boundary left out");
        assert!(skipped * 50 <= compared, "{skipped} draws near a boundary of {compared}: too many");
        Ok(())
    });
}

#[test]
fn device_draw_on_a_large_vocabulary() {
    on_every_device("device sampling 50k", |ctx| {
        let mut rng = Rng::new(78);
        let mut compared = 0;
        let params = SamplingParams {
            temperature: 0.8,
            top_k: 50,
            top_p: 0.9,
            min_p: Some(0.02),
            repetition_penalty: 1.2,
            ..SamplingParams::sampling()
        };
        // No top-k (flat logits: top-p's cut below the 2048 largest; peaked: above, so the kernel
        // narrows to those first), and a top-k that keeps more than the kernel's list (2048).
        let wide = SamplingParams { top_k: 0, min_p: None, ..params.clone() };
        let long = SamplingParams { top_k: 5000, ..params.clone() };
        for (params, scale) in [(params, 12.0), (wide.clone(), 12.0), (wide, 40.0), (long, 12.0)] {
            let c = Case::random(&mut rng, 3, 1, 50_000, scale);
            let d = Draw { seed: 5, step: 9 };
            let (ids, _) = device_draw(ctx, &c, &params.processors().unwrap(), d)?;
            for (row, &id) in ids.iter().enumerate() {
                let u = uniform_f64(d.seed, d.step, row as u32);
                if !near_a_boundary(&c, row, &params, u) {
                    assert_eq!(Some(id), host_at(&c, row, &params, u), "row {row} {params:?}");
                    compared += 1;
                }
            }
        }
        assert!(compared >= 11, "only {compared} of 12 draws compared");
        Ok(())
    });
}

#[test]
fn a_seeded_device_draw_repeats_and_a_row_of_nan_has_no_token() {
    on_every_device("device sampling repeats", |ctx| {
        let mut rng = Rng::new(79);
        let mut c = Case::random(&mut rng, 3, 1, 777, 3.0);
        c.logits[..777].fill(f32::NAN);
        let pipeline = SamplingParams::sampling().processors().unwrap();
        let d = Draw { seed: 11, step: 3 };
        let (a, _) = device_draw(ctx, &c, &pipeline, d)?;
        let (b, _) = device_draw(ctx, &c, &pipeline, d)?;
        assert_eq!(a, b);
        assert_eq!(a[0], NO_TOKEN);
        assert!(a[1..].iter().all(|&id| id < 777));
        let (other, _) = device_draw(ctx, &c, &pipeline, Draw { seed: 12, step: 3 })?;
        assert_ne!(a, other, "another seed draws other tokens (3 rows of 777, top-k 50)");
        Ok(())
    });
}

#[test]
fn greedy_with_a_repetition_penalty_equals_the_host() {
    on_every_device("device greedy with penalty", |ctx| {
        let mut rng = Rng::new(80);
        let params = SamplingParams { repetition_penalty: 1.5, ..SamplingParams::greedy() };
        let pipeline = params.processors().unwrap();
        let mut p = device_processors(&pipeline).unwrap();
        p.greedy = true;
        for (rows, v) in [(3, 5), (3, 300), (2, 4099)] {
            for _ in 0..10 {
                // Few distinct values: ties, and penalised ids that tie with others.
                let mut c = Case::random(&mut rng, rows, 1, v, 1.0);
                c.logits.iter_mut().for_each(|x| *x = (*x * 4.0).round());
                c.logits[rng.below(v)] = f32::NAN;
                c.history.iter_mut().for_each(|h| h.extend((0..v / 3).map(|_| rng.below(v) as u32)));
                let (ids, _) = device_draw_with(ctx, &c, &p, Draw { seed: 0, step: 0 })?;
                for (row, &id) in ids.iter().enumerate() {
                    let mut s = c.last(row);
                    pipeline.apply(&mut s, &c.history[row]);
                    assert_eq!(Some(id), vkformers_generate::argmax(&s), "v {v} row {row}");
                }
            }
        }
        // All NaN: no token; NaN and -inf: the first -inf.
        let mut c = Case::random(&mut rng, 2, 1, 9, 1.0);
        c.logits[..9].fill(f32::NAN);
        c.logits[9..].fill(f32::NEG_INFINITY);
        c.logits[9] = f32::NAN;
        let (ids, _) = device_draw_with(ctx, &c, &p, Draw { seed: 0, step: 0 })?;
        assert_eq!(ids, [NO_TOKEN, 1]);
        Ok(())
    });
}
