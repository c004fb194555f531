//! The step-wise engine: requests submitted between decode steps join the running batch (those of
//! one prompt length prefilled together) and get exactly the tokens they get alone (greedy, and seeded sampling with penalties and
//! log-probabilities, whose draws depend only on the request's seed, step and row); a cancelled
//! request gives its KV blocks back at once, queued or running.

mod common;

use std::path::PathBuf;

use vkformers_generate::engine::{Engine, Request, RequestOptions};
use vkformers_generate::generation::GenerateOptions;
use vkformers_generate::{Penalties, SamplingParams};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

use common::sink::Gather;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

fn prompts() -> Vec<Vec<u32>> {
    vec![
        vec![5, 9, 14, 9, 30, 2],
        vec![7, 7, 40],
        vec![3],
        vec![11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28],
        vec![8, 1],
        // Of the lengths of prompts 0 and 1, joining with them: prefilled in one forward.
        vec![4, 9, 14, 2, 30, 2],
        vec![6, 6, 6],
    ]
}

fn options(i: usize) -> RequestOptions {
    let mut o = RequestOptions::from_generate(&GenerateOptions::greedy(6 + 3 * i));
    if i % 2 == 1 {
        o.params = SamplingParams { temperature: 1.3, top_k: 20, top_p: 0.95, ..SamplingParams::sampling() };
        o.seed = 100 + i as u64;
        o.row = i as u32;
        o.penalties = Penalties { presence: 0.7, frequency: 0.3 };
        o.logprobs = Some(3);
    }
    o
}

/// Runs `prompts` through an engine of `max_batch` slots, submitting request i before step
/// `join[i]`.
fn run(g: &Graph<'_>, model: &Model, max_batch: usize, join: &[usize]) -> Gather {
    let mut engine = Engine::new(g, model, max_batch, 64).unwrap();
    let mut out = Gather::default();
    let mut step = 0;
    loop {
        for (i, p) in prompts().into_iter().enumerate().filter(|(i, _)| join[*i] == step) {
            engine.submit(Request { id: i as u64, prompt: p, opts: options(i) }).unwrap();
        }
        if engine.is_idle() && join.iter().all(|&j| j <= step || j == usize::MAX) {
            break;
        }
        engine.step(g, &mut out).unwrap();
        step += 1;
    }
    assert_eq!(engine.blocks_in_use().0, 0, "every finished request gave its blocks back");
    out
}

#[test]
fn requests_joining_between_steps_get_their_tokens_alone() {
    on_every_device("engine joins", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("qwen2")).unwrap();
        let n = prompts().len();
        // Request i alone: the others never join.
        let only = |i: usize| -> Vec<usize> { (0..n).map(|j| if j == i { 0 } else { usize::MAX }).collect() };
        let alone: Vec<Gather> = (0..n).map(|i| run(&g, &model, 1, &only(i))).collect();
        let together = run(&g, &model, 4, &[0, 2, 3, 3, 7, 0, 2]);
        for (i, alone) in alone.iter().enumerate() {
            let id = i as u64;
            let (a, t) = (&alone.done[&id], &together.done[&id]);
            assert_eq!(t.tokens, a.tokens, "request {i}: joined a running batch vs alone");
            assert_eq!(t.tokens.len(), 6 + 3 * i, "request {i} runs to its max_new_tokens");
            let (la, lt) = (alone.logprobs.get(&id), together.logprobs.get(&id));
            assert_eq!(la.map(Vec::len), lt.map(Vec::len));
            for (x, y) in la.into_iter().flatten().zip(lt.into_iter().flatten()) {
                assert_eq!(
                    (x.token, &x.top.iter().map(|t| t.0).collect::<Vec<_>>()),
                    (y.token, &y.top.iter().map(|t| t.0).collect::<Vec<_>>())
                );
                assert!((x.logprob - y.logprob).abs() < 1e-4, "request {i}: {} vs {}", x.logprob, y.logprob);
            }
        }
        Ok(())
    });
}

#[test]
fn a_cancelled_request_frees_its_blocks_at_once() {
    on_every_device("engine cancel", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("llama")).unwrap();
        let mut engine = Engine::new(&g, &model, 2, 64).unwrap();
        let mut out = Gather::default();
        for (i, p) in prompts().into_iter().take(3).enumerate() {
            let opts = RequestOptions::from_generate(&GenerateOptions::greedy(40));
            engine.submit(Request { id: i as u64, prompt: p, opts }).unwrap();
        }
        assert!(engine.submit(Request { id: 0, prompt: vec![1], opts: options(0) }).is_err(), "a duplicate id");
        for _ in 0..3 {
            engine.step(&g, &mut out).unwrap();
        }
        assert_eq!((engine.running(), engine.queued()), (2, 1));
        let (both, _) = engine.blocks_in_use();
        assert!(both >= 2, "two running rows hold blocks: {both}");
        assert!(engine.cancel(0));
        let (one, _) = engine.blocks_in_use();
        assert!(one < both && one > 0, "the cancelled row's blocks are back: {both} -> {one}");
        assert!(engine.cancel(2), "a queued request is dropped too");
        assert!(engine.cancel(1));
        assert!(!engine.cancel(1), "already gone");
        assert_eq!(engine.blocks_in_use().0, 0);
        assert!(engine.is_idle());
        assert!(out.done.is_empty(), "a cancelled request is not reported as finished");
        Ok(())
    });
}
