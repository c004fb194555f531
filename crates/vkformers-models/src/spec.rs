//! `ModelSpec`: an architecture as plain data. `archs/<family>.rs` turn a `config.json` into
//! one; the generic decoder graph (`decoder.rs`) consumes it. No code outside `archs/` asks
//! which `model_type` it runs.

use vkformers_kernels::activation::Activation;
use vkformers_kernels::glu::Glu;
use vkformers_kernels::rope::RopeLayout;

/// A normalisation layer.
#[derive(Clone, Debug, PartialEq)]
pub enum Norm {
    /// `x / sqrt(mean(x²) + eps) · w` (Gemma: `· (1 + w)` with `unit_offset`).
    Rms { eps: f32, unit_offset: bool },
    /// `(x − mean) / sqrt(var + eps) · w + b` (`bias` false: no b).
    Layer { eps: f32, bias: bool },
    /// LayerNorm over the last dim of `[.., heads, head_dim]` with a separate weight per head
    /// (`w [heads, head_dim]`, no bias): StableLM's `qk_layernorm`.
    LayerPerHead { eps: f32 },
}

/// Rotary position embedding of one attention layer.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeSpec {
    /// Inverse frequencies `[rotary_dim / 2]`, already scaled (linear, llama3, YaRN, ...).
    pub inv_freq: Vec<f32>,
    /// Multiplies cos and sin (YaRN / LongRoPE attention factor; 1 otherwise).
    pub mscale: f32,
    pub rotary_dim: usize,
    pub layout: RopeLayout,
    /// LongRoPE: the long-context inverse frequencies and the original context. A forward whose
    /// largest position id + 1 exceeds that context rotates with these (transformers decides per
    /// call, so cached keys keep the rotation they were written with).
    pub long: Option<(Vec<f32>, usize)>,
}

/// Self-attention of one layer.
#[derive(Clone, Debug, PartialEq)]
pub struct AttnSpec {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub qkv_bias: bool,
    pub out_bias: bool,
    /// Norm of q and k before RoPE: over each head (Qwen3, Gemma 3) or, with `qk_norm_full`,
    /// over the whole projection `[heads·head_dim]` (OLMo 2).
    pub qk_norm: Option<Norm>,
    pub qk_norm_full: bool,
    /// Attention logit softcap c (Gemma 2): s -> c·tanh(s/c); 0 = off.
    pub softcap: f32,
    /// ALiBi position biases (BLOOM, Falcon) with the standard per-head slopes.
    pub alibi: bool,
    /// The ALiBi slopes are multiplied by this (Falcon: `2 / sqrt(head_dim)`); 1 otherwise.
    pub alibi_scale: f32,
    /// Keys further back than this are invisible (Mistral); `None` = full causal.
    pub sliding_window: Option<u32>,
    pub rope: Option<RopeSpec>,
    /// Score scale (usually `head_dim^-0.5`).
    pub scale: f32,
}

/// Feed-forward block of one layer.
#[derive(Clone, Debug, PartialEq)]
pub enum MlpSpec {
    /// `down(glu(gate(x), up(x)))`.
    Gated { intermediate: usize, glu: Glu, bias: bool },
    /// `down(act(up(x)))`.
    Plain { intermediate: usize, act: Activation, bias: bool },
    /// A routed mixture of experts (see `crate::moe`).
    Moe(Box<crate::moe::MoeSpec>),
}

/// How attention and MLP combine with the residual stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residual {
    /// `x += attn(..); x += mlp(..)` (Llama).
    Sequential,
    /// `x += attn(n1(x)) + mlp(n2(x))` from the same input (GPT-NeoX, Phi, Cohere); with
    /// `shared_norm` both read `n1(x)` (Phi, Cohere, Falcon).
    Parallel { shared_norm: bool },
}

/// One decoder layer. Norms are optional where families differ: pre-norms (Llama), post-norms
/// on the sublayer outputs (OLMo 2), or both (Gemma 2's sandwich).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSpec {
    pub attn_norm: Option<Norm>,
    pub attn: AttnSpec,
    pub post_attn_norm: Option<Norm>,
    pub mlp_norm: Option<Norm>,
    pub mlp: MlpSpec,
    pub post_mlp_norm: Option<Norm>,
    pub residual: Residual,
    /// Sublayer outputs are multiplied by this before the residual add (Granite); 1 otherwise.
    pub residual_scale: f32,
}

/// Hugging Face parameter names of one layer's weights (`{i}` is the layer index).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNames {
    pub attn_norm: String,
    pub q: String,
    pub k: String,
    pub v: String,
    pub o: String,
    pub q_norm: String,
    pub k_norm: String,
    pub mlp_norm: String,
    pub post_attn_norm: String,
    pub post_mlp_norm: String,
    pub gate: String,
    pub up: String,
    pub down: String,
}

/// How one stored Hugging Face tensor becomes internal parameters: optionally transposed
/// (GPT-2's Conv1D keeps weights as `[in, out]`; the graph wants `[out, in]`), then split
/// along dim 0 into `parts` of `rows` rows each (fused QKV). Saving applies the inverse.
#[derive(Clone, Debug, PartialEq)]
pub struct MapEntry {
    pub hf: String,
    pub transpose: bool,
    /// Internal names and their row counts; a single part keeps the whole tensor.
    pub parts: Vec<(String, usize)>,
    /// The stored rows come in `groups` equal blocks (one per head, GPT-NeoX's
    /// `[heads, 3, head_dim]` QKV), each holding `rows / groups` rows of every part in order;
    /// 1 = each part's rows are contiguous (GPT-2's `c_attn`).
    pub groups: usize,
}

/// One internal parameter made by stacking several stored tensors along dim 0 (StableLM stores
/// each head's QK-norm weight separately); saving splits it again into equal rows.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinEntry {
    pub internal: String,
    pub parts: Vec<String>,
}

/// A whole decoder-only model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    pub model_type: String,
    pub vocab: usize,
    pub hidden: usize,
    /// Embedding output multiplied by this (Gemma: sqrt(hidden)); 1 otherwise.
    pub embed_scale: f32,
    /// A norm of the input embeddings (after scale and positions) before the first layer, stored
    /// under `embed_norm_name` (BLOOM's `word_embeddings_layernorm`); `None` for most families.
    pub embed_norm: Option<Norm>,
    pub embed_norm_name: String,
    pub layers: Vec<LayerSpec>,
    pub final_norm: Norm,
    /// The LM head reuses the embedding matrix.
    pub tied_head: bool,
    /// The LM head adds `{head_name}.bias` (Phi), also when tied.
    pub head_bias: bool,
    /// Logits are multiplied by this (Cohere's `logit_scale`, 1/`logits_scaling` of Granite).
    pub logit_scale: f32,
    /// Final logit softcap c (Gemma 2): z -> c·tanh(z/c).
    pub final_softcap: Option<f32>,
    pub embed_name: String,
    pub final_norm_name: String,
    pub head_name: String,
    pub layer_names: LayerNames,
    /// Learned absolute position embeddings (`[max_positions, hidden]`), added to the token
    /// embeddings (GPT-2); `None` for rotary models.
    pub position_embedding: Option<String>,
    /// Positions are `cumsum(mask)·mask − 1` per row (OPT: real tokens count 0, 1, ... past any
    /// left padding; padding gets −1) instead of `0..T`.
    pub positions_from_mask: bool,
    /// Added to the position ids that index the learned position table (OPT: 2).
    pub position_offset: usize,
    /// Bias-free projections between a narrower embedding (`word_embed_proj_dim`) and the
    /// hidden size: `{name}.weight` after the token embedding and before the (tied) head (OPT).
    pub project_in: Option<String>,
    pub project_out: Option<String>,
    /// Stored tensors that are not used as they are (transposed or fused); identity otherwise.
    pub weight_map: Vec<MapEntry>,
    /// Stored tensors stacked into one parameter.
    pub joins: Vec<JoinEntry>,
    /// The token embedding's `padding_idx` (transformers' `nn.Embedding(.., padding_idx=
    /// config.pad_token_id)` in most families): that row gets no gradient from the lookup.
    pub padding_idx: Option<usize>,
}

/// `padding_idx` from a config's `pad_token_id` as `nn.Embedding` reads it: a negative id counts
/// from the end; null, or an id outside the vocabulary (torch would refuse it), gives none.
pub fn padding_idx(pad_token_id: Option<i64>, vocab: usize) -> Option<usize> {
    let id = pad_token_id?;
    let id = if id < 0 { vocab as i64 + id } else { id };
    usize::try_from(id).ok().filter(|&i| i < vocab)
}

/// `padding_idx` of a family whose config class defaults `pad_token_id` to `default` (a saved
/// config.json may leave a default value out; an explicit null means none).
pub fn padding_idx_or(cfg: &serde_json::Value, default: i64, vocab: usize) -> Option<usize> {
    let id = match cfg.get("pad_token_id") {
        Some(v) => v.as_i64(),
        None => Some(default),
    };
    padding_idx(id, vocab)
}

impl LayerNames {
    /// The Llama naming scheme under `prefix` (e.g. `model.layers.{i}`).
    pub fn llama() -> Self {
        let p = "model.layers.{i}";
        LayerNames {
            attn_norm: format!("{p}.input_layernorm"),
            q: format!("{p}.self_attn.q_proj"),
            k: format!("{p}.self_attn.k_proj"),
            v: format!("{p}.self_attn.v_proj"),
            o: format!("{p}.self_attn.o_proj"),
            q_norm: format!("{p}.self_attn.q_norm"),
            k_norm: format!("{p}.self_attn.k_norm"),
            mlp_norm: format!("{p}.post_attention_layernorm"),
            post_attn_norm: format!("{p}.post_attention_layernorm"),
            post_mlp_norm: format!("{p}.post_feedforward_layernorm"),
            gate: format!("{p}.mlp.gate_proj"),
            up: format!("{p}.mlp.up_proj"),
            down: format!("{p}.mlp.down_proj"),
        }
    }
}

/// `template` with `{i}` replaced by the layer index.
pub fn layer_name(template: &str, i: usize) -> String {
    template.replace("{i}", &i.to_string())
}
