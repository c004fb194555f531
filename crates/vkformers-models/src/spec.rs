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
    /// LayerNorm without learned parameters (OLMo: `F.layer_norm(x, shape, None, None, eps)`).
    LayerPlain { eps: f32 },
    /// LayerNorm with bias whose weight is stored as an offset from one, `· (1 + w) + b`
    /// (Nemotron's `LayerNorm1P`).
    LayerUnitOffset { eps: f32 },
    /// RMSNorm without a weight (nanochat).
    RmsPlain { eps: f32 },
    /// A.X-K2's gated RMSNorm: `y = rms(x) · w` (`{name}.norm.weight`), then
    /// `y · sigmoid(W_up · silu(W_down · y))` with a bottleneck of `rank`
    /// (`{name}.W_down.weight [rank, H]`, `{name}.W_up.weight [H, rank]`).
    RmsGated { eps: f32, rank: usize },
}

impl Norm {
    /// A LayerNorm kind (mean-centred): the Trainer exempts `nn.LayerNorm` weights from decay by
    /// module type, whatever their name.
    pub fn is_layer_norm(&self) -> bool {
        matches!(
            self,
            Norm::Layer { .. } | Norm::LayerPerHead { .. } | Norm::LayerPlain { .. } | Norm::LayerUnitOffset { .. }
        )
    }
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

/// Where the QK-norm of an attention layer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNormAt {
    /// Over each head's `head_dim` values, before RoPE (Qwen3, Gemma 3).
    HeadsBeforeRope,
    /// Over the whole projection `[heads·head_dim]`, before it is split into heads (OLMo 2).
    Projection,
    /// Over each head's `head_dim` values, after RoPE (nanochat, HunYuan).
    HeadsAfterRope,
}

/// Self-attention of one layer.
#[derive(Clone, Debug, PartialEq)]
pub struct AttnSpec {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub qkv_bias: bool,
    pub out_bias: bool,
    /// Norm of q and k (`qk_norm_at` says over what and where); `None` = none.
    pub qk_norm: Option<Norm>,
    pub qk_norm_at: QkNormAt,
    /// Attention logit softcap c (Gemma 2): s -> c·tanh(s/c); 0 = off.
    pub softcap: f32,
    /// ALiBi position biases with these per-head slopes (BLOOM's series, scaled for Falcon; MPT's
    /// own order); `None` = no ALiBi.
    pub alibi: Option<Vec<f32>>,
    /// `(β, original)`: after RoPE, queries are multiplied by `1 + β · ln(1 + ⌊pos / original⌋)`
    /// (Llama 4's attention temperature, Ministral 3); `None` = off.
    pub q_position_scale: Option<(f32, usize)>,
    /// Added to the position in that scale (Llama 4's `floor((pos + 1) / floor_scale)`: 1); 0
    /// otherwise.
    pub q_position_shift: i32,
    /// That scale's pos is the column, padding included (Llama 4: transformers counts
    /// `arange(T) + past_seen_tokens`), not the position id (Ministral 3).
    pub q_position_by_column: bool,
    /// Chunked local attention (Llama 4's chunked layers): key j is visible to the query at p only
    /// when `floor(j / C) == floor(p / C)`; `None` = off.
    pub chunk: Option<u32>,
    /// A norm of the attention output `[B·T, heads·head_dim]` before the output projection, with
    /// its weight's name template (BitNet's `attn_sub_norm`); `None` for most.
    pub out_norm: Option<(Norm, String)>,
    /// q, k and v (after their projections and biases) are clamped to `[−c, c]` (OLMo and MPT
    /// `clip_qkv`); `None` = off.
    pub clip_qkv: Option<f32>,
    /// Keys further back than this are invisible (Mistral); `None` = full causal.
    pub sliding_window: Option<u32>,
    /// Learned attention sinks: a per-head logit `[heads]` stored under this name template
    /// (granite_swa's and gpt-oss's `self_attn.sinks`, no `.weight`) that joins every query's
    /// softmax denominator and takes no value; `None` = none.
    pub sinks: Option<String>,
    pub rope: Option<RopeSpec>,
    /// Score scale (usually `head_dim^-0.5`).
    pub scale: f32,
    /// Multi-head latent attention (DeepSeek-V2/V3, MiniCPM3): q, k and v come from the
    /// projections named there instead of `q`/`k`/`v`; `None` for every other family.
    pub mla: Option<MlaSpec>,
    /// JetMoE's mixture of attention heads: routed query/output projections (see
    /// `crate::moe::MoaSpec`); `None` for every other family.
    pub moa: Option<crate::moe::MoaSpec>,
}

/// Multi-head latent attention of one layer (see `crate::mla`). Queries come from `q`
/// (`q_lora_rank` None) or `q_b(norm(q_a(x)))`; keys and values from a latent
/// `c = norm(kv_a(x)[.., :kv_lora_rank])` through `kv_b`, plus one rotary key
/// `kv_a(x)[.., kv_lora_rank:]` shared by every head. Per head, q and k are `[nope | rope]`
/// (`qk = nope_dim + rope_dim` values), v has `v_dim`. The attention kernels run on heads of
/// `AttnSpec::head_dim = max(qk, v_dim)`, the shorter side zero-padded (exact: zeros add nothing
/// to the scores or the output, and the padded columns get no gradient).
#[derive(Clone, Debug, PartialEq)]
pub struct MlaSpec {
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub nope_dim: usize,
    pub rope_dim: usize,
    pub v_dim: usize,
    /// A bias on `q_a` and `kv_a` (`attention_bias`; `q`, `q_b` and `kv_b` never have one).
    pub bias: bool,
    /// The norm of the low-rank query and of the latent (`q_a_layernorm`, `kv_a_layernorm`).
    pub norm: Norm,
    pub names: MlaNames,
    /// The normed latent is multiplied by this before `kv_b` and the cache (LongCat-Flash's
    /// `mla_scale_kv_lora = sqrt(hidden / kv_lora_rank)`); 1 for the others.
    pub latent_scale: f32,
    /// A.X-K2's gated query: `q_b` reads `[norm(q_a(h)) | q_a(h)]` (`2 · q_lora_rank` columns) and
    /// writes per head `[q (Dn + Dr) | gate (Dv)]`; the attention output is multiplied by
    /// `sigmoid(gate)` before `o_proj`. False for the others.
    pub gated_query: bool,
    /// DeepSeek-V3.2's sparse attention indexer keeps this many keys a query: over at most that
    /// many keys it keeps them all (dense attention, what the graph runs); longer sequences are
    /// refused. `None`: no indexer.
    pub index_topk: Option<usize>,
}

impl MlaSpec {
    /// Query/key values per head.
    pub fn qk_dim(&self) -> usize {
        self.nope_dim + self.rope_dim
    }
}

/// Stored names (with `{i}`, without `.weight`) of the MLA modules; the full-rank query
/// projection (no `q_lora_rank`) is `LayerNames::q`.
#[derive(Clone, Debug, PartialEq)]
pub struct MlaNames {
    pub q_a: String,
    pub q_a_norm: String,
    pub q_b: String,
    pub kv_a: String,
    pub kv_a_norm: String,
    pub kv_b: String,
}

impl MlaNames {
    /// DeepSeek's names under `model.layers.{i}.self_attn`.
    pub fn deepseek() -> Self {
        let p = "model.layers.{i}.self_attn";
        MlaNames {
            q_a: format!("{p}.q_a_proj"),
            q_a_norm: format!("{p}.q_a_layernorm"),
            q_b: format!("{p}.q_b_proj"),
            kv_a: format!("{p}.kv_a_proj_with_mqa"),
            kv_a_norm: format!("{p}.kv_a_layernorm"),
            kv_b: format!("{p}.kv_b_proj"),
        }
    }
}

impl AttnSpec {
    /// Causal attention of `heads` query and `kv_heads` key/value heads of `head_dim`, scores
    /// scaled by `head_dim^-0.5`, without biases, norms, positions, softcap, clipping or window.
    pub fn new(heads: usize, kv_heads: usize, head_dim: usize) -> Self {
        AttnSpec {
            heads,
            kv_heads,
            head_dim,
            qkv_bias: false,
            out_bias: false,
            qk_norm: None,
            qk_norm_at: QkNormAt::HeadsBeforeRope,
            softcap: 0.0,
            alibi: None,
            clip_qkv: None,
            q_position_scale: None,
            q_position_shift: 0,
            q_position_by_column: false,
            chunk: None,
            out_norm: None,
            sliding_window: None,
            sinks: None,
            rope: None,
            scale: 1.0 / (head_dim as f32).sqrt(),
            mla: None,
            moa: None,
        }
    }
}

/// Feed-forward block of one layer.
#[derive(Clone, Debug, PartialEq)]
pub enum MlpSpec {
    /// `down(glu(gate(x), up(x)))`.
    Gated { intermediate: usize, glu: Glu, bias: bool },
    /// `down(act(up(x)))`.
    Plain { intermediate: usize, act: Activation, bias: bool },
    /// `down(sub_norm(act(gate(x)) · up(x)))` for a gate activation the fused GLU kernel lacks
    /// (BitNet's ReLU²), from the activation and a product; `sub_norm` is an optional norm of the
    /// product with its weight's name template (BitNet's `ffn_sub_norm`).
    GatedAct { intermediate: usize, act: Activation, bias: bool, sub_norm: Option<(Norm, String)> },
    /// A routed mixture of experts (see `crate::moe`).
    Moe(Box<crate::moe::MoeSpec>),
    /// `down(xielu(up(x)))` (Apertus): xIELU's learned scalars `{act}.alpha_p`, `{act}.alpha_n`
    /// (`[1]`, raw before softplus) and its constants `{act}.beta`, `{act}.eps` (stored 0-d)
    /// live under the name template `act`.
    Xielu { intermediate: usize, bias: bool, act: String },
}

/// How attention and MLP combine with the residual stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Residual {
    /// `x += attn(..); x += mlp(..)` (Llama).
    Sequential,
    /// `x += attn(n1(x)) + mlp(n2(x))` from the same input (GPT-NeoX, Phi, Cohere); with
    /// `shared_norm` both read `n1(x)` (Phi, Cohere, Falcon).
    Parallel { shared_norm: bool },
    /// The original Transformer's post-LN: `x = n1(x + attn(x)); x = n2(x + mlp(x))`, with the
    /// layer's `attn_norm` and `mlp_norm` applied after the adds (OpenAI GPT).
    PostNorm,
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

impl LayerSpec {
    /// A pre-norm layer: `x += attn(norm(x)); x += mlp(norm(x))` with two norms of this kind.
    pub fn pre_norm(norm: Norm, attn: AttnSpec, mlp: MlpSpec) -> Self {
        LayerSpec {
            attn_norm: Some(norm.clone()),
            attn,
            post_attn_norm: None,
            mlp_norm: Some(norm),
            mlp,
            post_mlp_norm: None,
            residual: Residual::Sequential,
            residual_scale: 1.0,
        }
    }
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

impl MapEntry {
    /// A rename from the LayerNorm names of old BERT-era checkpoints (`gamma`/`beta`): read when
    /// a folder has them (and written back to that folder's names), never chosen for a new model,
    /// which gets transformers' `weight`/`bias`.
    pub fn is_legacy_norm_alias(&self) -> bool {
        !self.transpose && self.parts.len() == 1 && (self.hf.ends_with(".gamma") || self.hf.ends_with(".beta"))
    }

    /// The fused q/k/v tensor of every layer, `{attn}.{fused}.{suffix}` for each suffix (`attn`
    /// is the attention module's name template, `{i}` the layer), split into
    /// `{attn}.{part}.{suffix}` of `rows` rows each, in `groups` blocks (see `groups`).
    pub fn fused_qkv(
        layers: usize,
        attn: &str,
        fused: &str,
        parts: [(&str, usize); 3],
        groups: usize,
        suffixes: &[&str],
    ) -> Vec<MapEntry> {
        let mut map = Vec::new();
        for i in 0..layers {
            let p = layer_name(attn, i);
            for suffix in suffixes {
                let parts = parts.iter().map(|(x, rows)| (format!("{p}.{x}.{suffix}"), *rows)).collect();
                map.push(MapEntry { hf: format!("{p}.{fused}.{suffix}"), transpose: false, parts, groups });
            }
        }
        map
    }
}

/// One internal parameter made by stacking several stored tensors along dim 0 (StableLM stores
/// each head's QK-norm weight separately); saving splits it again into equal rows.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinEntry {
    pub internal: String,
    pub parts: Vec<String>,
}

/// Position ids of an uncached forward `[B, T]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PositionIds {
    /// `0..T` in every row, whatever the padding (transformers' default).
    Arange,
    /// `cumsum(mask)·mask − 1` per row (OPT: real tokens count 0, 1, ... past any left padding;
    /// padding gets −1).
    FromMask,
}

/// A fixed sinusoidal position table: row `r = position + offset` is
/// `[sin(r·f_0) .. sin(r·f_{n−1}), cos(r·f_0) .. cos(r·f_{n−1})]` (zero-padded to the hidden size),
/// all in f32 as transformers builds it; row `zero_row` is zeros (fairseq's padding row).
#[derive(Clone, Debug, PartialEq)]
pub struct Sinusoidal {
    pub inv_freq: Vec<f32>,
    pub offset: usize,
    pub zero_row: Option<usize>,
}

impl Sinusoidal {
    /// Rows `positions + offset` of the table, `[positions.len(), width]`.
    pub fn rows(&self, positions: &[i32], width: usize) -> Vec<f32> {
        let n = self.inv_freq.len();
        let mut out = vec![0f32; positions.len() * width];
        for (row, &p) in out.chunks_mut(width).zip(positions) {
            let r = (p + self.offset as i32).max(0);
            if Some(r as usize) == self.zero_row {
                continue;
            }
            for (j, f) in self.inv_freq.iter().enumerate() {
                let a = r as f32 * f;
                row[j] = a.sin();
                row[n + j] = a.cos();
            }
        }
        out
    }
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
    /// How position ids are made (OPT counts real tokens; most use `0..T`).
    pub position_ids: PositionIds,
    /// Added to the position ids that index the learned position table (OPT: 2).
    pub position_offset: usize,
    /// Fixed sinusoidal positions added to the embeddings (XGLM, CTRL); `None` for most.
    pub sinusoidal: Option<Sinusoidal>,
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
    /// Encoder-only models (BERT family): the parts the decoder graph has no slot for; the
    /// model runs through `encoder::forward` instead. `None` for decoders.
    pub encoder: Option<crate::encoder::EncoderSpec>,
    /// Which residual-branch output projections `init_from_config` draws with the smaller std
    /// `initializer_range / sqrt(2 * layers)` (GPT-2's scheme); training from a checkpoint
    /// never reads it.
    pub residual_init: ResidualInit,
    /// The std every matrix of the layers starts at when it is not `initializer_range`:
    /// openai-gpt's `Conv1D` draws N(0, 0.02) in its constructor and its `_init_weights` leaves
    /// it alone. `None` for most families.
    pub layer_init_std: Option<f64>,
    /// How `init_from_config` starts the learned attention sinks (`AttnSpec::sinks`).
    pub sinks_init: SinksInit,
    /// Prefixes of stored tensors the graph does not read that the folder's model type still
    /// owns (an image-text wrapper's vision tower): not loaded, copied unchanged on save.
    pub carried: Vec<String>,
    /// Prefixes of stored tensors transformers' model class does not build (DeepSeek-V3's
    /// multi-token-prediction layers `model.layers.{N}.*`, N >= num_hidden_layers): not loaded,
    /// not written on save (`save_pretrained` writes the module's state dict, which lacks them).
    pub skipped: Vec<String>,
    /// The vision tower an image-text wrapper keeps under `carried` (what `init_from_config`
    /// draws for a new one); `None` for every other family.
    pub vision: Option<VisionTower>,
    /// `(stored prefix, module prefix)` pairs where transformers' modules are named otherwise
    /// than their stored tensors (an image-text wrapper stores `language_model.model.*` for the
    /// module `model.language_model.*`): PEFT keys adapters by module path. Empty for most.
    pub module_paths: Vec<(String, String)>,
    /// Encoder-decoder models (T5, BART families): the encoder stack and the cross-attention;
    /// `layers` are then the decoder's. The model runs through `seq2seq::forward_loss`.
    pub seq2seq: Option<Box<crate::seq2seq::Seq2SeqSpec>>,
    /// LongCat-Flash: `layers` are sublayers in pairs, and this MoE reads each even sublayer's
    /// MLP input and is added to the output of the odd one after it; `None` for the others.
    pub shortcut_moe: Option<Box<crate::decoder::ShortcutMoe>>,
}

/// The vision tower and projector of an image-text wrapper, by the transformers modules that
/// make them (see `wrapper_init`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VisionTower {
    /// SigLIP's vision model and Gemma 3's projector (`gemma3`).
    SiglipGemma3,
    /// Pixtral's vision model and Mistral 3's patch-merging projector (`mistral3`).
    PixtralMistral3,
    /// Not a vision tower: DeepSeek-V3.2's sparse attention indexer of every layer (A.X-K2), carried
    /// because the graph runs below `index_topk`, where it selects every key.
    DsaIndexer,
}

/// The starting values of the attention sinks `[heads]`, as each family's `_init_weights` sets
/// them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SinksInit {
    /// Zeros (granite_swa).
    #[default]
    Zeros,
    /// N(0, initializer_range) like the matrices (gpt-oss).
    Normal,
}

/// GPT-2's scaled initialisation of the projections that write into the residual stream: with
/// 2 residual branches per layer the stream's variance at init grows as 2L · std², so those
/// projections start at std / sqrt(2L) (`_init_weights` of gpt2, gpt_bigcode, nanochat).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResidualInit {
    /// Every matrix from N(0, initializer_range).
    #[default]
    Plain,
    /// The attention output projection only (nanochat's `o_proj`).
    AttnOut,
    /// The attention output and the MLP down projection (GPT-2's two `c_proj`).
    AttnOutAndMlpDown,
}

impl ModelSpec {
    /// `layers` copies of `layer` under `names`, the final norm `final_norm` and the Llama
    /// names of the embedding, final norm and untied head (`model.embed_tokens`, `model.norm`,
    /// `lm_head`); no embedding scale or norm, positions, projections, logit scaling, softcap,
    /// weight map or padding row. Families set what differs.
    pub fn new(
        model_type: &str,
        size: (usize, usize),
        layer: LayerSpec,
        layers: usize,
        final_norm: Norm,
        layer_names: LayerNames,
    ) -> Self {
        Self::with_layers(model_type, size, vec![layer; layers], final_norm, layer_names)
    }

    /// [`ModelSpec::new`] with each layer given (the encoders' `EncoderParts`).
    pub fn with_layers(
        model_type: &str,
        (vocab, hidden): (usize, usize),
        layers: Vec<LayerSpec>,
        final_norm: Norm,
        layer_names: LayerNames,
    ) -> Self {
        ModelSpec {
            model_type: model_type.into(),
            vocab,
            hidden,
            embed_scale: 1.0,
            embed_norm: None,
            embed_norm_name: String::new(),
            layers,
            final_norm,
            tied_head: false,
            head_bias: false,
            logit_scale: 1.0,
            final_softcap: None,
            embed_name: "model.embed_tokens".into(),
            final_norm_name: "model.norm".into(),
            head_name: "lm_head".into(),
            layer_names,
            position_embedding: None,
            position_ids: PositionIds::Arange,
            position_offset: 0,
            sinusoidal: None,
            project_in: None,
            project_out: None,
            weight_map: Vec::new(),
            joins: Vec::new(),
            padding_idx: None,
            encoder: None,
            residual_init: ResidualInit::Plain,
            layer_init_std: None,
            sinks_init: SinksInit::Zeros,
            carried: Vec::new(),
            skipped: Vec::new(),
            vision: None,
            module_paths: Vec::new(),
            seq2seq: None,
            shortcut_moe: None,
        }
    }

    /// A stored tensor that is a module's buffer, not a parameter (xIELU's `beta`, `eps`;
    /// DeepSeek-V3's router correction bias; an encoder-decoder's `final_logits_bias` and stored
    /// sinusoid tables): loaded as a constant
    /// into `Model::buffers`, never trained, saved back, no gradient.
    pub fn is_buffer(&self, name: &str) -> bool {
        crate::seq2seq::is_buffer(self, name)
            || self
                .encoder
                .as_ref()
                .is_some_and(|e| e.stored_tables.iter().any(|(t, ..)| format!("{t}.weight") == name))
            || self.encoder.as_ref().is_some_and(|e| {
                e.unread_linears
                    .iter()
                    .any(|(m, ..)| name.strip_prefix(m.as_str()).is_some_and(|s| s == ".weight" || s == ".bias"))
            })
            || crate::moe::buffers(self).iter().any(|b| b == name)
            || self.layers.iter().enumerate().any(|(i, l)| match &l.mlp {
                MlpSpec::Xielu { act, .. } => {
                    let a = layer_name(act, i);
                    name.strip_prefix(a.as_str()).is_some_and(|s| s == ".beta" || s == ".eps")
                }
                _ => false,
            })
    }

    /// The module path (as `named_modules()` of the transformers model names it) of a stored
    /// name, e.g. `language_model.model.layers.0.self_attn.q_proj` -> `model.language_model.layers.
    /// 0.self_attn.q_proj` for a wrapper; the stored name itself for most families.
    pub fn module_path(&self, stored: &str) -> String {
        for (from, to) in &self.module_paths {
            if let Some(rest) = stored.strip_prefix(from.as_str()) {
                return format!("{to}{rest}");
            }
        }
        stored.to_string()
    }
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
    /// Names under `prefix` (e.g. `transformer.h.{i}`) for the pre-norm, attention and plain-MLP
    /// modules given as suffixes (`[attn_norm, q, k, v, o, mlp_norm, up, down]`); the others empty.
    pub fn plain(prefix: &str, [attn_norm, q, k, v, o, mlp_norm, up, down]: [&str; 8]) -> Self {
        let f = |s: &str| format!("{prefix}.{s}");
        LayerNames {
            attn_norm: f(attn_norm),
            q: f(q),
            k: f(k),
            v: f(v),
            o: f(o),
            q_norm: String::new(),
            k_norm: String::new(),
            mlp_norm: f(mlp_norm),
            post_attn_norm: String::new(),
            post_mlp_norm: String::new(),
            gate: String::new(),
            up: f(up),
            down: f(down),
        }
    }

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

    /// Every name passed through `f` (a family that renames another's prefix).
    pub fn map(&self, f: impl Fn(&str) -> String) -> Self {
        LayerNames {
            attn_norm: f(&self.attn_norm),
            q: f(&self.q),
            k: f(&self.k),
            v: f(&self.v),
            o: f(&self.o),
            q_norm: f(&self.q_norm),
            k_norm: f(&self.k_norm),
            mlp_norm: f(&self.mlp_norm),
            post_attn_norm: f(&self.post_attn_norm),
            post_mlp_norm: f(&self.post_mlp_norm),
            gate: f(&self.gate),
            up: f(&self.up),
            down: f(&self.down),
        }
    }
}

/// `template` with `{i}` replaced by the layer index.
pub fn layer_name(template: &str, i: usize) -> String {
    template.replace("{i}", &i.to_string())
}
