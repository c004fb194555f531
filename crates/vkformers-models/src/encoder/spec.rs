//! What an encoder-only model (BERT family) adds to `ModelSpec`: token types, how position ids
//! are made, where the layer norms sit, and the masked-LM head. The shared parts (word and
//! position tables, the embedding LayerNorm, the layers' attention and MLP, the weight names)
//! stay in `ModelSpec`.

use vkformers_kernels::activation::Activation;

use crate::spec::Norm;

/// Where each layer's two norms sit (the norms are `LayerSpec::attn_norm` / `mlp_norm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormPlacement {
    /// BERT: `x = LN(x + attn(x)); x = LN(x + mlp(x))`.
    Post,
    /// `x = x + attn(LN(x)); x = x + mlp(LN(x))`, and `final_norm` after the last layer.
    Pre,
}

/// How position ids are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// `0..T` in every row (BERT).
    Arange,
    /// RoBERTa's `create_position_ids_from_input_ids`: `padding_idx + cumsum(ids != pad)` on
    /// real tokens and `padding_idx` on pad tokens (decided by the ids, not the attention mask);
    /// the table is `nn.Embedding(.., padding_idx)`, so its row `padding_idx` gets no gradient.
    FromIds { padding_idx: usize },
}

/// The masked-LM prediction head: `decoder(LN(act(dense(h))))` with the decoder's weight tied
/// to the word embeddings (or `{decoder}.weight` when untied) and its own bias.
#[derive(Clone, Debug, PartialEq)]
pub struct MlmHead {
    /// `{dense}.weight [embed_dim, hidden]` and `.bias` (with `dense_bias`).
    pub dense: String,
    pub dense_bias: bool,
    pub act: Activation,
    pub norm: Norm,
    pub norm_name: String,
    /// The decoder's bias `[vocab]` (full parameter name, e.g. `cls.predictions.bias`).
    pub bias: String,
}

impl MlmHead {
    /// The usual head: `dense` (with a bias), `act`, the LayerNorm `norm` named `norm_name`, and
    /// the decoder's bias `bias` (full names without `.weight`).
    pub fn transform(dense: &str, act: Activation, norm: &Norm, norm_name: &str, bias: &str) -> Self {
        MlmHead {
            dense: dense.into(),
            dense_bias: true,
            act,
            norm: norm.clone(),
            norm_name: norm_name.into(),
            bias: bias.into(),
        }
    }

    /// BERT's `cls.predictions` (`transform.dense`, the LayerNorm `transform.{norm_name}`,
    /// `bias`).
    pub fn bert(act: Activation, norm: &Norm, norm_name: &str) -> Self {
        let p = "cls.predictions";
        Self::transform(
            &format!("{p}.transform.dense"),
            act,
            norm,
            &format!("{p}.transform.{norm_name}"),
            &format!("{p}.bias"),
        )
    }

    /// RoBERTa's `lm_head` (`dense`, exact GELU, `layer_norm`, `bias`), which ESM shares.
    pub fn roberta(norm: &Norm) -> Self {
        Self::transform("lm_head.dense", Activation::Gelu, norm, "lm_head.layer_norm", "lm_head.bias")
    }
}

/// A `tanh` or one of the kernels' activations (the classifier heads' poolers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolAct {
    Tanh,
    Act(Activation),
}

/// How a sequence classifier's loss is computed (transformers' `problem_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// MSE against float labels (`num_labels == 1` without a `problem_type`).
    Regression,
    /// Cross-entropy against class ids.
    SingleLabel,
    /// BCE-with-logits against 0/1 floats per label.
    MultiLabel,
}

/// `out(act(dense(h[:, 0])))` (see `pooling`): each row's first token (`[CLS]` / `<s>`) through a dense layer
/// (BERT's pooler, RoBERTa's `classifier.dense`, DistilBERT's `pre_classifier`) and the output
/// projection to `num_labels` logits.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassifierHead {
    pub dense: String,
    pub act: PoolAct,
    pub out: String,
    pub num_labels: usize,
    /// `problem_type` of the config; `None`: decided from `num_labels` and the labels' type.
    pub problem: Option<Problem>,
    pub pooling: ClsPooling,
    /// `dense` has a bias (all but ModernBERT without `classifier_bias`).
    pub dense_bias: bool,
    /// A norm after the activation (ModernBERT's `head.norm`) and its name.
    pub norm: Option<(Norm, String)>,
}

/// Which tokens a sequence classifier reads (EuroBERT's `classifier_pooling`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClsPooling {
    /// Each row's first token (`[CLS]`, `<s>`, EuroBERT's `bos`).
    #[default]
    First,
    /// The mean over the row's real tokens (attention mask 1), then the classifier.
    Mean,
    /// The classifier on every token, then the mean of the logits over real tokens.
    Late,
}

/// `norm(act(dense(h)))` on every token before a token classifier (ModernBERT's `head`).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenTransform {
    /// `{dense}.weight [hidden, hidden]`, and `.bias` with `dense_bias`.
    pub dense: String,
    pub dense_bias: bool,
    pub act: Activation,
    pub norm: (Norm, String),
}

/// What sits on the last hidden state.
#[derive(Clone, Debug, PartialEq)]
pub enum EncoderHead {
    MaskedLm(MlmHead),
    SequenceClassification(ClassifierHead),
    /// `{out}` (`[num_labels, hidden]` + bias) on every position: logits `[B·T, num_labels]`;
    /// after ModernBERT's `transform` where it has one.
    TokenClassification {
        out: String,
        num_labels: usize,
        transform: Option<TokenTransform>,
    },
    /// The bare model (`BertModel`, stored without the `bert.` prefix): the last hidden state,
    /// for sentence embeddings. `pooler`: BERT's pooler (`[hidden, hidden]` + bias), stored by
    /// the bare model but not read by mean or CLS pooling.
    Bare {
        pooler: Option<String>,
    },
}

/// The encoder-only parts of a spec.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderSpec {
    /// Width of the embedding tables (ELECTRA's `embedding_size`); `hidden` for most families.
    pub embed_dim: usize,
    /// `{name}.weight [type_vocab, embed_dim]`, or none (DistilBERT).
    pub token_types: Option<(String, usize)>,
    pub positions: Positions,
    /// Rows of the position table (`max_position_embeddings`).
    pub max_positions: usize,
    /// `{name}.weight [hidden, embed_dim]` + bias after the embedding norm (ELECTRA when
    /// `embedding_size != hidden_size`).
    pub embed_project: Option<String>,
    pub placement: NormPlacement,
    /// The norm after the last layer (pre-LN families) and its name.
    pub final_norm: Option<(Norm, String)>,
    pub head: EncoderHead,
    /// Stored tensors under these prefixes belong to heads this model does not have (a
    /// pre-training checkpoint's pooler and next-sentence head, the tied decoder's bias alias):
    /// skipped on load, as transformers drops them.
    pub ignored: Vec<String>,
    /// Fixed sinusoid tables `{name}.weight [rows, width]` the checkpoint stores (RoFormer's
    /// `encoder.embed_positions`): buffers loaded and saved unchanged; the graph's rotary
    /// kernel computes the same angles (`pos / 10000^(2i/width)`).
    pub stored_tables: Vec<(String, usize, usize)>,
    /// Rotary layers also rotate the values (RoFormer's `rotary_value`).
    pub rope_on_values: bool,
    /// ESM's rescaling of the summed embeddings by the batch (none elsewhere).
    pub masking: EmbedMasking,
    /// Linear modules `{name}.weight [out, in]` + `.bias [out]` the checkpoint stores that no
    /// loss here reaches (ESM's `contact_head.regression`, fed by attention maps): buffers,
    /// loaded and saved unchanged, as transformers' AdamW skips a parameter without gradient.
    pub unread_linears: Vec<(String, usize, usize)>,
    /// MPNet's relative position bias shared by every layer (none elsewhere).
    pub relative_bias: Option<super::RelativeBias>,
    /// DeBERTa's disentangled attention (its pair mask, c2p / p2c terms); none elsewhere.
    pub disentangled: Option<super::Disentangled>,
    /// MobileBERT's bottlenecked layers and trigram embeddings (replace the generic ones).
    pub mobile: Option<super::MobileSpec>,
    /// ModernBERT's `sparse_prediction` with its `sparse_pred_ignore_index`: with labels, the
    /// masked-LM head runs only on the positions whose label is not that index (logits
    /// `[targets, V]`; the same loss).
    pub sparse_prediction: Option<i32>,
    /// The layers run, as indices into `ModelSpec::layers` (ALBERT's shared layers: each stored
    /// layer runs several times); empty: each layer once, in order.
    pub layer_order: Vec<usize>,
}

impl EncoderSpec {
    /// The fields every family sets; the rest start empty (no token types, projection, final
    /// norm, ignored prefixes, stored tables, relative bias, DeBERTa/MobileBERT/ModernBERT
    /// options; each layer once, in order), for `EncoderSpec { .., ..EncoderSpec::new(..) }`.
    pub fn new(
        embed_dim: usize,
        max_positions: usize,
        positions: Positions,
        placement: NormPlacement,
        head: EncoderHead,
    ) -> Self {
        EncoderSpec {
            embed_dim,
            token_types: None,
            positions,
            max_positions,
            embed_project: None,
            placement,
            final_norm: None,
            head,
            ignored: Vec::new(),
            stored_tables: Vec::new(),
            rope_on_values: false,
            masking: EmbedMasking::default(),
            unread_linears: Vec::new(),
            relative_bias: None,
            disentangled: None,
            mobile: None,
            sparse_prediction: None,
            layer_order: Vec::new(),
        }
    }
}

/// ESM's embedding rescalings, both fixed by the batch (constants, no gradient of their own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmbedMasking {
    /// `token_dropout` with this `mask_token_id`: word embeddings of mask tokens are zeroed
    /// and the row scaled by `(1 - 0.15·0.8) / (1 - masks_in_row / real_tokens_in_row)`
    /// (in eval too: transformers does not gate it on `training`).
    pub token_dropout: Option<i32>,
    /// The embedding output times the attention mask (padded rows enter the layers as zeros).
    pub zero_padding: bool,
}
