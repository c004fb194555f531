//! Saving: a loaded fixture model saved by vkformers reloads bit-identically, the bytes are
//! deterministic, and the folder is a Hugging Face folder (config, safetensors with the stored
//! names, shapes and f32 dtype). Set VKFORMERS_SAVE_DIR to keep the folders, e.g. for
//! `tools/parity/make_fixtures.py --check-reload`.

mod common;

use std::path::PathBuf;

use vkformers_io::ModelWeights;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

use common::write_model;

fn fixture_dir(name: &str) -> PathBuf {
    std::env::var_os("VKFORMERS_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures"))
        .join(name)
}

fn out_root() -> PathBuf {
    std::env::var_os("VKFORMERS_SAVE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("vkformers-save-test-{}", std::process::id())))
}

#[test]
fn saved_models_reload_bit_identically_with_deterministic_bytes() {
    let root = out_root();
    on_every_device("save", |ctx| {
        // Every fixture: each weight map (transposes, fused splits, per-head groups, joins) must
        // give back exactly the stored tensors.
        let root_dir = fixture_dir("");
        let names: Vec<String> = vkformers_models::parity::fixtures(&root_dir)
            .iter()
            .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(names.len() >= 20, "fixtures missing under {}", root_dir.display());
        for name in names.iter().map(String::as_str) {
            let g = Graph::new(ctx);
            let model = Model::load(&g, &fixture_dir(name)).unwrap();
            let (a, b) = (root.join(name), root.join(format!("{name}.again")));
            model.save(&g, &a, Some(&fixture_dir(name)), u64::MAX).unwrap();
            if model.spec.carried.is_empty() {
                model.save(&g, &b, None, u64::MAX).unwrap();
            } else {
                // An image-text wrapper copies its vision tower from the folder it came from
                // (below: byte for byte); with no folder it says so instead of dropping it.
                let e = model.save(&g, &b, None, u64::MAX).unwrap_err().to_string();
                assert!(e.contains("needs the folder it was loaded from"), "{name}: {e}");
                model.save(&g, &b, Some(&fixture_dir(name)), u64::MAX).unwrap();
            }
            let bytes = |d: &PathBuf| std::fs::read(d.join("model.safetensors")).unwrap();
            assert_eq!(bytes(&a), bytes(&b), "{name}: saving twice gives the same bytes");
            // Stored names, shapes and values equal the source file exactly (f32 in, f32 out).
            let (src, out) = (ModelWeights::open(fixture_dir(name)).unwrap(), ModelWeights::open(&a).unwrap());
            let names: Vec<_> = src.names().map(String::from).collect();
            assert_eq!(names, out.names().map(String::from).collect::<Vec<_>>(), "{name}: tensor names");
            for n in &names {
                assert_eq!(src.info(n).unwrap().shape, out.info(n).unwrap().shape, "{name}: {n} shape");
                assert_eq!(src.tensor_bytes(n).unwrap().data, out.tensor_bytes(n).unwrap().data, "{name}: {n} bytes");
            }
            // vkformers reloads it to bit-identical parameters.
            let again = Model::load(&g, &a).unwrap();
            let (p0, p1) = (model.hf_params(&g).unwrap(), again.hf_params(&g).unwrap());
            assert!(p0
                .iter()
                .zip(&p1)
                .all(|(x, y)| x.name == y.name
                    && x.data.iter().map(|v| v.to_bits()).eq(y.data.iter().map(|v| v.to_bits()))));
            let cfg = vkformers_io::read_json(a.join("config.json")).unwrap();
            assert_eq!(cfg["model_type"], model.config["model_type"]);
            // Encoder folders have none (transformers writes one only for models that generate).
            let has_generation = fixture_dir(name).join("generation_config.json").exists();
            assert_eq!(a.join("generation_config.json").exists(), has_generation, "{name}: generation config copied");
            std::fs::remove_dir_all(&b).unwrap();
        }
        Ok(())
    });
    if std::env::var_os("VKFORMERS_SAVE_DIR").is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[test]
fn missing_and_corrupt_inputs_are_clear_errors() {
    on_every_device("load errors", |ctx| {
        let g = Graph::new(ctx);
        let e = Model::load(&g, std::path::Path::new("/nonexistent/model")).err().expect("error").to_string();
        assert!(e.contains("/nonexistent/model"), "{e}");
        let dir = std::env::temp_dir().join(format!("vkformers-bad-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(fixture_dir("llama").join("config.json"), dir.join("config.json")).unwrap();
        std::fs::write(dir.join("model.safetensors"), b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":").unwrap();
        let e = Model::load(&g, &dir).err().expect("error").to_string();
        assert!(e.contains("model.safetensors"), "{e}");
        let mut cfg = vkformers_io::read_json(dir.join("config.json")).unwrap();
        cfg["model_type"] = "mamba".into();
        vkformers_io::write_json_atomic(dir.join("config.json"), &cfg).unwrap();
        let e = Model::load(&g, &dir).err().expect("error").to_string();
        assert!(e.contains("mamba") && e.contains("architectures"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        Ok(())
    });
}

/// Writes the fixture's tensors again with `dtype`, `max_shard_bytes` and, when `add_head`, a
/// stored copy of the tied head, next to its config.
fn rewrite(name: &str, out: &std::path::Path, dtype: vkformers_io::Dtype, max_shard_bytes: u64, add_head: bool) {
    let src = ModelWeights::open(fixture_dir(name)).unwrap();
    let mut data: Vec<(String, Vec<usize>, Vec<f32>)> = src
        .tensors()
        .into_iter()
        .map(|i| (i.name.clone(), i.shape.clone(), src.tensor_f32(&i.name).unwrap()))
        .collect();
    if add_head {
        let embed = data.iter().find(|t| t.0.ends_with("embed_tokens.weight")).unwrap().clone();
        data.push(("lm_head.weight".into(), embed.1, embed.2));
    }
    write_model(out, &data, (dtype, max_shard_bytes), &fixture_dir(name));
}

#[test]
fn sharded_bf16_and_stored_tied_head_load_as_transformers_would() {
    let root = out_root().join("variants");
    on_every_device("load variants", |ctx| {
        let g = Graph::new(ctx);
        let base = Model::load(&g, &fixture_dir("llama_llama3")).unwrap();
        let base_params = base.hf_params(&g).unwrap();
        // Sharded f32 with a stored copy of the tied head: same parameters, head ignored.
        let sharded = root.join("sharded");
        rewrite("llama_llama3", &sharded, vkformers_io::Dtype::F32, 20_000, true);
        assert!(sharded.join("model.safetensors.index.json").exists());
        let m = Model::load(&g, &sharded).unwrap();
        assert_eq!(m.hf_params(&g).unwrap(), base_params, "sharded + stored tied head");
        // bf16 weights load as their exact f32 widening.
        let bf = root.join("bf16");
        rewrite("llama_llama3", &bf, vkformers_io::Dtype::BF16, u64::MAX, false);
        let m = Model::load(&g, &bf).unwrap();
        for (got, want) in m.hf_params(&g).unwrap().iter().zip(&base_params) {
            let rounded: Vec<f32> = want.data.iter().map(|v| half::bf16::from_f32(*v).to_f32()).collect();
            assert_eq!(got.data, rounded, "{}", got.name);
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&root);
}
