//! A decode step's input RMSNorms computed by the q/k/v and gate/up GEMV (`VKFORMERS_NORM_GEMV=1`)
//! against the norm kernels (`=0`) on the llama, qwen2, mistral and gemma fixtures (Gemma: the
//! `1 + w` gain and a scaled embedding), at batch 1 and 2: the same greedy tokens, logits of every
//! decode step within the parity tolerance of each other, and the norm kernels gone from the
//! decode steps (one left a step, the final norm before the LM head, and the attention norms of
//! layers whose q/k/v products have biases, which the grouped GEMV does not take).

mod common;

use common::fixtures_root;
use vkformers_generate::argmax;
use vkformers_models::decoder::{forward_cached_last, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::testing::on_every_device;

/// Held while a test flips `VKFORMERS_NORM_GEMV` (read at each layer) and decodes.
static SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Decode steps after the prefill.
const STEPS: usize = 6;

/// Logits of f32 runs that differ only in the rounding of the norms' sums of squares: within the
/// parity fixtures' f32 logits tolerance (relative to the largest logit), 1e-5.
const TOL_REL: f32 = 1e-5;

/// One greedy run: the logits `[rows, V]` of each decode step, the tokens chosen, and the calls
/// of the RMSNorm kernels in the decode steps.
struct Run {
    logits: Vec<Vec<f32>>,
    tokens: Vec<Vec<u32>>,
    norms: u64,
}

/// `STEPS` greedy decode steps of `prompts` (rows of one length) through the KV cache.
fn run(g: &Graph<'_>, model: &Model, prompts: &[Vec<i32>]) -> Run {
    let rows = prompts.len();
    let cache = KvCache::batched(g, &model.spec, rows, prompts[0].len() + STEPS + 1).unwrap();
    let mut ids: Vec<i32> = prompts.concat();
    let mut out = Run { logits: Vec::new(), tokens: vec![Vec::new(); rows], norms: 0 };
    for step in 0..=STEPS {
        if step == 1 {
            g.set_profiling(true); // the decode steps, not the prefill
        }
        let t = ids.len() / rows;
        let mask = vec![1; ids.len()];
        let batch = Batch { ids: &ids, mask: &mask, batch: rows, seq: t };
        let logits = g
            .no_grad(|| g.read(&forward_cached_last(g, &model.spec, &model.weights, &batch, &cache).unwrap()))
            .unwrap();
        let vocab = logits.len() / rows;
        ids = (0..rows).map(|r| argmax(&logits[r * vocab..(r + 1) * vocab]).unwrap() as i32).collect();
        for (r, &id) in ids.iter().enumerate() {
            out.tokens[r].push(id as u32);
        }
        if step > 0 {
            out.logits.push(logits);
        }
    }
    let p = g.take_profile().unwrap().expect("profiling was on");
    g.set_profiling(false);
    out.norms = p.kernels.iter().filter(|(n, _)| n.starts_with("norm/rms_forward")).map(|(_, k)| k.calls).sum();
    out
}

/// The largest `|a - b|` over the largest `|b|`.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

#[test]
fn normed_gemv_decodes_as_the_norm_kernels() {
    let prompts: [&[Vec<i32>]; 2] = [&[vec![5, 17, 3, 44, 9]], &[vec![5, 17, 3, 44, 9], vec![8, 2, 30, 11, 6]]];
    let _switch = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    on_every_device("normed gemv", |ctx| {
        for name in ["llama", "qwen2", "mistral", "gemma"] {
            let g = Graph::new(ctx);
            let model = Model::load(&g, &fixtures_root().join(name)).unwrap();
            let layers = model.spec.layers.len() as u64;
            for rows in prompts {
                std::env::set_var("VKFORMERS_NORM_GEMV", "0");
                let off = run(&g, &model, rows);
                std::env::set_var("VKFORMERS_NORM_GEMV", "1");
                let on = run(&g, &model, rows);
                std::env::remove_var("VKFORMERS_NORM_GEMV");
                let what = format!("{name} rows {}", rows.len());
                assert_eq!(on.tokens, off.tokens, "{what}: greedy tokens");
                let worst = on.logits.iter().zip(&off.logits).map(|(a, b)| rel_diff(a, b)).fold(0f32, f32::max);
                println!("{what}: logits of {STEPS} decode steps within {worst:.2e} (relative to the largest)");
                assert!(worst <= TOL_REL, "{what}: logits differ by {worst:.2e} relative");
                let steps = STEPS as u64;
                assert_eq!(off.norms, steps * (2 * layers + 1), "{what}: norm kernels with the switch off");
                // q/k/v with biases (qwen2) do not run on the grouped GEMV: their norm stays.
                let biased = model.spec.layers.iter().filter(|l| l.attn.qkv_bias).count() as u64;
                assert_eq!(on.norms, steps * (1 + biased), "{what}: norm kernels with the switch on");
            }
        }
        Ok(())
    });
}

/// The H200's path: bf16 weights (as `generate` runs a bf16 folder), f32 activations through
/// the GEMV at batch 1 and 3. With f32 pools (autocast off) the two paths differ only in the
/// order of the norms' sums of squares: logits within the f32 tolerance. Under bf16 autocast the
/// KV cache is bf16, and an f32 difference of one rounding can put a stored key or value on the
/// other side of a bf16 rounding boundary (one bf16 step of one element: gemma's row [2, 9, 13]
/// moves its logits by 4.9e-5 relative that way, where f32 pools agree to 2.4e-7): there the
/// greedy tokens must agree.
#[test]
fn normed_gemv_decodes_bf16_weights_as_the_norm_kernels() {
    let rows: [&[Vec<i32>]; 2] = [&[vec![7, 1, 40]], &[vec![7, 1, 40], vec![2, 9, 13], vec![33, 4, 4]]];
    let _switch = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    on_every_device("normed gemv bf16", |ctx| {
        for name in ["llama", "gemma"] {
            let g = Graph::new(ctx);
            let model = Model::load_for_inference(&g, &fixtures_root().join(name), DType::BF16).unwrap();
            for autocast in [None, Some(DType::BF16)] {
                g.set_autocast(autocast);
                for prompts in rows {
                    std::env::set_var("VKFORMERS_NORM_GEMV", "0");
                    let off = run(&g, &model, prompts);
                    std::env::set_var("VKFORMERS_NORM_GEMV", "1");
                    let on = run(&g, &model, prompts);
                    std::env::remove_var("VKFORMERS_NORM_GEMV");
                    let what = format!("{name} bf16 weights, autocast {autocast:?}, rows {}", prompts.len());
                    assert_eq!(on.tokens, off.tokens, "{what}: greedy tokens");
                    let worst = on.logits.iter().zip(&off.logits).map(|(a, b)| rel_diff(a, b)).fold(0f32, f32::max);
                    println!("{what}: logits of {STEPS} decode steps within {worst:.2e} (relative to the largest)");
                    if autocast.is_none() {
                        assert!(worst <= TOL_REL, "{what}: logits differ by {worst:.2e} relative");
                    }
                    assert_eq!(on.norms, STEPS as u64, "{what}: only the final norm runs as a kernel");
                }
            }
        }
        Ok(())
    });
}
