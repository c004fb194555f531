//! `mpt` (MosaicML MPT): ALiBi with MPT's slopes, bias-free weight-only LayerNorms, one fused
//! bias-free `Wqkv` (q, k, v rows in that order) clamped to `[−clip_qkv, clip_qkv]` when set, a
//! bias-free `out_proj`, a bias-free exact-GELU MLP of `4 · d_model`, and a head tied to `wte`.
//! As in transformers' `modeling_mpt`: the slopes use `alibi_bias_max` 8 whatever the config
//! says, `softmax_scale` defaults to `head_dim^-0.5`, and `expansion_ratio`, `no_bias`,
//! `learned_pos_emb`, `logit_scale`, `qk_ln` and `attn_type` are not read.

use serde_json::Value;
use vkformers_kernels::activation::Activation;

use crate::error::{ModelError, Result};
use crate::spec::{AttnSpec, LayerNames, LayerSpec, MapEntry, MlpSpec, ModelSpec, Norm};

/// `build_mpt_alibi_tensor`'s slopes in f32: `1 / 2^(k · max / p)` for k = 1..p with p the next
/// power of two; for other head counts the odd-indexed slopes first, then the even, cut to n.
fn slopes(heads: usize, bias_max: f32) -> Vec<f32> {
    let p = heads.next_power_of_two();
    let step = bias_max / p as f32;
    let all: Vec<f32> = (1..=p).map(|k| 1.0 / 2f32.powf(k as f32 * step)).collect();
    if p == heads {
        return all;
    }
    all.iter().skip(1).step_by(2).chain(all.iter().step_by(2)).take(heads).copied().collect()
}

fn names() -> LayerNames {
    let parts = ["norm_1", "attn.q", "attn.k", "attn.v", "attn.out_proj", "norm_2", "ffn.up_proj", "ffn.down_proj"];
    LayerNames::plain("transformer.blocks.{i}", parts)
}

fn size(cfg: &Value, key: &str, default: u64) -> Result<usize> {
    match cfg.get(key).filter(|v| !v.is_null()) {
        None => Ok(default as usize),
        Some(v) => v.as_u64().filter(|&n| n > 0 && n <= 1 << 20).map(|n| n as usize).ok_or_else(|| {
            ModelError::Config(format!("`{key}` is {v}; it must be a positive integer up to {}", 1 << 20))
        }),
    }
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let (hidden, heads, layers) = (size(cfg, "d_model", 2048)?, size(cfg, "n_heads", 16)?, size(cfg, "n_layers", 24)?);
    let vocab = cfg.get("vocab_size").and_then(Value::as_u64).unwrap_or(50368) as usize;
    let attn_cfg = cfg.get("attn_config").cloned().unwrap_or(Value::Null);
    let head_dim = hidden / heads;
    let eps = cfg.get("layer_norm_epsilon").and_then(Value::as_f64).unwrap_or(1e-5) as f32;
    let norm = Norm::Layer { eps, bias: false };
    let mut attn = AttnSpec::new(heads, heads, head_dim);
    attn.alibi = Some(slopes(heads, 8.0));
    attn.clip_qkv = attn_cfg.get("clip_qkv").and_then(Value::as_f64).filter(|&c| c != 0.0).map(|c| c as f32);
    if let Some(s) = attn_cfg.get("softmax_scale").and_then(Value::as_f64) {
        attn.scale = s as f32;
    }
    let mlp = MlpSpec::Plain { intermediate: 4 * hidden, act: Activation::Gelu, bias: false };
    let layer = LayerSpec::pre_norm(norm.clone(), attn, mlp);
    let mut spec = ModelSpec::new("mpt", (vocab, hidden), layer, layers, norm, names());
    spec.tied_head = super::common::tied_by_default(cfg);
    spec.embed_name = "transformer.wte".into();
    spec.final_norm_name = "transformer.norm_f".into();
    let parts = [("q", hidden), ("k", hidden), ("v", hidden)];
    spec.weight_map = MapEntry::fused_qkv(layers, "transformer.blocks.{i}.attn", "Wqkv", parts, 1, &["weight"]);
    Ok(spec)
}

#[cfg(test)]
mod tests {
    #[test]
    fn slopes_follow_build_mpt_alibi_tensor() {
        // 4 heads: 1/2^2, 1/2^4, 1/2^6, 1/2^8. 6 heads (p = 8, step 1): odd k first, then even.
        assert_eq!(super::slopes(4, 8.0), vec![0.25, 0.0625, 0.015625, 0.00390625]);
        let six: Vec<f32> = [2, 4, 6, 8, 1, 3].iter().map(|&k| 1.0 / 2f32.powi(k)).collect();
        assert_eq!(super::slopes(6, 8.0), six);
    }
}
