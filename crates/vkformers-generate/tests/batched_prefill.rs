//! Requests of different prompt lengths admitted together prefill in one left-padded forward
//! (fewer prefill forwards than requests) and each still gets exactly what it gets alone: its
//! tokens and, bit for bit, its log-probabilities (the prefill's width is aligned: see
//! `prefill_plan`); greedy, sampled and penalised, on models with plain, sliding-window (gemma2)
//! and ALiBi (bloom) attention, prompts on both sides of an alignment boundary.

use std::collections::HashMap;
use std::path::PathBuf;

use vkformers_generate::engine::{Engine, Finished, Request, RequestOptions, Sink};
use vkformers_generate::generation::GenerateOptions;
use vkformers_generate::{Penalties, SamplingParams, TokenLogprob};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

/// A token's log-probabilities as bits (compared exactly): token, logprob, alternatives.
type Bits = (u32, u32, Vec<(u32, u32)>);

#[derive(Default)]
struct Gather(HashMap<u64, Finished>, HashMap<u64, Vec<Bits>>);

impl Sink for Gather {
    fn token(&mut self, id: u64, _: &[u32], lp: Option<&TokenLogprob>) -> bool {
        let bits = lp.map(|l| (l.token, l.logprob.to_bits(), l.top.iter().map(|t| (t.0, t.1.to_bits())).collect()));
        self.1.entry(id).or_default().extend(bits);
        false
    }

    fn finished(&mut self, id: u64, done: Finished) {
        self.0.insert(id, done);
    }
}

fn prompt(i: usize) -> Vec<u32> {
    // Lengths 9 to 70: one padded forward of 6 rows, 128 columns wide (alone: 64 or 128).
    let len = [9, 66, 8, 5, 70, 9][i];
    (0..len).map(|j| ((11 * i + 5 * j + 2) % 50) as u32 + 1).collect()
}

fn options(i: usize) -> RequestOptions {
    let mut o = RequestOptions::from_generate(&GenerateOptions::greedy(7));
    if i % 2 == 1 {
        o.params = SamplingParams { temperature: 0.8, top_k: 20, ..SamplingParams::sampling() };
        o.seed = 40 + i as u64;
        o.penalties = Penalties { presence: 0.5, frequency: 0.2 };
    }
    if i % 3 != 1 {
        o.logprobs = Some(2);
    }
    o
}

type Out = HashMap<u64, (Vec<u32>, Vec<Bits>)>;

/// Runs requests `ids` submitted together through an engine of `slots` slots; returns each one's
/// tokens and log-probabilities, and the prefill forwards run.
fn run(g: &Graph<'_>, model: &Model, ids: &[usize], slots: usize) -> (Out, usize) {
    let mut engine = Engine::new(g, model, slots, 96).unwrap();
    for &i in ids {
        engine.submit(Request { id: i as u64, prompt: prompt(i), opts: options(i) }).unwrap();
    }
    let mut out = Gather::default();
    while !engine.is_idle() {
        engine.step(g, &mut out).unwrap();
    }
    assert_eq!(engine.blocks_in_use().0, 0);
    let mut lps = out.1;
    let got = out.0.into_iter().map(|(id, f)| (id, (f.tokens, lps.remove(&id).unwrap_or_default()))).collect();
    (got, engine.prefill_forwards())
}

#[test]
fn requests_arriving_together_share_one_prefill_and_get_their_tokens_alone() {
    on_every_device("batched prefill", |ctx| {
        let g = Graph::new(ctx);
        for name in ["qwen2", "gemma2", "bloom"] {
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name);
            let model = Model::load(&g, &dir).unwrap();
            let n = 6;
            let (together, forwards) = run(&g, &model, &(0..n).collect::<Vec<_>>(), n);
            assert_eq!(forwards, 1, "{name}: {n} prompts of 5 lengths admitted together prefill in one forward");
            assert_eq!(together.values().filter(|t| !t.1.is_empty()).count(), 4, "{name}: 4 with logprobs");
            for i in 0..n {
                let (alone, _) = run(&g, &model, &[i], 1);
                assert_eq!(together[&(i as u64)], alone[&(i as u64)], "{name}: request {i} together vs alone");
            }
        }
        Ok(())
    });
}
