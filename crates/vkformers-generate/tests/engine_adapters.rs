//! One engine over a base and two LoRA adapters of it (`Engine::with_models`: one pool of slots,
//! one KV cache; each forward runs one model's rows): requests to the three models submitted
//! together, greedy and sampled, each get exactly the tokens and log-probabilities they get from
//! an engine of their model alone.

use std::collections::HashMap;
use std::path::PathBuf;

use vkformers_generate::engine::{Engine, Finished, Request, RequestOptions, Sink};
use vkformers_generate::generation::GenerateOptions;
use vkformers_generate::{SamplingParams, TokenLogprob};
use vkformers_models::lora::load_with_adapter;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

type Bits = (u32, Vec<u32>);

#[derive(Default)]
struct Gather(HashMap<u64, Finished>, HashMap<u64, Vec<Bits>>);

impl Sink for Gather {
    fn token(&mut self, id: u64, _: &[u32], lp: Option<&TokenLogprob>) -> bool {
        let bits = lp.map(|l| (l.logprob.to_bits(), l.top.iter().map(|t| t.0).collect()));
        self.1.entry(id).or_default().extend(bits);
        false
    }

    fn finished(&mut self, id: u64, done: Finished) {
        self.0.insert(id, done);
    }
}

fn request(i: usize) -> Request {
    let mut opts = RequestOptions::from_generate(&GenerateOptions::greedy(8));
    if i % 2 == 1 {
        opts.params = SamplingParams { temperature: 0.9, top_k: 30, ..SamplingParams::sampling() };
        opts.seed = 70 + i as u64;
    }
    opts.logprobs = Some(2);
    let prompt = (0..3 + i % 4).map(|j| ((13 * i + 7 * j + 1) % 90) as u32 + 1).collect();
    Request { id: i as u64, prompt, opts }
}

/// Runs `(model, request)` pairs submitted together on an engine over `models`.
fn run(g: &Graph<'_>, models: Vec<&Model>, reqs: &[(usize, usize)]) -> HashMap<u64, (Vec<u32>, Vec<Bits>)> {
    let mut engine = Engine::with_models(g, models, 4, 32).unwrap();
    for &(m, i) in reqs {
        engine.submit_to(m, request(i)).unwrap();
    }
    let mut out = Gather::default();
    while !engine.is_idle() {
        engine.step(g, &mut out).unwrap();
    }
    assert_eq!(engine.blocks_in_use().0, 0);
    let mut lps = out.1;
    out.0.into_iter().map(|(id, f)| (id, (f.tokens, lps.remove(&id).unwrap_or_default()))).collect()
}

#[test]
fn a_base_and_two_adapters_in_one_engine_give_their_own_tokens() {
    on_every_device("engine adapters", |ctx| {
        let g = Graph::new(ctx);
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests");
        let base_dir = root.join("fixtures/llama");
        let base = Model::load(&g, &base_dir).unwrap();
        let a = load_with_adapter(&g, &base_dir, &root.join("fixtures_lora/llama")).unwrap().0;
        let b = load_with_adapter(&g, &base_dir, &root.join("fixtures_lora/llama_modules_to_save")).unwrap().0;
        let models = [&base, &a, &b];
        // Request i on model i % 3; 9 requests through 4 slots.
        let reqs: Vec<(usize, usize)> = (0..9).map(|i| (i % 3, i)).collect();
        let together = run(&g, models.to_vec(), &reqs);
        let mut differ = 0;
        for &(m, i) in &reqs {
            let alone = run(&g, vec![models[m]], &[(0, i)]);
            assert_eq!(together[&(i as u64)], alone[&(i as u64)], "request {i} on model {m}");
            let on_base = run(&g, vec![&base], &[(0, i)]);
            differ += usize::from(m > 0 && on_base[&(i as u64)].0 != alone[&(i as u64)].0);
        }
        assert!(differ >= 4, "the adapters change the tokens of most of their 6 requests: {differ}");
        Ok(())
    });
}
