//! Starting values of an image-text wrapper's own modules (the vision tower and projector that
//! `ModelSpec::carried` names) for `init_from_config`: names and shapes from the wrapper config's
//! `vision_config` (transformers' defaults where a key is absent), values drawn as transformers'
//! `_init_weights` draws them, so the saved folder loads in transformers as the wrapper.
//!
//! - `gemma3` (SigLIP tower, `SiglipPreTrainedModel._init_weights`): attention and MLP matrices
//!   xavier-uniform (bound `sqrt(6 / (fan_in + fan_out))`), MLP biases N(0, 1e-6), the patch
//!   convolution and the pooling head's output projection lecun-normal (N(0, 1/fan_in) truncated
//!   at ±2σ), position embeddings N(0, 1/width), LayerNorms 1 and 0; the projector's matrix and
//!   its (1 + w) RMSNorm zeros (`Gemma3PreTrainedModel`).
//! - `axk2`: not a tower but its DSA indexers (`dsa_indexer`).
//! - `mistral3` (Pixtral tower): every matrix N(0, vision `initializer_range`), RMSNorms 1; the
//!   projector's matrices N(0, the wrapper's `initializer_range`), biases 0.

use serde_json::Value;

use crate::init::Normal;
use crate::spec::VisionTower;

/// How one tensor starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Draw {
    Zeros,
    Ones,
    Normal(f64),
    /// N(0, std²) truncated at ±2σ of the untruncated normal whose truncation has std `std`
    /// (torch's `variance_scaling_(.., "truncated_normal")`).
    TruncNormal(f64),
    /// U(−bound, bound).
    Uniform(f64),
}

/// One planned tensor: stored name, shape, draw.
pub(crate) type Planned = (String, Vec<usize>, Draw);

fn get(cfg: &Value, key: &str, default: u64) -> usize {
    cfg.get(key).and_then(Value::as_u64).unwrap_or(default) as usize
}

fn xavier(rows: usize, cols: usize) -> Draw {
    Draw::Uniform((6.0 / (rows + cols) as f64).sqrt())
}

fn lecun(fan_in: usize) -> Draw {
    Draw::TruncNormal((1.0 / fan_in as f64).sqrt())
}

/// The wrapper's own tensors for its tower, from the wrapper config `cfg`; `text_h` is the text
/// model's hidden size.
pub(crate) fn plan(tower: VisionTower, cfg: &Value, text_h: usize) -> Vec<Planned> {
    let v = cfg.get("vision_config").cloned().unwrap_or(Value::Null);
    match tower {
        VisionTower::SiglipGemma3 => siglip(&v, text_h),
        VisionTower::PixtralMistral3 => pixtral(&v, cfg, text_h),
        VisionTower::DsaIndexer => dsa_indexer(cfg, text_h),
    }
}

/// DeepSeek-V3.2's sparse attention indexer of every layer (A.X-K2), as `_init_weights` draws a
/// Linear (N(0, `initializer_range`)) and a LayerNorm (1, 0): `wq_b [heads·D, q_lora_rank]`,
/// `wk [D, H]`, `k_norm` over D, `weights_proj [heads, H]`.
fn dsa_indexer(cfg: &Value, h: usize) -> Vec<Planned> {
    let std = Draw::Normal(cfg.get("initializer_range").and_then(Value::as_f64).unwrap_or(0.02));
    let (heads, d) = (get(cfg, "index_n_heads", 16), get(cfg, "index_head_dim", 128));
    let q_rank = get(cfg, "q_lora_rank", 384);
    let mut out: Vec<Planned> = Vec::new();
    for i in 0..get(cfg, "num_hidden_layers", 48) {
        let p = format!("model.layers.{i}.self_attn.indexer");
        out.push((format!("{p}.wq_b.weight"), vec![heads * d, q_rank], std));
        out.push((format!("{p}.wk.weight"), vec![d, h], std));
        out.push((format!("{p}.k_norm.weight"), vec![d], Draw::Ones));
        out.push((format!("{p}.k_norm.bias"), vec![d], Draw::Zeros));
        out.push((format!("{p}.weights_proj.weight"), vec![heads, h], std));
    }
    out
}

fn siglip(v: &Value, text_h: usize) -> Vec<Planned> {
    let (h, inter, ch) = (get(v, "hidden_size", 768), get(v, "intermediate_size", 3072), get(v, "num_channels", 3));
    let (image, patch) = (get(v, "image_size", 224), get(v, "patch_size", 16));
    let mut out: Vec<Planned> = Vec::new();
    let mut push = |n: &str, shape: Vec<usize>, d: Draw| out.push((format!("vision_tower.{n}"), shape, d));
    push("embeddings.patch_embedding.weight", vec![h, ch, patch, patch], lecun(ch * patch * patch));
    push("embeddings.patch_embedding.bias", vec![h], Draw::Zeros);
    let positions = (image / patch.max(1)).pow(2);
    push("embeddings.position_embedding.weight", vec![positions, h], Draw::Normal(1.0 / (h as f64).sqrt()));
    let ln = |push: &mut dyn FnMut(&str, Vec<usize>, Draw), n: &str| {
        push(&format!("{n}.weight"), vec![h], Draw::Ones);
        push(&format!("{n}.bias"), vec![h], Draw::Zeros);
    };
    let mlp = |push: &mut dyn FnMut(&str, Vec<usize>, Draw), p: &str| {
        push(&format!("{p}.fc1.weight"), vec![inter, h], xavier(inter, h));
        push(&format!("{p}.fc1.bias"), vec![inter], Draw::Normal(1e-6));
        push(&format!("{p}.fc2.weight"), vec![h, inter], xavier(h, inter));
        push(&format!("{p}.fc2.bias"), vec![h], Draw::Normal(1e-6));
    };
    for i in 0..get(v, "num_hidden_layers", 12) {
        let p = format!("encoder.layers.{i}");
        ln(&mut push, &format!("{p}.layer_norm1"));
        for m in ["q_proj", "k_proj", "v_proj", "out_proj"] {
            push(&format!("{p}.self_attn.{m}.weight"), vec![h, h], xavier(h, h));
            push(&format!("{p}.self_attn.{m}.bias"), vec![h], Draw::Zeros);
        }
        ln(&mut push, &format!("{p}.layer_norm2"));
        mlp(&mut push, &format!("{p}.mlp"));
    }
    ln(&mut push, "post_layernorm");
    if v.get("vision_use_head").and_then(Value::as_bool).unwrap_or(true) {
        // torch's fans of a [1, 1, h] tensor: fan_in = 1 · h, fan_out = 1 · h.
        push("head.probe", vec![1, 1, h], xavier(h, h));
        push("head.attention.in_proj_weight", vec![3 * h, h], xavier(3 * h, h));
        push("head.attention.in_proj_bias", vec![3 * h], Draw::Zeros);
        push("head.attention.out_proj.weight", vec![h, h], lecun(h));
        push("head.attention.out_proj.bias", vec![h], Draw::Zeros);
        ln(&mut push, "head.layernorm");
        mlp(&mut push, "head.mlp");
    }
    out.push(("multi_modal_projector.mm_input_projection_weight".into(), vec![h, text_h], Draw::Zeros));
    out.push(("multi_modal_projector.mm_soft_emb_norm.weight".into(), vec![h], Draw::Zeros));
    out
}

fn pixtral(v: &Value, cfg: &Value, text_h: usize) -> Vec<Planned> {
    let (h, inter, ch, patch) = (
        get(v, "hidden_size", 1024),
        get(v, "intermediate_size", 4096),
        get(v, "num_channels", 3),
        get(v, "patch_size", 16),
    );
    let heads = get(v, "num_attention_heads", 16);
    let hd = v.get("head_dim").and_then(Value::as_u64).map_or(h / heads.max(1), |d| d as usize);
    let std = Draw::Normal(v.get("initializer_range").and_then(Value::as_f64).unwrap_or(0.02));
    let mut out: Vec<Planned> = Vec::new();
    let mut push = |n: &str, shape: Vec<usize>, d: Draw| out.push((format!("vision_tower.{n}"), shape, d));
    push("patch_conv.weight", vec![h, ch, patch, patch], std);
    push("ln_pre.weight", vec![h], Draw::Ones);
    for i in 0..get(v, "num_hidden_layers", 24) {
        let p = format!("transformer.layers.{i}");
        push(&format!("{p}.attention_norm.weight"), vec![h], Draw::Ones);
        for m in ["q_proj", "k_proj", "v_proj"] {
            push(&format!("{p}.attention.{m}.weight"), vec![heads * hd, h], std);
        }
        push(&format!("{p}.attention.o_proj.weight"), vec![h, heads * hd], std);
        push(&format!("{p}.ffn_norm.weight"), vec![h], Draw::Ones);
        push(&format!("{p}.feed_forward.gate_proj.weight"), vec![inter, h], std);
        push(&format!("{p}.feed_forward.up_proj.weight"), vec![inter, h], std);
        push(&format!("{p}.feed_forward.down_proj.weight"), vec![h, inter], std);
    }
    let top = Draw::Normal(cfg.get("initializer_range").and_then(Value::as_f64).unwrap_or(0.02));
    let merge = get(cfg, "spatial_merge_size", 2);
    let layers = cfg.get("vision_feature_layer").and_then(Value::as_array).map_or(1, Vec::len);
    let bias = cfg.get("multimodal_projector_bias").and_then(Value::as_bool).unwrap_or(false);
    let p = "multi_modal_projector";
    out.push((format!("{p}.norm.weight"), vec![h], Draw::Ones));
    out.push((format!("{p}.patch_merger.merging_layer.weight"), vec![h, h * merge * merge], top));
    for (n, cols) in [("linear_1", h * layers), ("linear_2", text_h)] {
        out.push((format!("{p}.{n}.weight"), vec![text_h, cols], top));
        if bias {
            out.push((format!("{p}.{n}.bias"), vec![text_h], Draw::Zeros));
        }
    }
    out
}

/// `n` values of `d` from `rng`.
pub(crate) fn values(d: Draw, n: usize, rng: &mut Normal) -> Vec<f32> {
    match d {
        Draw::Zeros => vec![0.0; n],
        Draw::Ones => vec![1.0; n],
        Draw::Normal(std) => (0..n).map(|_| rng.sample(std)).collect(),
        Draw::Uniform(b) => (0..n).map(|_| ((2.0 * rng.unit() - 1.0) * b) as f32).collect(),
        // Rejection sampling of N(0, 1) on [-2, 2], scaled so the truncated std is `std`
        // (0.87962566 is the std of the standard normal truncated at ±2).
        Draw::TruncNormal(std) => (0..n)
            .map(|_| loop {
                let x = rng.sample(1.0);
                if x.abs() <= 2.0 {
                    break (f64::from(x) * std / 0.879_625_66) as f32;
                }
            })
            .collect(),
    }
}
