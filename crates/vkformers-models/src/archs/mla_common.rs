//! Config fields of multi-head latent attention (DeepSeek-V2/V3, MiniCPM3) and the attention
//! spec they give: the low-rank query (`q_lora_rank`, null for a full-rank `q_proj`), the
//! latent (`kv_lora_rank`), the per-head split of q and k into `qk_nope_head_dim` plain and
//! `qk_rope_head_dim` rotary values, the value heads (`v_head_dim`), and the softmax scale
//! `(nope + rope)^-0.5`, times `get_mscale(factor, mscale_all_dim)²` for a scaled RoPE
//! (transformers' `yarn_apply_mscale`).

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::glu::Glu;
use vkformers_kernels::rope::RopeLayout;

use super::common::BaseConfig;
use crate::error::{ModelError, Result};
use crate::rope::{inv_freq, long_inv_freq, yarn_mscale, RopeParams};
use crate::spec::{AttnSpec, MlaNames, MlaSpec, ModelSpec, Norm, RopeSpec};

/// MLA fields of a `config.json` (`q_lora_rank` is read by `q_lora_rank`: a missing key means
/// the family's default, an explicit null a full-rank query).
#[derive(Debug, Deserialize)]
pub struct MlaConfig {
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: Option<usize>,
}

/// A Llama-like config with the MLA fields: what MiniCPM3, Youtu, LongCat-Flash and (with
/// DeepSeek's MoE fields) DeepSeek-V2/V3, Mistral 4 and A.X-K2 read.
#[derive(Debug, Deserialize)]
pub struct LlamaMlaConfig {
    #[serde(flatten)]
    pub base: BaseConfig,
    #[serde(flatten)]
    pub mla: MlaConfig,
}

impl LlamaMlaConfig {
    /// The Llama-shaped spec of `model_type` the MLA families start from (no biases, no
    /// QK-norm, the gated MLP of `hidden_act`, default silu) and that activation; the
    /// attention is replaced by [`set_attn`].
    pub fn llama_spec(&self, model_type: &str) -> Result<(ModelSpec, Glu)> {
        let glu = self.base.glu("silu")?;
        Ok((self.base.llama_spec(model_type, glu, false, false, false)?, glu))
    }
}

/// `attn` as every layer's attention.
pub fn set_attn(spec: &mut ModelSpec, attn: &AttnSpec) {
    for l in &mut spec.layers {
        l.attn = attn.clone();
    }
}

/// The rotary layout of `rope_interleave` (DeepSeek-V3's field; default true): transformers
/// rotates pairs (2i, 2i+1) and writes the results de-interleaved; q and k share that order, so
/// the scores are those of interleaved RoPE. False: half-split.
pub fn rope_layout(rope_interleave: Option<bool>) -> RopeLayout {
    if rope_interleave.unwrap_or(true) {
        RopeLayout::Interleaved
    } else {
        RopeLayout::HalfSplit
    }
}

/// The widest nope part of a head accepted (`qk_rope_head_dim` and `v_head_dim` are bounded by the
/// config checks).
const MAX_HEAD_PART: usize = 1 << 14;

/// `q_lora_rank` of `cfg`: `default` when absent, none when null.
pub fn q_lora_rank(cfg: &Value, default: Option<usize>) -> Result<Option<usize>> {
    match cfg.get("q_lora_rank") {
        None => Ok(default),
        Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(r) if r > 0 && r <= 1 << 20 => Ok(Some(r as usize)),
            _ => Err(ModelError::Config(format!("`q_lora_rank` is {v}; it must be null or a positive integer"))),
        },
    }
}

/// The softmax scale of MLA with `qk_dim` query/key values per head.
fn softmax_scale(params: &RopeParams, qk_dim: usize) -> f32 {
    let mut scale = (qk_dim as f64).powf(-0.5);
    let all_dim = params.scaling.get("mscale_all_dim").and_then(Value::as_f64).unwrap_or(0.0);
    if params.rope_type != "default" && all_dim != 0.0 {
        let m = yarn_mscale(params.factor, all_dim);
        scale *= m * m;
    }
    scale as f32
}

impl MlaConfig {
    /// The attention spec of every layer: `base`'s heads, rotary `layout`, value heads of
    /// `v_head_dim` (else `v_default`), the low-rank query of rank `q_rank`.
    pub fn attn(
        &self,
        base: &BaseConfig,
        layout: RopeLayout,
        v_default: usize,
        q_rank: Option<usize>,
    ) -> Result<AttnSpec> {
        let heads = base.num_attention_heads;
        if base.kv_heads() != heads {
            return Err(ModelError::Config(format!(
                "multi-head latent attention with num_key_value_heads {} != num_attention_heads {heads}: \
                 kv_b_proj makes one key and value per query head, so set them equal",
                base.kv_heads()
            )));
        }
        let (dn, dr) = (self.qk_nope_head_dim, self.qk_rope_head_dim);
        // Sizes the graph's column moves (`[D, D]` host matrices) are made from.
        if dn > MAX_HEAD_PART {
            return Err(ModelError::Config(format!("`qk_nope_head_dim` is {dn}; it must be at most {MAX_HEAD_PART}")));
        }
        let dv = self.v_head_dim.unwrap_or(v_default);
        if dr == 0 || dr % 2 != 0 || dv == 0 || self.kv_lora_rank == 0 {
            return Err(ModelError::Config(format!(
                "qk_rope_head_dim {dr} (must be even and positive), v_head_dim {dv} and kv_lora_rank {} \
                 (positive): check the MLA sizes in config.json",
                self.kv_lora_rank
            )));
        }
        let params = base.rope_params()?;
        // transformers rotates all of q_rot and k_rot; a partial factor would size cos/sin for
        // fewer dims than they have (its own forward fails on it).
        let partial =
            params.scaling.get("partial_rotary_factor").and_then(Value::as_f64).or(base.partial_rotary_factor);
        // (The families here give the rotary embedding `head_dim = qk_rope_head_dim`.)
        if partial.is_some_and(|f| (dr as f64 * f) as usize != dr) {
            return Err(ModelError::Unsupported(format!(
                "partial_rotary_factor {partial:?} with multi-head latent attention: the rotary part is \
                 qk_rope_head_dim ({dr}) values, all rotated; leave the factor out"
            )));
        }
        let (freq, mscale) = inv_freq(&params, dr, base.max_position_embeddings)?;
        let long = long_inv_freq(&params, dr, base.max_position_embeddings)?;
        let mla = MlaSpec {
            q_lora_rank: q_rank,
            kv_lora_rank: self.kv_lora_rank,
            nope_dim: dn,
            rope_dim: dr,
            v_dim: dv,
            bias: base.attention_bias,
            // `DeepseekV2RMSNorm(rank)`: the module's default eps, not `rms_norm_eps`.
            norm: Norm::Rms { eps: 1e-6, unit_offset: false },
            names: MlaNames::deepseek(),
            latent_scale: 1.0,
            gated_query: false,
            index_topk: None,
        };
        Ok(AttnSpec {
            out_bias: base.attention_bias,
            rope: Some(RopeSpec { inv_freq: freq, mscale, rotary_dim: dr, layout, long }),
            scale: softmax_scale(&params, dn + dr),
            mla: Some(mla),
            ..AttnSpec::new(heads, heads, (dn + dr).max(dv))
        })
    }
}
