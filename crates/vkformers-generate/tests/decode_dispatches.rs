//! The commands (dispatches, copies, uploads) of one decode step of a tiny Llama, counted by the
//! profiler: every one is a launch and most a barrier after it, which is what decode speed is
//! made of at batch 1 (the H200's 1.1B Llama spends more time between kernels than in them).
//! A step runs per layer: the fused QKV product with the add + norm before it computed inside,
//! the fused rope + KV store, the paged attention (splits merged inside it), the output product,
//! the fused gate/up product with its add + norm inside, and the GLU with the down product (two
//! commands where the GLU is not folded into the down GEMV, as on CPUs; the norms run as
//! kernels of their own with `VKFORMERS_NORM_GEMV=0`, two commands a layer more); then the
//! final add + norm, the LM head, the choice, the upload of the ids and one upload of the
//! positions with the cache's tables. The bound makes a regression (a kernel split again, an
//! upload per layer) fail; the kernels the fusions replaced must not run at all.

mod common;

use std::collections::HashMap;

use common::fixtures_root;
use vkformers_generate::generation::{generate, GenerateOptions};
use vkformers_models::decoder::{forward_cached_last, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_tensor::profile::Profile;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

/// Commands of one decode step of the 2-layer `llama` fixture with the input norms computed by
/// the GEMV (`VKFORMERS_NORM_GEMV=1`), at most: 7 per layer where the GLU runs alone (lavapipe;
/// 6 where it is folded into the down product) and 6 around the layers (embedding, final add +
/// norm, head, argmax, the upload of the ids and the one upload of the positions with the
/// cache's tables): 20 on lavapipe, 18 on the H200.
const MAX_COMMANDS: u64 = 20;

/// The same with the norm kernels (`VKFORMERS_NORM_GEMV=0`): the attention's and the MLP's
/// norm (with the residual add before it) one dispatch each a layer more: 24 on lavapipe, 22 on
/// the H200.
const MAX_COMMANDS_NORM_KERNELS: u64 = 24;

/// The profile of a greedy generation of `new_tokens` after `prompt`.
fn profile_of(g: &Graph<'_>, model: &Model, prompt: &[u32], new_tokens: usize) -> Profile {
    g.set_profiling(true);
    let opts = GenerateOptions::greedy(new_tokens);
    g.no_grad(|| generate(g, model, &[prompt.to_vec()], &opts, &mut |_, _| false)).unwrap();
    let p = g.take_profile().unwrap().expect("profiling was on");
    g.set_profiling(false);
    p
}

/// Calls of each kernel in `more` beyond those in `less`.
fn extra_calls(more: &Profile, less: &Profile) -> HashMap<&'static str, u64> {
    let mut d = HashMap::new();
    for (name, t) in &more.kernels {
        let before = less.kernels.get(name).map_or(0, |k| k.calls);
        if t.calls > before {
            d.insert(*name, t.calls - before);
        }
    }
    d
}

/// The commands of one steady decode step of `model`, with the kernels they ran and their calls.
fn one_step(g: &Graph<'_>, model: &Model) -> (u64, Vec<(&'static str, u64)>) {
    let prompt: Vec<u32> = vec![5, 17, 3, 44, 9];
    // Generations of 3 and 4 tokens differ by one steady decode step (the first step's
    // one-off work, constants and buffers made once, is in both).
    let (short, long) = (profile_of(g, model, &prompt, 3), profile_of(g, model, &prompt, 4));
    let commands = long.dispatches - short.dispatches;
    let barriers = long.barriers.saturating_sub(short.barriers);
    let mut calls: Vec<_> = extra_calls(&long, &short).into_iter().collect();
    calls.sort();
    println!("{}: one decode step: {commands} commands, {barriers} barriers: {calls:?}", g.ctx().caps().name);
    (commands, calls)
}

#[test]
fn one_decode_step_has_few_commands() {
    let model_dir = fixtures_root().join("llama");
    on_every_device("decode dispatches", |ctx| {
        let g = Graph::new(ctx);
        let mut model = Model::load(&g, &model_dir).unwrap();
        // The rope + store dispatch (`VKFORMERS_ROPE_IN_ATTN=0`): see `rope_in_attention` below.
        set_rope_in_attention(&mut model, false);
        // The norm kernels' path first: its count, and no norm fused into a product.
        std::env::set_var("VKFORMERS_NORM_GEMV", "0");
        let (commands, calls) = one_step(&g, &model);
        let cap = MAX_COMMANDS_NORM_KERNELS;
        assert!(commands <= cap, "{commands} commands in one decode step with the norm kernels (at most {cap})");
        let norms: u64 = calls.iter().filter(|(n, _)| n.starts_with("norm/rms_forward")).map(|c| c.1).sum();
        assert_eq!(norms, 5, "with the switch off: two norms a layer and the final one: {calls:?}");
        // Each input norm computed by the product that reads it: only the final norm runs alone.
        std::env::set_var("VKFORMERS_NORM_GEMV", "1");
        let (commands, calls) = one_step(&g, &model);
        std::env::remove_var("VKFORMERS_NORM_GEMV");
        assert!(commands <= MAX_COMMANDS, "{commands} commands in one decode step (at most {MAX_COMMANDS}): {calls:?}");
        let norms: u64 = calls.iter().filter(|(n, _)| n.starts_with("norm/rms_forward")).map(|c| c.1).sum();
        assert_eq!(norms, 1, "the final norm alone runs as a norm kernel: {calls:?}");
        for (name, _) in &calls {
            for gone in ["attention/decode_rope:", "attention/decode_store:", "attention/decode_combine"] {
                assert!(!name.starts_with(gone), "{name} ran in a decode step: the fused kernels replace it");
            }
        }
        let rope_store: u64 =
            calls.iter().filter(|(n, _)| n.starts_with("attention/decode_rope_store")).map(|c| c.1).sum();
        assert_eq!(rope_store, 2, "one fused rope + store per layer: {calls:?}");
        Ok(())
    });
}

/// A decode step of more rows than the GEMV takes, with bf16 weights under autocast (as
/// `generate` runs a bf16 folder): the products run on the GEMM and read bf16 activations, and
/// the activation read by q, k and v (and by gate and up) is cast once (`Graph::inference` in
/// the cached forward), not once per product: per layer one cast for q/k/v, one for o, one for
/// gate/up and one for the down product's input, and one for the LM head's (before: 7 a layer).
/// The profile of one decode step of `rows` sequences (after a 5-token prefill), bf16 weights
/// under autocast as `generate` runs a bf16 folder.
fn batched_step_profile(g: &Graph<'_>, model: &Model, rows: usize) -> Profile {
    let cache = KvCache::batched(g, &model.spec, rows, 16).unwrap();
    let step = |t: usize| {
        let ids: Vec<i32> = (0..rows * t).map(|i| (i * 7 % 50 + 3) as i32).collect();
        let mask = vec![1; ids.len()];
        let batch = Batch { ids: &ids, mask: &mask, batch: rows, seq: t };
        g.no_grad(|| g.read(&forward_cached_last(g, &model.spec, &model.weights, &batch, &cache).unwrap())).unwrap();
    };
    step(5);
    g.set_profiling(true);
    step(1);
    let p = g.take_profile().unwrap().expect("profiling was on");
    g.set_profiling(false);
    p
}

/// A decode step of more rows than the GEMV takes, with bf16 weights under autocast (as
/// `generate` runs a bf16 folder): the products run on the GEMM and read bf16 activations, and
/// the activation read by q, k and v (and by gate and up) is cast once (`Graph::inference` in
/// the cached forward), not once per product: per layer one cast for q/k/v, one for o, one for
/// gate/up and one for the down product's input, and one for the LM head's (before: 7 a layer).
#[test]
fn a_batched_decode_step_casts_each_activation_once() {
    let model_dir = fixtures_root().join("llama");
    on_every_device("decode casts", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load_for_inference(&g, &model_dir, vkformers_tensor::DType::BF16).unwrap();
        g.set_autocast(Some(vkformers_tensor::DType::BF16));
        let rows = 20;
        let p = batched_step_profile(&g, &model, rows);
        let casts = p.calls_of("cast/cast4:to_");
        let layers = model.spec.layers.len() as u64;
        println!("{}: casts in one {rows}-row decode step: {casts}", ctx.caps().name);
        assert!(casts <= 4 * layers + 1, "{casts} casts in one decode step of {layers} layers");
        Ok(())
    });
}

/// The same 20-row bf16 decode step with q/k/v and gate/up packed (an inference load) and with
/// the separate products (`set_packed_products(false)`, the path of `VKFORMERS_FUSED_PROJ=0`):
/// per layer the packed one runs one q/k/v product (read in place by the rope) instead of three, and
/// one gate/up product read by the GLU instead of two (on the H200 also fewer split-K column
/// sums: the packed products are wide enough to fill the device unsplit); no gemm is added.
#[test]
fn a_batched_decode_step_runs_one_product_for_qkv_and_one_for_gate_up() {
    let model_dir = fixtures_root().join("llama");
    on_every_device("decode packed", |ctx| {
        let g = Graph::new(ctx);
        let mut model = Model::load_for_inference(&g, &model_dir, vkformers_tensor::DType::BF16).unwrap();
        g.set_autocast(Some(vkformers_tensor::DType::BF16));
        let rows = 20;
        let packed = batched_step_profile(&g, &model, rows);
        model.weights.set_packed_products(false);
        let separate = batched_step_profile(&g, &model, rows);
        let layers = model.spec.layers.len() as u64;
        let gemms = |p: &Profile| -> u64 {
            p.kernels.iter().filter(|(n, _)| n.starts_with("matmul/")).map(|(_, k)| k.calls).sum()
        };
        let (c_on, c_off) = (packed.dispatches, separate.dispatches);
        println!(
            "{}: one {rows}-row decode step: {c_on} commands packed ({} products), {c_off} separate ({} products)",
            ctx.caps().name,
            gemms(&packed),
            gemms(&separate)
        );
        assert!(c_on + 2 * layers <= c_off, "{c_on} commands packed, {c_off} separate");
        assert!(gemms(&packed) + 3 * layers <= gemms(&separate), "products: {:?}", extra_calls(&separate, &packed));
        Ok(())
    });
}

/// Calls of the kernels whose names start with `prefix` in `p`.
fn calls_of(p: &Profile, prefix: &str) -> u64 {
    p.kernels.iter().filter(|(n, _)| n.starts_with(prefix)).map(|(_, k)| k.calls).sum()
}

/// The same 20-row bf16 decode step on the packed q/k/v product: the fused rope + KV store reads
/// q, k and v in place from the product's rows, so the split of the product into three tensors
/// (one dispatch a layer, a copy of the q/k/v bytes) does not run; with the split path
/// (`Packs::set_rope_in_place(false)`, the path of `VKFORMERS_PACKED_ROPE=0`) it runs once a
/// layer and the step has one command a layer more.
#[test]
fn a_batched_decode_step_ropes_the_packed_product_in_place() {
    let model_dir = fixtures_root().join("llama");
    on_every_device("decode packed rope", |ctx| {
        let g = Graph::new(ctx);
        let mut model = Model::load_for_inference(&g, &model_dir, vkformers_tensor::DType::BF16).unwrap();
        g.set_autocast(Some(vkformers_tensor::DType::BF16));
        let rows = 20;
        let layers = model.spec.layers.len() as u64;
        set_rope_in_attention(&mut model, false);
        let in_place = batched_step_profile(&g, &model, rows);
        let mut packs = model.weights.packs().clone();
        packs.set_rope_in_place(false);
        model.weights.set_packs(packs);
        let split = batched_step_profile(&g, &model, rows);
        let (split_kernel, rope_store) = ("elementwise/split_cols", "attention/decode_rope_store");
        println!(
            "{}: one {rows}-row decode step: {} commands with the rope in place, {} with the split",
            ctx.caps().name,
            in_place.dispatches,
            split.dispatches
        );
        assert_eq!(calls_of(&in_place, split_kernel), 0, "the packed product split: {:?}", in_place.kernels.keys());
        assert_eq!(calls_of(&in_place, rope_store), layers, "one fused rope + store a layer");
        assert_eq!(calls_of(&split, split_kernel), layers, "the split path splits once a layer");
        assert_eq!(calls_of(&split, rope_store), layers, "the split path's fused rope + store");
        assert_eq!(
            in_place.dispatches + layers,
            split.dispatches,
            "one command a layer fewer: {:?}",
            extra_calls(&split, &in_place)
        );
        Ok(())
    });
}

// --- The rope + KV store inside the decode attention (`VKFORMERS_ROPE_IN_ATTN`). ---

/// Sets `Packs::set_rope_in_attention` on `model`'s weights.
fn set_rope_in_attention(model: &mut Model, on: bool) {
    let mut packs = model.weights.packs().clone();
    packs.set_rope_in_attention(on);
    model.weights.set_packs(packs);
}

/// Commands of one steady decode step at batch 1 (`profile_of` 4 tokens minus 3) and its kernel
/// calls.
fn batch1_step(g: &Graph<'_>, model: &Model) -> (u64, HashMap<&'static str, u64>) {
    let prompt: Vec<u32> = vec![5, 17, 3, 44, 9];
    let (short, long) = (profile_of(g, model, &prompt, 3), profile_of(g, model, &prompt, 4));
    (long.dispatches - short.dispatches, extra_calls(&long, &short))
}

/// Calls of the kernels whose names start with `prefix` among `calls`.
fn named(calls: &HashMap<&'static str, u64>, prefix: &str) -> u64 {
    calls.iter().filter(|(n, _)| n.starts_with(prefix)).map(|(_, c)| c).sum()
}

/// With the rope + KV store inside the decode attention (the default), a decode step of the
/// 2-layer `llama` fixture at batch 1 has one command a layer fewer than with the rope + store
/// dispatch (`Packs::set_rope_in_attention(false)`, the path of `VKFORMERS_ROPE_IN_ATTN=0`):
/// no `decode_rope_store` runs, the attention runs once a layer either way (its `_rope`
/// variant). Likewise a 20-row bf16 step on the packed q/k/v product (read in place).
#[test]
fn rope_in_attention_saves_one_command_a_layer() {
    let model_dir = fixtures_root().join("llama");
    on_every_device("decode rope in attention", |ctx| {
        let g = Graph::new(ctx);
        let mut model = Model::load(&g, &model_dir).unwrap();
        let layers = model.spec.layers.len() as u64;
        let (on, on_calls) = batch1_step(&g, &model);
        set_rope_in_attention(&mut model, false);
        let (off, off_calls) = batch1_step(&g, &model);
        println!(
            "{}: one decode step at batch 1: {on} commands with the rope in the attention, {off} without",
            ctx.caps().name
        );
        let rope_store = "attention/decode_rope_store";
        assert_eq!(named(&on_calls, rope_store), 0, "{on_calls:?}");
        assert_eq!(named(&off_calls, rope_store), layers, "{off_calls:?}");
        assert_eq!(named(&on_calls, "attention/decode:"), layers, "{on_calls:?}");
        assert_eq!(named(&on_calls, "attention/decode:d64_rope"), layers, "the _rope variant: {on_calls:?}");
        assert_eq!(on + layers, off, "one command a layer fewer: on {on_calls:?}, off {off_calls:?}");

        let mut model = Model::load_for_inference(&g, &model_dir, vkformers_tensor::DType::BF16).unwrap();
        g.set_autocast(Some(vkformers_tensor::DType::BF16));
        let fused = batched_step_profile(&g, &model, 20);
        set_rope_in_attention(&mut model, false);
        let apart = batched_step_profile(&g, &model, 20);
        assert_eq!(calls_of(&fused, rope_store), 0, "{:?}", fused.kernels.keys());
        assert_eq!(calls_of(&fused, "elementwise/split_cols"), 0, "the packed product split");
        assert_eq!(fused.dispatches + layers, apart.dispatches, "{:?}", extra_calls(&apart, &fused));
        Ok(())
    });
}
