//! `init_from_config`: a fresh model has the stored names and shapes a `transformers` model of
//! the same config has, its parameters drawn as `_init_weights` draws them, and saves a folder
//! that reloads.

use std::path::PathBuf;

use vkformers_io::ModelWeights;
use vkformers_models::init::{ensure_generation_config, init_from_config};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// The std transformers' own init gives each matrix of a fixture's config
/// (tests/fixtures_init/init_std.json, from tools/parity/init_reference.py).
fn reference_stds() -> serde_json::Value {
    vkformers_io::read_json(fixture("../fixtures_init/init_std.json")).unwrap()
}

/// The sample mean and std of `v`.
fn mean_sd(v: &[f32]) -> (f64, f64) {
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
    let sd = (v.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
    (mean, sd)
}

/// Matrices start at the std transformers draws them with: one `initializer_range` for most,
/// GPT-2's residual projections (gpt2, gpt_bigcode, gpt-sw3: both `c_proj`; nanochat: `o_proj`)
/// at `initializer_range / sqrt(2 * layers)`, openai-gpt's Conv1D layers at 0.02. Both sides are
/// sample stds of at least 256 values (about 4% apart at worst); the rules differ by 1.4x or more.
#[test]
fn matrices_start_at_the_std_transformers_draws_them_with() {
    let reference = reference_stds();
    let cases = reference.as_object().unwrap();
    assert!(cases.len() >= 6, "init references missing");
    on_every_device("init stds", |ctx| {
        for (name, stds) in cases {
            let g = Graph::new(ctx);
            let config = vkformers_io::read_json(fixture(name).join("config.json")).unwrap();
            let m = init_from_config(&g, config, 11).unwrap();
            let out = tempfile::tempdir().unwrap();
            m.save(&g, out.path(), None, u64::MAX).unwrap();
            let ours = ModelWeights::open(out.path()).unwrap();
            let mut checked = 0;
            for (tensor, want) in stds.as_object().unwrap() {
                // A tied head is not stored; the embedding it reads is checked.
                if ours.info(tensor).is_err() && m.spec.tied_head && *tensor == format!("{}.weight", m.spec.head_name) {
                    continue;
                }
                let (mean, sd) = mean_sd(&ours.tensor_f32(tensor).unwrap_or_else(|e| panic!("{name}: {tensor}: {e}")));
                let want = want.as_f64().unwrap();
                assert!(
                    mean.abs() < 0.15 * want && (sd / want - 1.0).abs() < 0.12,
                    "{name}: {tensor} mean {mean} std {sd}, transformers' std {want}"
                );
                checked += 1;
            }
            assert!(checked >= 6, "{name}: {checked} matrices checked");
        }
        Ok(())
    });
}

#[test]
fn a_model_from_a_config_has_the_stored_layout_and_init() {
    let reference = reference_stds();
    on_every_device("init from config", |ctx| {
        for name in ["llama", "gpt2", "qwen2", "gemma"] {
            let g = Graph::new(ctx);
            let config = vkformers_io::read_json(fixture(name).join("config.json")).unwrap();
            let std = config["initializer_range"].as_f64().unwrap();
            let m = init_from_config(&g, config.clone(), 7).unwrap();
            let out = tempfile::tempdir().unwrap();
            m.save(&g, out.path(), None, u64::MAX).unwrap();
            ensure_generation_config(out.path(), &m.config).unwrap();
            let (src, ours) = (ModelWeights::open(fixture(name)).unwrap(), ModelWeights::open(out.path()).unwrap());
            let mut want: Vec<String> = src.names().map(String::from).collect();
            if m.spec.tied_head {
                want.retain(|n| *n != format!("{}.weight", m.spec.head_name));
            }
            let mut got: Vec<String> = ours.names().map(String::from).collect();
            want.sort();
            got.sort();
            assert_eq!(got, want, "{name}: stored names");
            for n in &got {
                assert_eq!(ours.info(n).unwrap().shape, src.info(n).unwrap().shape, "{name}: {n}");
                let v = ours.tensor_f32(n).unwrap();
                let info = ours.info(n).unwrap();
                if n.ends_with("bias") {
                    assert!(v.iter().all(|&x| x == 0.0), "{name}: {n} starts at zero");
                } else if info.shape.len() == 1 {
                    // Norm weights: one, or zero where the norm multiplies by 1 + w (Gemma).
                    let c = if name == "gemma" { 0.0 } else { 1.0 };
                    assert!(v.iter().all(|&x| x == c), "{name}: {n} starts at {c}");
                } else {
                    // transformers' own std where the reference has this matrix (GPT-2's
                    // residual projections are smaller), else `initializer_range`.
                    let std = reference[name][n.as_str()].as_f64().unwrap_or(std);
                    let (mean, sd) = mean_sd(&v);
                    assert!(
                        mean.abs() < 0.1 * std && (sd / std - 1.0).abs() < 0.15,
                        "{name}: {n} mean {mean} std {sd}"
                    );
                }
            }
            let embed = ours.tensor_f32(&format!("{}.weight", m.spec.embed_name)).unwrap();
            let pad = config["pad_token_id"].as_u64().unwrap() as usize;
            assert!(embed[pad * m.spec.hidden..(pad + 1) * m.spec.hidden].iter().all(|&x| x == 0.0), "{name}: pad row");
            assert!(out.path().join("generation_config.json").exists());
            Model::load(&g, out.path()).unwrap();
            // Seeded: the same seed gives the same weights, another seed others.
            let again = init_from_config(&g, config.clone(), 7).unwrap();
            let other = init_from_config(&g, config, 8).unwrap();
            let embed_name = format!("{}.weight", m.spec.embed_name);
            let first = |m: &Model| g.read(m.weights.get(&embed_name).unwrap()).unwrap();
            assert_eq!(first(&m), first(&again));
            assert_ne!(first(&m), first(&other));
        }
        Ok(())
    });
}

/// A new image-text wrapper draws its vision tower and projector as transformers does (see
/// `wrapper_init`): SigLIP's xavier-uniform bounds, lecun-normal convolution, zero projector
/// (gemma3); Pixtral's N(0, vision initializer_range) and the projector's N(0, wrapper's) (mistral3).
#[test]
fn wrapper_vision_towers_start_as_transformers_draws_them() {
    on_every_device("init wrappers", |ctx| {
        let g = Graph::new(ctx);
        let read = |m: &Model, n: &str| -> Vec<f32> {
            let t = m.buffers.iter().find(|(b, _)| b == n).unwrap_or_else(|| panic!("no buffer {n}"));
            g.read(&t.1).unwrap()
        };
        let max_abs = |v: &[f32]| v.iter().fold(0f64, |a, &x| a.max(f64::from(x).abs()));
        let gemma =
            init_from_config(&g, vkformers_io::read_json(fixture("gemma3").join("config.json")).unwrap(), 5).unwrap();
        // q_proj [16, 16]: U(±sqrt(6 / 32)); fc1 [32, 16]: U(±sqrt(6 / 48)).
        for (n, bound) in [
            ("encoder.layers.0.self_attn.q_proj.weight", (6.0f64 / 32.0).sqrt()),
            ("encoder.layers.0.mlp.fc1.weight", (6.0f64 / 48.0).sqrt()),
        ] {
            let v = read(&gemma, &format!("vision_tower.{n}"));
            let m = max_abs(&v);
            assert!(m <= bound && m > 0.8 * bound, "{n}: max |x| {m} for bound {bound}");
        }
        // patch_embedding [16, 3, 8, 8]: lecun normal, std sqrt(1 / 192), truncated at 2σ.
        let v = read(&gemma, "vision_tower.embeddings.patch_embedding.weight");
        let (mean, sd) = mean_sd(&v);
        let want = (1.0f64 / 192.0).sqrt();
        assert!(mean.abs() < 0.1 * want && (sd / want - 1.0).abs() < 0.06, "patch embedding mean {mean} std {sd}");
        assert!(max_abs(&v) <= 2.0 * want / 0.879_625_66 + 1e-6);
        assert!(read(&gemma, "multi_modal_projector.mm_input_projection_weight").iter().all(|&x| x == 0.0));
        assert!(read(&gemma, "vision_tower.post_layernorm.weight").iter().all(|&x| x == 1.0));
        let mistral =
            init_from_config(&g, vkformers_io::read_json(fixture("mistral3").join("config.json")).unwrap(), 5).unwrap();
        for (n, want) in
            [("vision_tower.patch_conv.weight", 0.02), ("multi_modal_projector.patch_merger.merging_layer.weight", 0.2)]
        {
            let (mean, sd) = mean_sd(&read(&mistral, n));
            assert!(
                mean.abs() < 0.1 * want && (sd / want - 1.0).abs() < 0.06,
                "{n}: mean {mean} std {sd}, want {want}"
            );
        }
        assert!(read(&mistral, "vision_tower.ln_pre.weight").iter().all(|&x| x == 1.0));
        // Set VKFORMERS_SAVE_DIR to keep both folders (e.g. to load them in transformers).
        if let Some(root) = std::env::var_os("VKFORMERS_SAVE_DIR").map(PathBuf::from) {
            gemma.save(&g, &root.join("gemma3_init"), None, u64::MAX).unwrap();
            mistral.save(&g, &root.join("mistral3_init"), None, u64::MAX).unwrap();
        }
        Ok(())
    });
}

/// Every fixture's config (so every registered model type, with its joined, per-head, fused,
/// projected, renamed and parameter-free layouts): a model from the config alone has the stored
/// names and shapes of the fixture, and the folder reloads through the load checks.
#[test]
fn every_fixture_config_inits_with_the_stored_names_and_shapes() {
    let root = fixture("");
    let names: Vec<String> = vkformers_models::parity::fixtures(&root)
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.len() >= 50, "fixtures missing under {}", root.display());
    on_every_device("init every fixture", |ctx| {
        for name in names.iter().map(String::as_str) {
            let g = Graph::new(ctx);
            let config = vkformers_io::read_json(fixture(name).join("config.json")).unwrap();
            // Image-text wrappers too: their vision tower and projector are drawn from the config.
            let m = init_from_config(&g, config, 3).unwrap_or_else(|e| panic!("{name}: {e}"));
            let out = tempfile::tempdir().unwrap();
            m.save(&g, out.path(), None, u64::MAX).unwrap();
            let (src, ours) = (ModelWeights::open(fixture(name)).unwrap(), ModelWeights::open(out.path()).unwrap());
            let mut want: Vec<(String, Vec<usize>)> = src
                .names()
                .filter(|n| !(m.spec.tied_head && *n == format!("{}.weight", m.spec.head_name)))
                .map(|n| (n.to_string(), src.info(n).unwrap().shape))
                .collect();
            let mut got: Vec<(String, Vec<usize>)> =
                ours.names().map(|n| (n.to_string(), ours.info(n).unwrap().shape)).collect();
            want.sort();
            got.sort();
            assert_eq!(got, want, "{name}: stored names and shapes");
            Model::load(&g, out.path()).unwrap_or_else(|e| panic!("{name} reload: {e}"));
        }
        Ok(())
    });
}

/// The sinks start as each family's `_init_weights` sets them (`ModelSpec::sinks_init`):
/// gpt-oss draws them, and its router bias `[E]`, from N(0, initializer_range) and zeroes its
/// expert biases; granite_swa zeroes its sinks. gpt-oss's fixture config is widened (32 heads,
/// 128 experts) so the sample stds are over 64 sinks (std error ~9%) and 256 router biases (~4%).
#[test]
fn sinks_and_router_biases_start_as_each_family_draws_them() {
    on_every_device("init sinks", |ctx| {
        let g = Graph::new(ctx);
        let mut config = vkformers_io::read_json(fixture("gpt_oss").join("config.json")).unwrap();
        (config["num_attention_heads"], config["num_local_experts"]) = (32.into(), 128.into());
        let std = config["initializer_range"].as_f64().unwrap();
        let m = init_from_config(&g, config, 3).unwrap();
        let out = tempfile::tempdir().unwrap();
        m.save(&g, out.path(), None, u64::MAX).unwrap();
        let w = ModelWeights::open(out.path()).unwrap();
        let all = |t: &str| -> Vec<f32> {
            (0..2).flat_map(|i| w.tensor_f32(&t.replace("{i}", &i.to_string())).unwrap()).collect()
        };
        for (t, tol) in [("model.layers.{i}.self_attn.sinks", 0.3), ("model.layers.{i}.mlp.router.bias", 0.15)] {
            let (mean, sd) = mean_sd(&all(t));
            assert!(mean.abs() < 0.3 * std && (sd / std - 1.0).abs() < tol, "gpt_oss {t}: mean {mean} std {sd}");
        }
        for t in ["gate_up_proj_bias", "down_proj_bias"] {
            assert!(all(&format!("model.layers.{{i}}.mlp.experts.{t}")).iter().all(|&x| x == 0.0), "gpt_oss {t}");
        }
        let config = vkformers_io::read_json(fixture("granite_swa").join("config.json")).unwrap();
        let m = init_from_config(&g, config, 3).unwrap();
        m.save(&g, out.path(), None, u64::MAX).unwrap();
        let w = ModelWeights::open(out.path()).unwrap();
        assert!(w.tensor_f32("model.layers.0.self_attn.sinks").unwrap().iter().all(|&x| x == 0.0));
        Ok(())
    });
}
