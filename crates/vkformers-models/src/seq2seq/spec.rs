//! What an encoder-decoder model (T5, BART families) adds to `ModelSpec`. The decoder's layers and
//! names stay in `ModelSpec::layers` / `layer_names` (what the generic checks and the KV cache
//! read); the encoder's stack, the cross-attention and how the two meet live here.

use crate::encoder::NormPlacement;
use crate::spec::{LayerNames, LayerSpec, Norm};

/// Parameter name templates of one decoder layer's cross-attention (`{i}` is the layer).
#[derive(Clone, Debug, PartialEq)]
pub struct CrossNames {
    pub norm: String,
    pub q: String,
    pub k: String,
    pub v: String,
    pub o: String,
    /// The norm after the cross-attention, of the layer's `post_attn_norm` kind (T5Gemma's
    /// `post_cross_attn_layernorm`); unused without one.
    pub post_norm: String,
}

/// One stack's embedding and output ends (the encoder's or the decoder's).
#[derive(Clone, Debug, PartialEq)]
pub struct StackEnds {
    /// The stack's own token embedding `{name}.weight` (T5Gemma's encoder); `None`: the spec's
    /// shared `embed_name`.
    pub embed: Option<String>,
    /// How positions enter the embeddings; `None` for T5.
    pub positions: Option<StackPositions>,
    /// A norm of the embeddings before the first layer (BART's `layernorm_embedding`).
    pub embed_norm: Option<(Norm, String)>,
    /// The norm after the last layer (pre-LN families: T5's `final_layer_norm`).
    pub final_norm: Option<(Norm, String)>,
    /// T5's relative position bias table `{name}.weight [num_buckets, heads]`, a template in
    /// `{i}`: layer 0's when shared, each layer's own with `RelativeBias::per_layer`.
    pub relative_bias: Option<String>,
    /// `embed_norm` runs on the token embeddings before the positions are added
    /// (BlenderbotSmall's decoder); after them otherwise.
    pub norm_before_positions: bool,
}

/// Absolute positions added to a stack's embeddings.
#[derive(Clone, Debug, PartialEq)]
pub enum StackPositions {
    /// The learned table `{name}.weight`, rows `past + t + position_offset` (BART, Blenderbot).
    Learned(String),
    /// A fixed table of `[sin(p·f_i) | cos(p·f_i)]` halves, `f_i = 10000^(−2i/d)` computed in
    /// f64 and rounded (Marian's and Pegasus' `create_weight`), rows `past + t`.
    Sinusoidal,
    /// fairseq's table (M2M-100): `f_i = exp(−i·ln(10000)/(d/2 − 1))` in f32, row `padding_idx`
    /// zero; position ids from the token ids, `padding_idx + past + count of non-pad ids so far`
    /// on real tokens and `padding_idx` on pad tokens.
    FairseqFromIds { padding_idx: usize },
}

/// T5's bucketed relative position bias (see `attention::relative_buckets`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelativeBias {
    pub num_buckets: usize,
    pub max_distance: usize,
    /// UMT5: every layer has its own table; T5: layer 0's is computed once and shared.
    pub per_layer: bool,
}

/// How labels become decoder inputs (transformers' `shift_tokens_right` variants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shift {
    /// `[start, labels[:-1]]` with -100 replaced by `pad` (T5, BART, Marian, ...).
    Start,
    /// mBART / PLBART: the last non-pad token of each row (its language code / EOS) moves to the
    /// front; the input is read with -100 already replaced by `pad`.
    WrapLastToken,
}

/// The encoder-decoder parts of a spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Seq2SeqSpec {
    pub encoder_layers: Vec<LayerSpec>,
    pub encoder_names: LayerNames,
    pub encoder: StackEnds,
    pub decoder: StackEnds,
    /// Cross-attention of each decoder layer; its heads, biases and scale are the layer's
    /// self-attention's (`ModelSpec::layers[i].attn`).
    pub cross: CrossNames,
    pub placement: NormPlacement,
    pub relative_bias: Option<RelativeBias>,
    /// Added to position ids before the learned table (BART: 2).
    pub position_offset: usize,
    /// The decoder output is multiplied by this before the LM head (T5 with its tied head:
    /// `d_model^-0.5`); 1 otherwise.
    pub head_scale: f32,
    /// A stored bias `[1, vocab]` added to the logits (BART's `final_logits_bias`): a buffer,
    /// loaded and saved but never trained.
    pub final_logits_bias: Option<String>,
    /// Stored fixed position tables `{name}.weight [rows, hidden]` (Pegasus keeps its sinusoids
    /// in the checkpoint): buffers kept for saving; the graph computes the same rows.
    pub stored_tables: Vec<(String, usize)>,
    /// Stored copies of the tied embedding (`encoder.embed_tokens.weight`, a tied `lm_head`)
    /// some checkpoints keep: skipped on load, as transformers ties them.
    pub tied_aliases: Vec<String>,
    pub shift: Shift,
    /// Switch Transformers' sparse feed-forward layers; `None` for dense models.
    pub switch: Option<super::switch::SwitchSpec>,
    pub decoder_start_token_id: i32,
    pub pad_token_id: i32,
    /// In train mode the decoder's self-attention hides keys whose input id is `pad_token_id`
    /// (T5Gemma: without a cache, as in training, its decoder builds its default mask
    /// `decoder_input_ids != pad`; in eval mode `generate` and a labelled forward make a cache
    /// and attend every position).
    pub pad_keys_in_training: bool,
}
