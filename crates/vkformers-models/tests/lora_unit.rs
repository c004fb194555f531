//! LoRA config, target matching, init and adapter files.

use std::path::PathBuf;
use std::rc::Rc;

use serde_json::json;
use vkformers_models::decoder::{forward, Batch};
use vkformers_models::lora::{self, Adapter, LoraConfig, SampleKeys, Targets};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(kind: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests").join(kind).join(name)
}

#[test]
fn config_round_trips_and_scales() {
    let mut c = LoraConfig::new(4, 8.0, Targets::Names(vec!["v_proj".into(), "q_proj".into()]));
    c.lora_dropout = 0.05;
    c.modules_to_save = vec!["lm_head".into()];
    let back = LoraConfig::from_json(&c.to_json(None)).unwrap();
    assert_eq!(back.target_modules, Targets::Names(vec!["q_proj".into(), "v_proj".into()]));
    assert_eq!((back.r, back.lora_alpha, back.lora_dropout), (4, 8.0, 0.05));
    assert_eq!(back.modules_to_save, c.modules_to_save);
    assert_eq!(c.scale(), 2.0);
    c.use_rslora = true;
    assert_eq!(c.scale(), 4.0);
    let regex = LoraConfig::new(2, 4.0, Targets::Regex(r".*\.q_proj".into()));
    assert_eq!(LoraConfig::from_json(&regex.to_json(None)).unwrap().target_modules, regex.target_modules);
}

#[test]
fn config_refuses_what_it_does_not_implement() {
    let base = json!({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]});
    assert!(LoraConfig::from_json(&base).is_ok());
    for (k, v) in [("use_dora", json!(true)), ("bias", json!("all")), ("rank_pattern", json!({"q_proj": 8}))] {
        let mut bad = base.clone();
        bad[k] = v;
        let err = LoraConfig::from_json(&bad).unwrap_err();
        assert!(err.contains(k), "{k}: {err}");
    }
    let mut ia3 = base.clone();
    ia3["peft_type"] = json!("IA3");
    assert!(LoraConfig::from_json(&ia3).is_err());
}

#[test]
fn cli_targets() {
    assert_eq!(Targets::parse_cli("all-linear"), Targets::AllLinear);
    assert_eq!(Targets::parse_cli("q_proj, v_proj"), Targets::Names(vec!["q_proj".into(), "v_proj".into()]));
    assert_eq!(Targets::parse_cli(r".*\.q_proj"), Targets::Regex(r".*\.q_proj".into()));
}

/// Our `all-linear` and name matching select exactly the modules PEFT selected for the same
/// config (the fixtures' saved `target_modules` / adapter keys).
#[test]
fn target_matching_equals_peft() {
    on_every_device("lora targets", |ctx| {
        let g = Graph::new(ctx);
        for name in ["qwen3", "llama", "gemma", "gpt2"] {
            let model = Model::load(&g, &fixture("fixtures", name)).unwrap();
            let peft = Adapter::load(&fixture("fixtures_lora", name)).unwrap();
            let mut cfg = peft.config.clone();
            if name == "qwen3" {
                cfg.target_modules = Targets::AllLinear; // what the fixture was made with
            }
            let mut ours: Vec<String> =
                lora::target_modules(&model, &cfg).unwrap().into_iter().map(|m| m.name).collect();
            ours.sort();
            let mut want: Vec<String> = peft
                .tensors
                .keys()
                .filter_map(|k| k.strip_prefix("base_model.model.")?.strip_suffix(".lora_A.weight").map(str::to_string))
                .collect();
            want.sort();
            assert_eq!(ours, want, "{name}");
        }
        let model = Model::load(&g, &fixture("fixtures", "llama")).unwrap();
        let typo = LoraConfig::new(4, 8.0, Targets::Names(vec!["qproj".into()]));
        let err = lora::target_modules(&model, &typo).unwrap_err().to_string();
        assert!(err.contains("q_proj"), "{err}");
        Ok(())
    });
}

/// PEFT's init: A ~ U(−1/sqrt(in), 1/sqrt(in)), B = 0, so a new adapter leaves the logits
/// exactly as the base's; the same seed gives the same A. Save + load round-trips.
#[test]
fn fresh_adapter_is_identity_and_round_trips() {
    on_every_device("lora init", |ctx| {
        let g = Graph::new(ctx);
        let dir = fixture("fixtures", "llama");
        let cfg = LoraConfig::new(4, 8.0, Targets::AllLinear);
        let mut model = lora::load_frozen(&g, &dir, &[]).unwrap();
        let a1 = lora::new_adapter(&model, cfg.clone(), 7).unwrap();
        let a2 = lora::new_adapter(&model, cfg.clone(), 7).unwrap();
        let a3 = lora::new_adapter(&model, cfg, 8).unwrap();
        let key = "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight";
        let (x, y, z) = (&a1.tensors[key].data, &a2.tensors[key].data, &a3.tensors[key].data);
        assert_eq!(x, y);
        assert_ne!(x, z);
        let bound = 1.0 / (64f32).sqrt(); // down_proj: in = intermediate = 64
        assert!(x.iter().all(|v| v.abs() <= bound) && x.iter().any(|v| v.abs() > bound * 0.9));
        assert!(a1.tensors.iter().filter(|(k, _)| k.contains("lora_B")).all(|(_, t)| t.data.iter().all(|v| *v == 0.0)));

        let (ids, mask) = ([5, 6, 7, 8], [1, 1, 1, 1]);
        let batch = Batch { ids: &ids, mask: &mask, batch: 1, seq: 4 };
        let base = g.read(&forward(&g, &model.spec, &model.weights, &batch).unwrap()).unwrap();
        let lora = lora::attach(&g, &mut model, &a1, 0).unwrap();
        let with = g.read(&forward(&g, &model.spec, &model.weights, &batch).unwrap()).unwrap();
        assert_eq!(base, with);

        let out = tempfile::tempdir().unwrap();
        lora.save(&g, out.path()).unwrap();
        let back = Adapter::load(out.path()).unwrap();
        assert_eq!(back.tensors.len(), a1.tensors.len());
        for (k, t) in &a1.tensors {
            assert_eq!(back.tensors[k].data, t.data, "{k}");
        }
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.path().join("adapter_config.json")).unwrap()).unwrap();
        assert_eq!(saved["target_modules"].as_array().unwrap().len(), 14); // all-linear, resolved
        Ok(())
    });
}

/// LoRA dropout (Philox): only while training; the same step replays the same masks, another
/// step draws others; without gradients the term is the dropout-free one.
#[test]
fn lora_dropout_is_replayable_and_off_in_inference() {
    on_every_device("lora dropout", |ctx| {
        let g = Graph::new(ctx);
        let mut adapter = Adapter::load(&fixture("fixtures_lora", "llama")).unwrap();
        let run = |model: &Model| {
            let (ids, mask) = ([5, 6, 7, 8, 9, 10], [1; 6]);
            let batch = Batch { ids: &ids, mask: &mask, batch: 1, seq: 6 };
            let out = g.read(&forward(&g, &model.spec, &model.weights, &batch).unwrap()).unwrap();
            g.clear_tape();
            out
        };
        let mut plain = lora::load_frozen(&g, &fixture("fixtures", "llama"), &[]).unwrap();
        lora::attach(&g, &mut plain, &adapter, 3).unwrap();
        let reference = run(&plain);
        adapter.config.lora_dropout = 0.5;
        let mut model = lora::load_frozen(&g, &fixture("fixtures", "llama"), &[]).unwrap();
        lora::attach(&g, &mut model, &adapter, 3).unwrap();
        model.weights.lora().set_step(0);
        let (a, b) = (run(&model), run(&model));
        assert_eq!(a, b, "same step, same masks");
        assert_ne!(a, reference, "dropout changed nothing");
        model.weights.lora().set_step(1);
        assert_ne!(run(&model), a, "another step should draw other masks");
        let inference = g.no_grad(|| run(&model));
        assert_eq!(inference, reference);
        Ok(())
    });
}

/// Row-keyed LoRA dropout: a sample's logits are the same alone (batch 1, unpadded) and
/// second in a batch of 2 padded to a longer row, as long as it keeps its global sample index;
/// another index draws other masks.
#[test]
fn lora_dropout_keyed_by_sample_is_the_same_in_any_batch() {
    on_every_device("lora dropout keyed", |ctx| {
        let g = Graph::new(ctx);
        let mut adapter = Adapter::load(&fixture("fixtures_lora", "llama")).unwrap();
        adapter.config.lora_dropout = 0.5;
        let mut model = lora::load_frozen(&g, &fixture("fixtures", "llama"), &[]).unwrap();
        lora::attach(&g, &mut model, &adapter, 3).unwrap();
        let run = |ids: &[i32], mask: &[i32], samples: Vec<u64>| {
            let (batch, seq) = (samples.len(), ids.len() / samples.len());
            model.weights.lora().set_samples(Some(SampleKeys { samples: Rc::new(samples), seq, decoder_seq: 0 }));
            let out = forward(&g, &model.spec, &model.weights, &Batch { ids, mask, batch, seq }).unwrap();
            let out = g.read(&out).unwrap();
            g.clear_tape();
            out
        };
        let (a, b) = ([5, 6, 7, 8, 9, 10], [11, 12, 13, 14]);
        let pair = run(&[&a[..], &b, &[0, 0]].concat(), &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0], vec![7, 9]);
        let alone = run(&b, &[1; 4], vec![9]);
        let vocab = alone.len() / 4;
        let second = &pair[6 * vocab..10 * vocab];
        let diff = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| (p - q).abs()).fold(0f32, f32::max);
        let scale = alone.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(diff(second, &alone) <= 1e-5 * scale, "sample 9 alone vs in a batch: {}", diff(second, &alone));
        let other = run(&b, &[1; 4], vec![8]);
        assert!(diff(&other, &alone) > 1e-3 * scale, "another sample index should draw other masks");
        Ok(())
    });
}

/// `load_with_adapter` (what `--adapter DIR` uses) gives the PEFT fixture's logits, and the
/// KV-cached forward adds the same LoRA terms as the full one.
#[test]
fn load_with_adapter_matches_peft_and_the_cache() {
    on_every_device("lora load_with_adapter", |ctx| {
        let g = Graph::new(ctx);
        let (model, lora) =
            lora::load_with_adapter(&g, &fixture("fixtures", "gpt2"), &fixture("fixtures_lora", "gpt2")).unwrap();
        assert_eq!(lora.modules.len(), 4);
        let reference =
            vkformers_io::ModelWeights::open_file(fixture("fixtures_lora", "gpt2").join("reference.safetensors"))
                .unwrap();
        let want = reference.tensor_f32("logits").unwrap();
        let raw = reference.tensor_bytes("input_ids").unwrap();
        let ids: Vec<i32> = raw.data.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let (t, v) = (8, 128);
        let row0 = &ids[..t];
        let mask = vec![1; t];
        let batch = Batch { ids: row0, mask: &mask, batch: 1, seq: t };
        let full = g.no_grad(|| g.read(&forward(&g, &model.spec, &model.weights, &batch).unwrap())).unwrap();
        let rel = lora::parity::rel_l2(&full, &want[..t * v]);
        assert!(rel <= 1e-5, "logits with the adapter off PEFT's by {rel:e}");
        let cache = vkformers_models::decoder::KvCache::new(&g, &model.spec, t).unwrap();
        let step = |ids: &[i32]| {
            let mask = vec![1; ids.len()];
            let b = Batch { ids, mask: &mask, batch: 1, seq: ids.len() };
            vkformers_models::decoder::forward_cached(&g, &model.spec, &model.weights, &b, &cache).unwrap()
        };
        let cached = g
            .no_grad(|| {
                let _ = step(&row0[..5]);
                g.read(&step(&row0[5..]))
            })
            .unwrap();
        let rel = lora::parity::rel_l2(&cached, &full[5 * v..]);
        assert!(rel <= 1e-5, "cached logits off the full forward by {rel:e}");
        Ok(())
    });
}

/// OPT's project_in/project_out are Linear modules that PEFT's `all-linear` adapts; vkformers
/// adds no term there, so it refuses instead of silently training a different adapter.
#[test]
fn all_linear_refuses_modules_without_a_lora_term() {
    on_every_device("lora opt all-linear", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("fixtures", "opt")).unwrap();
        assert!(model.spec.project_in.is_some(), "the OPT fixture has word_embed_proj_dim != hidden_size");
        let err = lora::target_modules(&model, &LoraConfig::new(4, 8.0, Targets::AllLinear)).unwrap_err().to_string();
        assert!(err.contains("project_in") || err.contains("project_out"), "{err}");
        let ok = LoraConfig::new(4, 8.0, Targets::Names(vec!["q_proj".into()]));
        assert!(lora::target_modules(&model, &ok).is_ok());
        Ok(())
    });
}

/// Peak device memory of two training steps (forward, backward, AdamW): LoRA on q/v with the
/// base frozen holds no base gradients or moments, so it peaks below full training.
#[test]
fn lora_training_peaks_below_full_training() {
    use vkformers_tensor::optim::{AdamW, Param};
    on_every_device("lora memory", |ctx| {
        let dir = fixture("fixtures", "llama");
        let (ids, mask) = ([5, 6, 7, 8, 9, 10, 11, 12], [1; 8]);
        let batch = Batch { ids: &ids, mask: &mask, batch: 1, seq: 8 };
        let hp = vkformers_kernels::optim::AdamW { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-6, weight_decay: 0.0 };
        let mut peaks = Vec::new();
        for use_lora in [false, true] {
            let g = Graph::new(ctx);
            ctx.reset_peak_memory();
            let start = ctx.device_memory().current;
            let (model, params): (Model, Vec<Param>) = if use_lora {
                let mut m = lora::load_frozen(&g, &dir, &[]).unwrap();
                let targets = Targets::Names(vec!["q_proj".into(), "v_proj".into()]);
                let a = lora::new_adapter(&m, LoraConfig::new(4, 8.0, targets), 1).unwrap();
                let p = lora::attach(&g, &mut m, &a, 0).unwrap().params();
                (m, p)
            } else {
                let m = Model::load(&g, &dir).unwrap();
                let p = m.params.iter().map(|(_, t)| Param { tensor: t.clone(), decay: true }).collect();
                (m, p)
            };
            let mut opt = AdamW::new(hp, 0.0);
            for _ in 0..2 {
                let logits = forward(&g, &model.spec, &model.weights, &batch).unwrap();
                let loss = vkformers_models::decoder::causal_lm_loss(&g, &logits, &ids, 1, 8).unwrap();
                g.backward(&loss).unwrap();
                opt.step(&g, &params).unwrap();
                g.sync().unwrap();
            }
            if use_lora {
                assert!(model.params.iter().all(|(_, p)| p.grad().is_none()), "a frozen weight has a gradient");
            }
            peaks.push(ctx.device_memory().peak - start);
        }
        let weights: u64 = 26784 * 4; // the fixture's parameters in f32
        assert!(peaks[1] + weights < peaks[0], "LoRA peak {} B vs full {} B", peaks[1], peaks[0]);
        Ok(())
    });
}
