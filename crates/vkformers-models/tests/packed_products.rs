//! Inference loads pack each layer's q/k/v (and gate/up) weights into one weight whose row blocks
//! are the separate weights (`vkformers_models::packed`); the forward then runs one product for
//! each group. Checked on fixtures of several families: the packed and the separate products give
//! the logits of the transformers reference (f32 within the parity tolerance, bf16 against the
//! separate products), LoRA on a part falls back to the separate products, and the packed load
//! holds no more device memory than the separate one.

use std::path::{Path, PathBuf};

use vkformers_io::ModelWeights;
use vkformers_models::decoder::{forward, Batch};
use vkformers_models::lora::{attach, Adapter};
use vkformers_models::model::Model;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// llama (GQA), qwen2 (q/k/v biases), gemma (GeGLU), phi3 (stored fused qkv_proj and
/// gate_up_proj, split at load), olmo (clip_qkv), gpt_neox (per-head interleaved fused QKV).
const FAMILIES: [&str; 6] = ["llama", "qwen2", "gemma", "phi3", "olmo", "gpt_neox"];

/// The f32 logits tolerance of the parity fixtures (relative L2).
const TOL_LOGITS_F32: f64 = vkformers_models::parity::TOL_LOGITS;

/// A bf16 product's relative tolerance (`vkformers_kernels::testutil::TOL_BF16`).
const TOL_LOGITS_BF16: f64 = 1.6e-2;

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    let l2 = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
    let diff = l2(&mut got.iter().zip(want).map(|(a, b)| f64::from(*a) - f64::from(*b)));
    diff / l2(&mut want.iter().map(|w| f64::from(*w))).max(1e-300)
}

/// The fixture's batch (ids, mask, [B, T]) and transformers' logits `[B·T, V]`.
fn reference(dir: &Path) -> (Vec<i32>, Vec<i32>, (usize, usize), Vec<f32>) {
    let r = ModelWeights::open_file(dir.join("reference.safetensors")).unwrap();
    let ints = |name: &str| {
        let raw = r.tensor_bytes(name).unwrap();
        let v: Vec<i32> = raw.data.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        (v, raw.shape.to_vec())
    };
    let ((ids, shape), (mask, _)) = (ints("input_ids"), ints("attention_mask"));
    (ids, mask, (shape[0], shape[1]), r.tensor_f32("logits").unwrap())
}

/// Logits of the fixture's batch with the packed products on or off (one load, one graph).
fn logits(g: &Graph<'_>, model: &mut Model, dir: &Path, packed: bool) -> Vec<f32> {
    logits_and_commands(g, model, dir, packed, REPEAT).0
}

/// Copies of the fixture's batch (2 x 8) run at once: 48 rows, past the GEMV's 16 on lavapipe,
/// so the products run on the GEMM as a batch-64 decode step's do on the H200.
const REPEAT: usize = 3;

/// [`logits`] of `repeat` copies of the batch, and the count of commands (dispatches, copies)
/// of the forward.
fn logits_and_commands(g: &Graph<'_>, model: &mut Model, dir: &Path, packed: bool, repeat: usize) -> (Vec<f32>, u64) {
    let (ids, mask, (b, t), _) = reference(dir);
    let (ids, mask, b) = (ids.repeat(repeat), mask.repeat(repeat), b * repeat);
    model.weights.set_packed_products(packed);
    let batch = Batch { ids: &ids, mask: &mask, batch: b, seq: t };
    g.sync().unwrap();
    g.set_profiling(true);
    let y = g.no_grad(|| forward(g, &model.spec, &model.weights, &batch)).unwrap();
    let out = g.read(&y).unwrap();
    let p = g.take_profile().unwrap().expect("profiling was on");
    g.set_profiling(false);
    (out, p.dispatches)
}

/// Packed weights a model of `layers` layers should get: q/k/v per layer, and gate/up per layer
/// of a gated MLP.
fn expected_packs(model: &Model) -> usize {
    let gated =
        model.spec.layers.iter().filter(|l| matches!(l.mlp, vkformers_models::spec::MlpSpec::Gated { .. })).count();
    model.spec.layers.len() + gated
}

#[test]
fn packed_products_give_the_reference_logits_in_f32() {
    on_every_device("packed f32", |ctx| {
        for name in FAMILIES {
            let dir = fixture(name);
            let g = Graph::new(ctx);
            let mut model = Model::load_for_inference(&g, &dir, DType::F32).unwrap();
            assert_eq!(model.weights.packs().len(), expected_packs(&model), "{name}: packed weights");
            let want = reference(&dir).3.repeat(REPEAT);
            let (on, n_on) = logits_and_commands(&g, &mut model, &dir, true, REPEAT);
            let (off, n_off) = logits_and_commands(&g, &mut model, &dir, false, REPEAT);
            let (e_on, e_off, e_ab) = (rel_l2(&on, &want), rel_l2(&off, &want), rel_l2(&on, &off));
            println!(
                "{name}: packed {e_on:.2e}, separate {e_off:.2e} from transformers; packed vs separate {e_ab:.2e}; \
                 {n_on} commands packed, {n_off} separate"
            );
            assert!(e_on <= TOL_LOGITS_F32 && e_off <= TOL_LOGITS_F32, "{name}: {e_on:.2e} / {e_off:.2e}");
            // Per layer q/k/v: one product and the split instead of three products (clip_qkv:
            // one clamp instead of three); gate/up: one product instead of two.
            let layers = model.spec.layers.len() as u64;
            assert!(n_on + layers <= n_off, "{name}: {n_on} commands packed, {n_off} separate");
            // The fixture's own 16 rows (the GEMV on lavapipe: grouped products without biases,
            // one packed GEMV and the split with them).
            let (few, _) = logits_and_commands(&g, &mut model, &dir, true, 1);
            let e_few = rel_l2(&few, &reference(&dir).3);
            assert!(e_few <= TOL_LOGITS_F32, "{name}: {e_few:.2e} from transformers on 16 rows");
        }
        Ok(())
    });
}

#[test]
fn packed_products_match_the_separate_ones_on_bf16_weights() {
    on_every_device("packed bf16", |ctx| {
        for name in FAMILIES {
            let dir = fixture(name);
            let g = Graph::new(ctx);
            let mut model = Model::load_for_inference(&g, &dir, DType::BF16).unwrap();
            assert_eq!(model.weights.packs().len(), expected_packs(&model), "{name}: packed weights");
            g.set_autocast(Some(DType::BF16));
            let (on, off) = (logits(&g, &mut model, &dir, true), logits(&g, &mut model, &dir, false));
            let e = rel_l2(&on, &off);
            println!("{name} bf16: packed vs separate products {e:.2e}");
            // The same bf16 operands and per-output sums over `in` (0 on lavapipe's portable
            // GEMM). A tensor-core engine chosen by the product's width, or a split along K,
            // may group the f32 sums differently; bf16 activations then round apart: held to
            // the bf16 product tolerance.
            assert!(e <= TOL_LOGITS_BF16, "{name}: packed vs separate bf16 logits {e:.2e}");
        }
        Ok(())
    });
}

/// An adapter on q_proj, v_proj and down_proj (PEFT's reference logits): its q/k/v products run
/// apart (a LoRA term on a part), gate/up packed; both give PEFT's logits.
#[test]
fn a_lora_term_on_a_part_runs_the_separate_products() {
    let dir = fixture("llama");
    let adapter_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_lora/llama");
    on_every_device("packed lora", |ctx| {
        let g = Graph::new(ctx);
        let mut model = Model::load_typed(&g, &dir, &|_| false, DType::F32).unwrap();
        assert_eq!(model.weights.packs().len(), expected_packs(&model), "a frozen base is packed");
        let adapter = Adapter::load(&adapter_dir).unwrap();
        attach(&g, &mut model, &adapter, 0).unwrap();
        let want = reference(&adapter_dir).3.repeat(REPEAT);
        let (on, off) = (logits(&g, &mut model, &adapter_dir, true), logits(&g, &mut model, &adapter_dir, false));
        let (e_on, e_off) = (rel_l2(&on, &want), rel_l2(&off, &want));
        println!("llama + LoRA: packed {e_on:.2e}, separate {e_off:.2e} from PEFT");
        assert!(e_on <= TOL_LOGITS_F32 && e_off <= TOL_LOGITS_F32, "{e_on:.2e} / {e_off:.2e}");
        Ok(())
    });
}

#[test]
fn packing_keeps_the_device_memory_of_the_separate_weights() {
    let dir = fixture("llama");
    on_every_device("packed memory", |ctx| {
        let mut held = Vec::new();
        for packed in [false, true] {
            // The loader reads the switch (set here, in a single-threaded test run, and restored).
            std::env::set_var("VKFORMERS_FUSED_PROJ", if packed { "1" } else { "0" });
            let g = Graph::new(ctx);
            let before = ctx.device_memory().current;
            let model = Model::load_for_inference(&g, &dir, DType::BF16).unwrap();
            g.sync().unwrap();
            held.push(ctx.device_memory().current - before);
            assert_eq!(model.weights.packs().is_empty(), !packed, "VKFORMERS_FUSED_PROJ switches packing");
            drop(model);
        }
        std::env::remove_var("VKFORMERS_FUSED_PROJ");
        println!("device bytes of the loaded llama fixture: separate {}, packed {}", held[0], held[1]);
        assert!(held[1] <= held[0], "packed weights hold {} bytes, separate {}", held[1], held[0]);
        Ok(())
    });
}

/// Training loads pack each layer's q/k/v and gate/up parameters as row blocks of one storage
/// (`packed_train`: 2 packs a layer, each part a parameter of its own that takes gradients);
/// `VKFORMERS_TRAIN_PACKED=0` keeps every parameter in its own buffer; a pack never mixes
/// trained and frozen parts.
#[test]
fn a_training_load_packs_its_parameters() {
    on_every_device("packed training", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("llama")).unwrap();
        let layers = model.spec.layers.len();
        assert_eq!(model.weights.packs().len(), 2 * layers, "q/k/v and gate/up packed in each layer");
        assert!(model.params.iter().all(|(_, t)| t.requires_grad()), "packed parts are parameters");
        std::env::set_var("VKFORMERS_TRAIN_PACKED", "0");
        let apart = Model::load(&g, &fixture("llama"));
        std::env::remove_var("VKFORMERS_TRAIN_PACKED");
        assert!(apart.unwrap().weights.packs().is_empty(), "VKFORMERS_TRAIN_PACKED=0: nothing packed");
        let lora_base = Model::load_with_trainable(&g, &fixture("llama"), &|n| n.contains("q_proj")).unwrap();
        // q is trainable, k and v frozen: no q/k/v pack; gate/up (frozen) packed.
        assert_eq!(lora_base.weights.packs().len(), layers, "gate/up packs only");
        Ok(())
    });
}
