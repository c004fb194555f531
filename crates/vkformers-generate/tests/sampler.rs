//! The seeded sampler: a 100-step run repeats exactly, and many draws follow the softmax.

use vkformers_generate::{softmax, Sampler, SamplingParams};

/// Deterministic pseudo-logits for step `t` (a fixed function, not the RNG under test).
fn logits(v: usize, t: u64) -> Vec<f32> {
    (0..v).map(|i| (((i as u64 * 2_654_435_761 + t * 40_503) % 1000) as f32) / 150.0 - 3.0).collect()
}

fn run(seed: u64, steps: u64) -> Vec<u32> {
    let params = SamplingParams {
        temperature: 0.7,
        top_k: 50,
        top_p: 0.9,
        min_p: Some(0.05),
        repetition_penalty: 1.3,
        ..SamplingParams::sampling()
    };
    let pipeline = params.processors().unwrap();
    let sampler = Sampler::Seeded { seed };
    let mut history = vec![3u32, 17, 17, 42];
    let mut out = Vec::new();
    for t in 0..steps {
        let mut l = logits(257, t);
        pipeline.apply(&mut l, &history);
        let tok = sampler.sample(&l, t).unwrap();
        assert!(l[tok as usize].is_finite(), "step {t}: sampled a filtered token");
        history.push(tok);
        out.push(tok);
    }
    out
}

#[test]
fn seeded_run_repeats_exactly() {
    let a = run(1234, 100);
    assert_eq!(a, run(1234, 100));
    assert_ne!(a, run(1235, 100), "another seed should give another run");
    let distinct: std::collections::BTreeSet<_> = a.iter().collect();
    assert!(distinct.len() > 5, "a sampled run should not be constant: {a:?}");
}

#[test]
fn greedy_sampler_is_argmax() {
    assert_eq!(Sampler::Greedy.sample(&[0.0, 2.0, 2.0, 1.0], 0), Ok(1));
    assert!(Sampler::Greedy.sample(&[], 0).is_err());
    assert!(Sampler::Seeded { seed: 1 }.sample(&[f32::NEG_INFINITY; 4], 0).is_err());
}

/// Pearson's chi-square over 200k draws against the softmax of processed logits; with `df` degrees
/// of freedom the statistic has mean `df` and sd `sqrt(2 df)`; bound at mean + 6 sd.
#[test]
fn draws_follow_the_softmax() {
    let params = SamplingParams { temperature: 0.7, top_k: 50, top_p: 0.9, ..SamplingParams::sampling() };
    let mut l = logits(101, 5);
    params.processors().unwrap().apply(&mut l, &[]);
    let p = softmax(&l);
    let n = 200_000u64;
    let mut counts = vec![0u64; l.len()];
    let sampler = Sampler::Seeded { seed: 99 };
    for step in 0..n {
        counts[sampler.sample(&l, step).unwrap() as usize] += 1;
    }
    let mut chi2 = 0.0;
    let mut df = 0usize;
    for (i, (&c, &pi)) in counts.iter().zip(&p).enumerate() {
        if pi == 0.0 {
            assert_eq!(c, 0, "token {i} is filtered but was drawn");
            continue;
        }
        let e = pi as f64 * n as f64;
        chi2 += (c as f64 - e).powi(2) / e;
        df += 1;
    }
    let df = (df - 1) as f64;
    assert!(df >= 3.0, "too few kept tokens for a meaningful test: {df}");
    let bound = df + 6.0 * (2.0 * df).sqrt();
    eprintln!("chi2 = {chi2:.2} over {df} df (bound {bound:.2})");
    assert!(chi2 < bound, "chi2 {chi2} >= {bound}");
    // And rows of the batch draw independent streams.
    let rows: Vec<u32> = (0..8).map(|r| sampler.sample_row(&l, 0, r).unwrap()).collect();
    assert!(rows.iter().any(|&t| t != rows[0]), "{rows:?}");
}
