//! The engine's device sampling (per-row kernel: only ids, and the log-probabilities asked for,
//! come back) gives the tokens of its host path (`Engine::set_host_sampling`: the logits read back
//! and each row's host pipeline) for a batch of requests with different options and seeds running
//! together: every processor, repetition and OpenAI penalties, greedy with a penalty, logprobs;
//! and the device path reads back no row's logits.

mod common;

use std::path::PathBuf;

use vkformers_generate::engine::{Engine, Request, RequestOptions};
use vkformers_generate::generation::GenerateOptions;
use vkformers_generate::{Penalties, SamplingParams};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

use common::sink::Gather;

/// Request i's options: a mix of sampling settings, seed i.
fn options(i: usize) -> RequestOptions {
    let mut o = RequestOptions::from_generate(&GenerateOptions::greedy(9));
    o.seed = 1000 + i as u64;
    o.row = (i % 3) as u32;
    let sampling = SamplingParams::sampling();
    o.params = match i % 6 {
        0 => SamplingParams { repetition_penalty: 1.4, ..SamplingParams::greedy() },
        1 => SamplingParams { temperature: 1.5, top_k: 0, ..sampling },
        2 => SamplingParams { temperature: 0.9, top_k: 12, top_p: 0.9, ..sampling },
        3 => SamplingParams { min_p: Some(0.1), repetition_penalty: 1.2, ..sampling },
        4 => SamplingParams { top_p: 0.7, min_tokens_to_keep: 3, ..sampling },
        _ => sampling,
    };
    if i % 4 == 1 {
        o.penalties = Penalties { presence: 0.8, frequency: 0.5 };
    }
    if i % 3 == 2 {
        o.logprobs = Some(i % 5);
    }
    o
}

/// The requests' results and the rows whose logits were read back for the host's choice.
fn run(g: &Graph<'_>, model: &Model, host: bool, n: usize) -> (Gather, usize) {
    let mut engine = Engine::new(g, model, 5, 48).unwrap();
    engine.set_host_sampling(host);
    let mut out = Gather::default();
    for i in 0..n {
        let prompt: Vec<u32> = (0..2 + i % 5).map(|j| (7 * i + 3 * j + 1) as u32 % 60).collect();
        engine.submit(Request { id: i as u64, prompt, opts: options(i) }).unwrap();
    }
    while !engine.is_idle() {
        engine.step(g, &mut out).unwrap();
    }
    (out, engine.host_chosen_rows())
}

#[test]
fn device_sampling_gives_the_host_paths_tokens() {
    on_every_device("engine device sampling", |ctx| {
        let g = Graph::new(ctx);
        let model =
            Model::load(&g, &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen2")).unwrap();
        let n = 14;
        let ((host, host_rows), (device, device_rows)) = (run(&g, &model, true, n), run(&g, &model, false, n));
        assert_eq!(device_rows, 0, "on the device, no row's logits are read back");
        assert!(host_rows > 0);
        for i in 0..n as u64 {
            assert_eq!(device.done[&i].tokens, host.done[&i].tokens, "request {i}: {:?}", options(i as usize));
            let (d, h) = (device.logprobs.get(&i), host.logprobs.get(&i));
            assert_eq!(d.map(Vec::len), h.map(Vec::len));
            for (x, y) in d.into_iter().flatten().zip(h.into_iter().flatten()) {
                assert_eq!(
                    x.top.iter().map(|t| t.0).collect::<Vec<_>>(),
                    y.top.iter().map(|t| t.0).collect::<Vec<_>>()
                );
                assert!((x.logprob - y.logprob).abs() <= 2e-5 * (1.0 + y.logprob.abs()), "{x:?} vs {y:?}");
            }
        }
        let distinct: std::collections::HashSet<_> = (0..n as u64).map(|i| device.done[&i].tokens.clone()).collect();
        assert!(distinct.len() > n / 2, "the requests draw different tokens");
        Ok(())
    });
}
