//! The LoRA adapter targets: `adapter_config.json` as `--adapter` reads it (PEFT's fields, the
//! target modules matched against a model's linear modules, the saved-module rule, the scale,
//! and the config PEFT would get back), and `adapter_model.safetensors` read and checked
//! against the modules a config targets, as `Adapter::load` and `attach` do before any GPU work.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use vkformers_models::lora::attach::is_saved_module;
use vkformers_models::lora::modules::targeted;
use vkformers_models::lora::{Adapter, LinearModule, LoraConfig, ADAPTER_CONFIG, ADAPTER_WEIGHTS};
use vkformers_models::weights::HostTensor;

use crate::targets::Ctx;

/// The linear modules of `tests/fixtures/llama` (hidden 32, 2 query heads of 16 and one KV
/// head, MLP 64, 2 layers, untied head over 256 ids) as `linear_modules` lists them.
fn llama_modules() -> Vec<LinearModule> {
    let shapes = [
        ("self_attn.q_proj", 32, 32),
        ("self_attn.k_proj", 16, 32),
        ("self_attn.v_proj", 16, 32),
        ("self_attn.o_proj", 32, 32),
        ("mlp.gate_proj", 64, 32),
        ("mlp.up_proj", 64, 32),
        ("mlp.down_proj", 32, 64),
    ];
    let mut out = Vec::new();
    for layer in 0..2 {
        for (module, rows, cols) in shapes {
            out.push(module_of(&format!("model.layers.{layer}.{module}"), rows, cols, false));
        }
    }
    out.push(module_of("lm_head", 256, 32, true));
    out
}

fn module_of(name: &str, out_features: usize, in_features: usize, is_head: bool) -> LinearModule {
    LinearModule {
        name: name.to_string(),
        parts: vec![(format!("{name}.weight"), out_features)],
        groups: 1,
        in_features,
        out_features,
        conv1d: false,
        is_head,
    }
}

/// The fixture adapter's own config folder (the `adapter_weights` target's config).
const LLAMA_ADAPTER: &str = "tests/fixtures_lora/llama";

/// Seeds: every PEFT fixture's `adapter_config.json`.
pub fn config_seeds(root: &Path) -> Vec<Vec<u8>> {
    crate::targets::files_named(root, "tests/fixtures_lora", ADAPTER_CONFIG)
}

/// Seeds: a few fixture adapters' weights (dense, MoE experts, modules_to_save).
pub fn weight_seeds(root: &Path) -> Vec<Vec<u8>> {
    ["llama", "llama_modules_to_save", "gpt_oss_experts", "bart"]
        .iter()
        .filter_map(|d| std::fs::read(root.join("tests/fixtures_lora").join(d).join(ADAPTER_WEIGHTS)).ok())
        .collect()
}

pub fn adapter_config(_: &Ctx, input: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(input) else { return };
    let Ok(config) = LoraConfig::from_json(&v) else { return };
    let _ = config.scale();
    let modules = llama_modules();
    for m in &modules {
        let _ = is_saved_module(&config.modules_to_save, &format!("{}.weight", m.name));
    }
    let hit = targeted(&modules, &config.target_modules).unwrap_or_default();
    // What vkformers saves reads back with the same rank and scale (what the math uses).
    let names: Vec<String> = hit.iter().map(|m| m.name.clone()).collect();
    let saved = config.to_json(Some(&names));
    match LoraConfig::from_json(&saved) {
        Ok(back) => assert!(
            back.r == config.r && back.scale() == config.scale(),
            "a saved adapter_config.json reads back with r {} alpha {}, not r {} alpha {}",
            back.r,
            back.lora_alpha,
            config.r,
            config.lora_alpha
        ),
        Err(e) => panic!("a saved adapter_config.json does not read back: {e}\n{saved}"),
    }
    let adapter = Adapter { config, tensors: BTreeMap::<String, HostTensor>::new() };
    for m in &hit {
        let _ = adapter.pair(m);
    }
}

pub fn adapter_weights(ctx: &Ctx, input: &[u8]) {
    let dir = ctx.dir.path().join("adapter");
    std::fs::create_dir_all(&dir).expect("adapter folder");
    let config = std::fs::read(crate::root().join(LLAMA_ADAPTER).join(ADAPTER_CONFIG)).expect("llama adapter config");
    std::fs::write(dir.join(ADAPTER_CONFIG), config).expect("scratch write");
    std::fs::write(dir.join(ADAPTER_WEIGHTS), input).expect("scratch write");
    let Ok(adapter) = Adapter::load(&dir) else { return };
    for m in targeted(&llama_modules(), &adapter.config.target_modules).unwrap_or_default() {
        let _ = adapter.pair(&m);
    }
}
