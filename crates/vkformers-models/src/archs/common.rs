//! Config fields shared by the Llama-like families, with the old and new spellings
//! transformers has used (`rope_theta` / `rope_parameters.rope_theta`, `rope_scaling` /
//! `rope_parameters`, `torch_dtype` / `dtype`), and the Llama-shaped spec they produce.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::glu::Glu;
use vkformers_kernels::rope::RopeLayout;

use crate::error::{ModelError, Result};
use crate::rope::{inv_freq, long_inv_freq, RopeParams};
use crate::spec::{AttnSpec, LayerNames, LayerSpec, MlpSpec, ModelSpec, Norm, RopeSpec};

/// Fields of a Llama-like `config.json`.
#[derive(Debug, Deserialize)]
pub struct BaseConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub intermediate_size: usize,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    pub rope_theta: Option<f64>,
    pub rope_scaling: Option<Value>,
    pub rope_parameters: Option<Value>,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    pub hidden_act: Option<String>,
    /// Gemma's preferred key; wins over `hidden_act` where both exist.
    pub hidden_activation: Option<String>,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub mlp_bias: bool,
    #[serde(default = "default_positions")]
    pub max_position_embeddings: usize,
    pub sliding_window: Option<u32>,
    pub partial_rotary_factor: Option<f64>,
    /// The pre-training context (Phi-3 keeps it beside `rope_scaling`; newer configs inside it).
    pub original_max_position_embeddings: Option<usize>,
    /// The embedding's `padding_idx` (see `spec::padding_idx`).
    pub pad_token_id: Option<i64>,
}

fn default_eps() -> f64 {
    1e-6
}

fn default_positions() -> usize {
    2048
}

/// `tie_word_embeddings` for the config classes that default it to true (Gemma, Falcon,
/// MiniCPM3, Youtu, MPT): true unless the field is a boolean false.
pub fn tied_by_default(cfg: &Value) -> bool {
    cfg.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(true)
}

/// Parses a family's config struct, naming the file in errors.
pub fn parse<T: for<'de> Deserialize<'de>>(cfg: &Value) -> Result<T> {
    T::deserialize(cfg).map_err(|e| ModelError::Config(e.to_string()))
}

impl BaseConfig {
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// RoPE parameters from either `rope_parameters` (new) or `rope_theta` + `rope_scaling`.
    pub fn rope_params(&self) -> Result<RopeParams> {
        let mut scaling = self.rope_parameters.clone().or_else(|| self.rope_scaling.clone()).unwrap_or(Value::Null);
        if let (Some(map), Some(original)) = (scaling.as_object_mut(), self.original_max_position_embeddings) {
            map.entry("original_max_position_embeddings").or_insert(Value::from(original));
        }
        let theta = scaling.get("rope_theta").and_then(Value::as_f64).or(self.rope_theta).unwrap_or(10000.0);
        let rope_type = scaling
            .get("rope_type")
            .or_else(|| scaling.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let factor = scaling.get("factor").and_then(Value::as_f64).unwrap_or(1.0);
        Ok(RopeParams { rope_type, theta, factor, scaling })
    }

    /// The rotary spec for `head_dim` (partial when `partial_rotary_factor` < 1).
    pub fn rope(&self, layout: RopeLayout) -> Result<RopeSpec> {
        let hd = self.head_dim();
        let rotary_dim = ((hd as f64 * self.partial_rotary_factor.unwrap_or(1.0)) as usize) & !1;
        let params = self.rope_params()?;
        let (inv_freq, mscale) = inv_freq(&params, rotary_dim, self.max_position_embeddings)?;
        let long = long_inv_freq(&params, rotary_dim, self.max_position_embeddings)?;
        Ok(RopeSpec { inv_freq, mscale, rotary_dim, layout, long })
    }

    /// The rotary spec of the RoPE dict `params` (read as `rope_parameters`, `rope_scaling`
    /// cleared), for families whose layer types each have their own RoPE; the dict stays set.
    pub fn rope_of(&mut self, params: Value, layout: RopeLayout) -> Result<RopeSpec> {
        self.rope_scaling = None;
        self.rope_parameters = Some(params);
        self.rope(layout)
    }

    /// The gated MLP activation from `hidden_act`.
    pub fn glu(&self, default: &str) -> Result<Glu> {
        match self.hidden_act.as_deref().unwrap_or(default) {
            "silu" | "swish" => Ok(Glu::SwiGlu),
            "gelu" => Ok(Glu::GeGlu),
            "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast" => Ok(Glu::GeGluTanh),
            other => Err(ModelError::Unsupported(format!("hidden_act `{other}` in a gated MLP"))),
        }
    }

    /// A Llama-shaped spec: pre-norm RMSNorm layers, RoPE attention, gated MLP.
    pub fn llama_spec(
        &self,
        model_type: &str,
        glu: Glu,
        unit_offset: bool,
        qk_norm: bool,
        qkv_bias: bool,
    ) -> Result<ModelSpec> {
        let norm = Norm::Rms { eps: self.rms_norm_eps as f32, unit_offset };
        let head_dim = self.head_dim();
        let attn = AttnSpec {
            qkv_bias,
            out_bias: self.attention_bias,
            qk_norm: qk_norm.then(|| norm.clone()),
            sliding_window: self.sliding_window,
            rope: Some(self.rope(RopeLayout::HalfSplit)?),
            ..AttnSpec::new(self.num_attention_heads, self.kv_heads(), head_dim)
        };
        let mlp = MlpSpec::Gated { intermediate: self.intermediate_size, glu, bias: self.mlp_bias };
        let layer = LayerSpec::pre_norm(norm.clone(), attn, mlp);
        let size = (self.vocab_size, self.hidden_size);
        let mut spec = ModelSpec::new(model_type, size, layer, self.num_hidden_layers, norm, LayerNames::llama());
        spec.tied_head = self.tie_word_embeddings;
        spec.padding_idx = crate::spec::padding_idx(self.pad_token_id, self.vocab_size);
        Ok(spec)
    }
}
