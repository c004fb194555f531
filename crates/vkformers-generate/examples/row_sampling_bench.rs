//! The serving engine's per-step token choice for `B` sampled rows of a `V`-token vocabulary
//! (temperature 0.8, top-k 50, top-p 0.9, repetition and presence penalties, logprobs on every
//! fourth row): on the device (`row_choice::RowChooser`: parameters in the batch, one kernel, `B`
//! ids and the asked log-probabilities read back) against the host path it replaces (the logits
//! `[B, V]` read back, then each row's f64 pipeline). Wall time per step, median of the runs,
//! including the submission and the read-back (what a decode step pays).
//!
//! `cargo run --release -p vkformers-generate --example row_sampling_bench [-- B V]`
//! (default B = 64, V = 32000).

use std::time::Instant;

use vkformers_generate::engine::RequestOptions;
use vkformers_generate::generation::GenerateOptions;
use vkformers_generate::row_choice::{device_row, host_choice, RowChooser};
use vkformers_generate::{Penalties, SamplingParams};
use vkformers_kernels::testutil::Rng;
use vkformers_tensor::Graph;
use vkformers_vk::{Context, DeviceSelector};

const RUNS: usize = 15;

fn options(i: usize) -> RequestOptions {
    let mut o = RequestOptions::from_generate(&GenerateOptions::greedy(256));
    o.params = SamplingParams {
        temperature: 0.8,
        top_k: 50,
        top_p: 0.9,
        repetition_penalty: 1.1,
        ..SamplingParams::sampling()
    };
    o.seed = i as u64;
    o.penalties = Penalties { presence: 0.5, frequency: 0.0 };
    o.logprobs = i.is_multiple_of(4).then_some(5);
    o
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (b, v) = (args.first().copied().unwrap_or(64), args.get(1).copied().unwrap_or(32_000));
    let ctx = Context::new(&DeviceSelector::Best)?;
    let g = Graph::new(&ctx);
    let mut rng = Rng::new(7);
    let logits = rng.vec(b * v, 6.0);
    let opts: Vec<RequestOptions> = (0..b).map(options).collect();
    let pipelines: Vec<_> = opts.iter().map(|o| o.params.processors().unwrap()).collect();
    let history: Vec<Vec<u32>> = (0..b).map(|_| (0..200).map(|_| rng.below(v) as u32).collect()).collect();
    let chooser = RowChooser::new(&g, b, v)?;
    for (s, h) in history.iter().enumerate() {
        chooser.reset(&g, s, h, 0)?;
    }
    let draws: Vec<_> = (0..b).map(|s| device_row(&opts[s], &pipelines[s], s, 0).unwrap()).collect();
    let (mut device, mut host) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let t = g.constant(&logits, &[b, v])?;
        g.sync()?;
        let start = Instant::now();
        chooser.choose(&g, &t, &draws)?;
        device.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        let rows: Vec<f32> = g.read(&t)?;
        for (r, row) in rows.chunks(v).enumerate() {
            host_choice(&opts[r], &pipelines[r], (&history[r], &[]), &mut row.to_vec())?;
        }
        host.push(start.elapsed().as_secs_f64());
    }
    let (d, h) = (median(device), median(host));
    println!(
        "device: {} | B {b} V {v} | per step: device {:.3} ms, host {:.3} ms ({:.1}x)",
        ctx.caps().name,
        d * 1e3,
        h * 1e3,
        h / d
    );
    Ok(())
}
