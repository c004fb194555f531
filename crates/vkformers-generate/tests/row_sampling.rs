//! The serving engine's per-row device sampler (`vkformers_kernels::sample::rows`, through
//! `row_choice::RowChooser`) against the host's choice (`row_choice::host_choice`, f64 softmax and
//! draw): batches of rows with different options each (greedy or sampling, every subset of the
//! processors, repetition and OpenAI presence/frequency penalties over random histories, their
//! own seed, step and draw row, log-probabilities with 0 to 20 alternatives) on odd vocabulary
//! sizes. The device's token must be the host's (draws within 1e-5 of a boundary, where the f32
//! sums may round the other way, are left out and must be rare), its log-probabilities the host's
//! f64 ones to f32 rounding with the same alternatives, and the state must record each choice.

use vkformers_generate::engine::RequestOptions;
use vkformers_generate::generation::GenerateOptions;
use vkformers_generate::row_choice::{device_row, host_choice, RowChooser};
use vkformers_generate::{sample_at, uniform_f64, LogitsProcessor, Penalties, Pipeline, SamplingParams};
use vkformers_kernels::sample::rows::{state_row, HIST};
use vkformers_kernels::testutil::Rng;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

/// One row: its request's options, its history (prompt then `generated` ids) and logits `[V]`.
struct Row {
    opts: RequestOptions,
    history: Vec<u32>,
    generated: usize,
    logits: Vec<f32>,
}

impl Row {
    fn new_ids(&self) -> &[u32] {
        &self.history[self.history.len() - self.generated..]
    }

    fn pipeline(&self) -> Pipeline {
        self.opts.params.processors().unwrap()
    }

    /// The host's scores after every processor and penalty (the draw's input).
    fn processed(&self) -> Vec<f32> {
        let mut s = self.logits.clone();
        let pipeline = self.pipeline();
        let is_rep = |p: &&LogitsProcessor| matches!(p, LogitsProcessor::RepetitionPenalty { .. });
        pipeline.processors.iter().filter(is_rep).for_each(|p| p.apply(&mut s, &self.history));
        self.opts.penalties.apply(&mut s, self.new_ids());
        pipeline.processors.iter().filter(|p| !is_rep(p)).for_each(|p| p.apply(&mut s, &self.history));
        s
    }

    fn u(&self) -> f64 {
        uniform_f64(self.opts.seed, self.generated as u64, self.opts.row)
    }

    /// Whether the host's sampled choice moves when the draw, top-p or min-p moves by 1e-5.
    fn near_a_boundary(&self) -> bool {
        if !self.opts.params.do_sample {
            return false;
        }
        let at = |r: &Row, u: f64| sample_at(&r.processed(), u.clamp(0.0, 1.0 - 1e-12)).ok();
        let base = at(self, self.u());
        let with =
            |params: SamplingParams| Row { opts: RequestOptions { params, ..self.opts.clone() }, ..self.clone() };
        let p = &self.opts.params;
        let eps = 1e-5;
        let moved_p =
            |d: f64| at(&with(SamplingParams { top_p: (p.top_p + d).clamp(0.0, 1.0), ..p.clone() }), self.u());
        let moved_m = |f: f64| at(&with(SamplingParams { min_p: p.min_p.map(|m| m * f), ..p.clone() }), self.u());
        at(self, self.u() - eps) != base
            || at(self, self.u() + eps) != base
            || (p.top_p < 1.0 && (moved_p(-eps) != base || moved_p(eps) != base))
            || (p.min_p.is_some() && (moved_m(1.0 - eps) != base || moved_m(1.0 + eps) != base))
    }
}

impl Clone for Row {
    fn clone(&self) -> Self {
        Row {
            opts: self.opts.clone(),
            history: self.history.clone(),
            generated: self.generated,
            logits: self.logits.clone(),
        }
    }
}

/// A random request: mask bits choose sampling, each processor and the penalties.
fn random_row(rng: &mut Rng, v: usize, scale: f32) -> Row {
    let m = rng.below(256);
    let params = SamplingParams {
        do_sample: m & 1 != 0,
        repetition_penalty: if m & 2 != 0 { 1.3 } else { 1.0 },
        temperature: if m & 4 != 0 { 0.7 } else { 1.0 },
        top_k: if m & 8 != 0 { 1 + rng.below(60) } else { 0 },
        top_p: if m & 16 != 0 { 0.8 } else { 1.0 },
        min_p: (m & 32 != 0).then_some(0.05),
        min_tokens_to_keep: 1 + rng.below(3),
    };
    let mut opts = RequestOptions::from_generate(&GenerateOptions::greedy(8));
    opts.params = params;
    opts.seed = rng.next_u64();
    opts.row = rng.below(4) as u32;
    if m & 64 != 0 {
        opts.penalties = Penalties { presence: 0.6, frequency: 0.35 };
    }
    opts.logprobs = (m & 128 != 0).then(|| [0, 1, 5, 20][rng.below(4)]);
    let mut logits = rng.vec(v, scale);
    // Ties (rounded values) in some greedy rows (the first index wins), filtered entries in all.
    // Not in sampled rows: a tie straddling a top-p or min_tokens_to_keep cut is kept whole on the
    // device but split by index on the host (see draw.comp; torch's own sort is arbitrary there).
    if !opts.params.do_sample && rng.below(2) == 0 {
        logits.iter_mut().for_each(|x| *x = (*x * 2.0).round());
    }
    for _ in 0..v / 40 {
        let i = rng.below(v);
        logits[i] = f32::NEG_INFINITY;
    }
    // Prompt then generated ids, with repeats (a small id range).
    let generated = rng.below(10);
    let history = (0..1 + rng.below(8) + generated).map(|_| rng.below(v.min(40)) as u32).collect();
    Row { opts, history, generated, logits }
}

#[test]
fn per_row_device_choice_equals_the_host() {
    on_every_device("per-row device sampling", |ctx| {
        let g = Graph::new(ctx);
        let mut rng = Rng::new(2101);
        let (mut compared, mut skipped, mut logprob_rows) = (0usize, 0usize, 0usize);
        for (v, scale, batches) in [(7, 2.0, 40), (301, 4.0, 40), (4099, 8.0, 20), (50_021, 12.0, 2)] {
            let slots = 6;
            let chooser = RowChooser::new(&g, slots, v).unwrap();
            for _ in 0..batches {
                // 1 to 5 rows in shuffled slots.
                let n = 1 + rng.below(5);
                let mut order: Vec<usize> = (0..slots).collect();
                (0..slots).for_each(|i| order.swap(i, rng.below(slots)));
                let rows: Vec<Row> = (0..n).map(|_| random_row(&mut rng, v, scale)).collect();
                let mut state: Vec<Vec<u32>> = Vec::new();
                for (r, &slot) in rows.iter().zip(&order) {
                    chooser.reset(&g, slot, &r.history, r.generated).unwrap();
                    state.push(state_row(&r.history, r.generated, v));
                }
                let draws: Vec<_> = rows
                    .iter()
                    .zip(&order)
                    .map(|(r, &slot)| device_row(&r.opts, &r.pipeline(), slot, r.generated).unwrap())
                    .collect();
                let logits: Vec<f32> = rows.iter().flat_map(|r| r.logits.iter().copied()).collect();
                let t = g.constant(&logits, &[n, v]).unwrap();
                let got = chooser.choose(&g, &t, &draws).unwrap();
                for (i, (r, (id, lp))) in rows.iter().zip(&got).enumerate() {
                    let (want, want_lp) =
                        host_choice(&r.opts, &r.pipeline(), (&r.history, r.new_ids()), &mut r.logits.clone()).unwrap();
                    if r.opts.params.do_sample {
                        assert_eq!(
                            sample_at(&r.processed(), r.u()).ok(),
                            Some(want),
                            "the test's pipeline is the host's"
                        );
                    }
                    if r.near_a_boundary() {
                        skipped += 1;
                    } else {
                        compared += 1;
                        assert_eq!(*id, want, "v {v} row {i} {:?} history {:?}", r.opts, r.history);
                    }
                    assert_eq!(lp.is_some(), want_lp.is_some());
                    if let (Some(lp), Some(want_lp)) = (lp, want_lp) {
                        logprob_rows += 1;
                        let host_top = TokenLogprobView::of(&want_lp.top);
                        assert_eq!(TokenLogprobView::of(&lp.top).0, host_top.0, "v {v} row {i}: the alternatives");
                        let close = |a: f32, b: f32| a == b || (a - b).abs() <= 2e-5 * (1.0 + b.abs());
                        if *id == want {
                            assert!(close(lp.logprob, want_lp.logprob), "{} vs {}", lp.logprob, want_lp.logprob);
                        }
                        for (a, b) in lp.top.iter().zip(&want_lp.top) {
                            assert!(close(a.1, b.1), "v {v} row {i}: {a:?} vs {b:?}");
                        }
                    }
                    // The kernel recorded its choice: history bit and one more generated count.
                    state[i][*id as usize] = (state[i][*id as usize] | HIST) + 1;
                }
                let all: Vec<u32> = ctx.read_vec(chooser.state_view()).unwrap();
                for (i, &slot) in order.iter().take(n).enumerate() {
                    assert_eq!(&all[slot * v..][..v], &state[i][..], "v {v}: the state of slot {slot}");
                }
            }
        }
        eprintln!(
            "per-row sampling: {compared} equal the host's, {skipped} near a boundary, {logprob_rows} with logprobs"
        );
        assert!(skipped * 30 <= compared, "{skipped} of {compared} near a boundary: too many");
        assert!(logprob_rows >= 10);
        Ok(())
    });
}

/// Alternatives' ids.
struct TokenLogprobView(Vec<u32>);

impl TokenLogprobView {
    fn of(top: &[(u32, f32)]) -> Self {
        TokenLogprobView(top.iter().map(|t| t.0).collect())
    }
}
