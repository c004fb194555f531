//! `gemma2`: Gemma (RMSNorm with (1 + w), embedding scaled by sqrt(hidden), GeGLU-tanh, tied
//! head) with sandwich norms (pre and post norms around attention and MLP), attention and final
//! logit softcapping, scores scaled by `query_pre_attn_scalar^-0.5`, and per-layer
//! `layer_types` choosing sliding-window or global attention. `gemma3_text` builds on this.

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

/// The Gemma 2 / Gemma 3 fields beyond the Llama ones.
#[derive(Deserialize)]
pub struct GemmaConfig {
    #[serde(flatten)]
    pub base: BaseConfig,
    pub query_pre_attn_scalar: Option<f64>,
    pub attn_logit_softcapping: Option<f64>,
    pub final_logit_softcapping: Option<f64>,
    pub layer_types: Option<Vec<String>>,
    pub use_bidirectional_attention: Option<bool>,
}

impl GemmaConfig {
    /// Whether each layer is a sliding-window layer: `layer_types`, or else every layer but each
    /// `pattern`-th (Gemma 2: 2, Gemma 3: `sliding_window_pattern`, 6 by default).
    pub fn sliding(&self, pattern: usize) -> Result<Vec<bool>> {
        let n = self.base.num_hidden_layers;
        match &self.layer_types {
            Some(t) if t.len() == n => t
                .iter()
                .map(|s| match s.as_str() {
                    "sliding_attention" => Ok(true),
                    "full_attention" => Ok(false),
                    other => Err(ModelError::Unsupported(format!("layer type `{other}`"))),
                })
                .collect(),
            Some(t) => Err(ModelError::Config(format!("layer_types has {} entries for {n} layers", t.len()))),
            None => Ok((0..n).map(|i| (i + 1) % pattern.max(1) != 0).collect()),
        }
    }

    /// The Gemma 2 layout; `model_type` names the spec, `pattern` is the default sliding
    /// pattern, `qk_norm` adds per-head QK-norm (Gemma 3).
    pub fn gemma2_spec(&mut self, model_type: &str, pattern: usize, qk_norm: bool) -> Result<ModelSpec> {
        if self.use_bidirectional_attention == Some(true) {
            return Err(ModelError::Unsupported(format!("{model_type} use_bidirectional_attention")));
        }
        let b = &mut self.base;
        b.hidden_act = b.hidden_activation.clone().or(b.hidden_act.take());
        let glu = b.glu("gelu_pytorch_tanh")?;
        let sliding = self.sliding(pattern)?;
        let mut spec = self.base.llama_spec(model_type, glu, true, qk_norm, self.base.attention_bias)?;
        spec.embed_scale = (self.base.hidden_size as f64).sqrt() as f32;
        spec.final_softcap = self.final_logit_softcapping.map(|c| c as f32);
        spec.layer_names.mlp_norm = "model.layers.{i}.pre_feedforward_layernorm".into();
        let scale = self.query_pre_attn_scalar.unwrap_or(256.0).powf(-0.5) as f32;
        for (l, s) in spec.layers.iter_mut().zip(sliding) {
            l.post_attn_norm = l.attn_norm.clone();
            l.post_mlp_norm = l.mlp_norm.clone();
            l.attn.scale = scale;
            l.attn.softcap = self.attn_logit_softcapping.unwrap_or(0.0) as f32;
            l.attn.sliding_window = if s { self.base.sliding_window } else { None };
            if s && self.base.sliding_window.is_none() {
                return Err(ModelError::Config(format!("{model_type}: sliding layer without sliding_window")));
            }
        }
        Ok(spec)
    }
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: GemmaConfig = parse(cfg)?;
    c.base.tie_word_embeddings = super::common::tied_by_default(cfg);
    // transformers' defaults where the keys are absent (an explicit null turns a softcap off).
    if cfg.get("attn_logit_softcapping").is_none() {
        c.attn_logit_softcapping = Some(50.0);
    }
    if cfg.get("final_logit_softcapping").is_none() {
        c.final_logit_softcapping = Some(30.0);
    }
    if cfg.get("sliding_window").is_none() {
        c.base.sliding_window = Some(4096);
    }
    let mut spec = c.gemma2_spec("gemma2", 2, false)?;
    // Gemma2Config defaults pad_token_id to 0.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 0, spec.vocab);
    Ok(spec)
}
