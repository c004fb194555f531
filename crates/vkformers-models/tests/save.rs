//! Saving: a loaded fixture model saved by vkformers reloads bit-identically, the bytes are
//! deterministic, and the folder is a Hugging Face folder (config, safetensors with the stored
//! names, shapes and f32 dtype). Set VKFORMERS_SAVE_DIR to keep the folders, e.g. for
//! `tools/parity/make_fixtures.py --check-reload`.

use std::path::PathBuf;

use vkformers_io::ModelWeights;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

const FIXTURES: [&str; 7] = ["llama", "llama_llama3", "mistral", "qwen2", "qwen3", "gemma", "gpt2"];

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
        for name in FIXTURES {
            let g = Graph::new(ctx);
            let model = Model::load(&g, &fixture_dir(name)).unwrap();
            let (a, b) = (root.join(name), root.join(format!("{name}.again")));
            model.save(&g, &a, Some(&fixture_dir(name)), u64::MAX).unwrap();
            model.save(&g, &b, None, u64::MAX).unwrap();
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
            assert!(a.join("generation_config.json").exists(), "{name}: generation config copied");
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
