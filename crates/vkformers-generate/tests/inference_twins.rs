//! Inference twins (`Graph::set_inference_twins`, on by default; `VKFORMERS_INFERENCE_TWINS`):
//! with bf16 weights under autocast, on more rows than the GEMV takes, the ops whose outputs a
//! tensor-core product reads next write its 16-bit copy themselves (RMSNorm and add + RMSNorm,
//! RoPE, the GLU, and the paged decode attention's o for o_proj), so a cached forward runs no
//! cast before its products. The copies are the casts' roundings exactly: the logits of a
//! left-padded prefill and three decode steps equal those with the twins off bit for bit, and
//! greedy tokens too. Families: llama (GQA, packed products), qwen2 (q/k/v biases), gemma2
//! (softcap, sliding and global layers, sandwich norms), gpt_oss (sinks, MoE).

mod common;

use common::{cached_decode_logits, fixtures_root};
use vkformers_generate::generation::{generate, GenerateOptions};
use vkformers_models::model::Model;
use vkformers_tensor::profile::Profile;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::testing::on_every_device;

/// Rows a step: more than the GEMV takes on any device (16 at most), so products run the GEMM.
const ROWS: usize = 18;

/// Cast dispatches to 16 bits in a profile.
fn casts(p: &Profile) -> u64 {
    p.kernels.iter().filter(|(n, _)| n.starts_with("cast/") && n.contains("to_")).map(|(_, k)| k.calls).sum()
}

fn same_bits(what: &str, a: &[Vec<f32>], b: &[Vec<f32>]) {
    for (step, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.len(), y.len(), "{what}: step {step} lengths");
        let diff = x.iter().zip(y).position(|(p, q)| p.to_bits() != q.to_bits());
        assert!(diff.is_none(), "{what}: step {step} logit {diff:?} differs");
    }
}

/// Logits of a prefill of ROWS left-padded rows (row r has 1 + r % 5 real tokens of 5) and three
/// decode steps, the last step's profile, and greedy tokens of the rows' prompts.
fn run(g: &Graph<'_>, model: &Model, twins: bool) -> (Vec<Vec<f32>>, Profile, Vec<Vec<u32>>) {
    g.set_inference_twins(twins);
    let mask: Vec<i32> = (0..ROWS * 5).map(|i| i32::from(i % 5 >= 4 - (i / 5) % 5)).collect();
    let (logits, profile) = cached_decode_logits(g, model, ROWS, mask);
    let prompts: Vec<Vec<u32>> =
        (0..ROWS).map(|i| (0..1 + i % 7).map(|j| ((i * 7 + j * 13) % 60 + 3) as u32).collect()).collect();
    let opts = GenerateOptions::greedy(4);
    let tokens = g.no_grad(|| generate(g, model, &prompts, &opts, &mut |_, _| false)).unwrap().rows;
    (logits, profile, tokens)
}

#[test]
fn twins_replace_the_casts_before_products_with_the_same_logits() {
    on_every_device("inference twins", |ctx| {
        for name in ["llama", "qwen2", "gemma2", "gpt_oss"] {
            let g = Graph::new(ctx);
            let model = Model::load_for_inference(&g, &fixtures_root().join(name), DType::BF16).unwrap();
            g.set_autocast(Some(DType::BF16));
            let (on, off) = (run(&g, &model, true), run(&g, &model, false));
            same_bits(&format!("{name}: logits, twins on and off"), &on.0, &off.0);
            assert_eq!(on.2, off.2, "{name}: greedy tokens");
            let (with, without) = (casts(&on.1), casts(&off.1));
            eprintln!("{name}: a decode step's casts to 16 bits: {with} with the twins, {without} without");
            // Dense layers cast nothing (4 a layer and the LM head's input before); the MoE
            // layers' expert products still cast their gathered rows.
            let want_none = name != "gpt_oss";
            assert!(if want_none { with == 0 } else { with < without }, "{name}: casts {with} vs {without}");
        }
        Ok(())
    });
}
