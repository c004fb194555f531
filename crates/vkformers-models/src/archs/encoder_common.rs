//! What the encoder families share: `hidden_act` names, the post-LN BERT layer, and the
//! `ModelSpec` of an encoder from its parts (the decoder-only fields left neutral).

use vkformers_kernels::activation::Activation;

pub(crate) use super::encoder_heads::first_architecture;
pub(super) use super::encoder_heads::{head, is_bare};
use crate::encoder::{EncoderHead, EncoderSpec};
use crate::error::{ModelError, Result};
use crate::spec::{layer_name, AttnSpec, LayerNames, LayerSpec, MapEntry, MlpSpec, ModelSpec, Norm, Residual};

/// `hidden_act` as `ACT2FN` reads it.
pub(super) fn activation(name: &str) -> Result<Activation> {
    match name {
        "gelu" => Ok(Activation::Gelu),
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Activation::GeluTanh),
        "relu" => Ok(Activation::Relu),
        "silu" | "swish" => Ok(Activation::Silu),
        other => Err(ModelError::Unsupported(format!("hidden_act `{other}` in an encoder"))),
    }
}

/// BERT's word and position tables under the embeddings module `e` (`{e}.word_embeddings`,
/// `{e}.position_embeddings`), which most encoder families keep.
pub(super) fn bert_tables(e: &str) -> (String, String) {
    (format!("{e}.word_embeddings"), format!("{e}.position_embeddings"))
}

/// One encoder layer: multi-head attention with biases, a plain MLP with biases, and the
/// LayerNorm `norm` in both norm slots (after each residual add in a post-LN encoder).
pub(super) fn layer(
    hidden: usize,
    heads: usize,
    intermediate: usize,
    act: Activation,
    norm: &Norm,
) -> Result<LayerSpec> {
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(ModelError::Config(format!("hidden size {hidden} is not a multiple of {heads} attention heads")));
    }
    let head_dim = hidden / heads;
    Ok(LayerSpec {
        attn_norm: Some(norm.clone()),
        attn: AttnSpec { qkv_bias: true, out_bias: true, ..AttnSpec::new(heads, heads, head_dim) },
        post_attn_norm: None,
        mlp_norm: Some(norm.clone()),
        mlp: MlpSpec::Plain { intermediate, act, bias: true },
        post_mlp_norm: None,
        residual: Residual::Sequential,
        residual_scale: 1.0,
    })
}

/// The parts of an encoder's spec that differ between families.
pub(super) struct EncoderParts<'a> {
    pub model_type: &'a str,
    pub vocab: usize,
    pub hidden: usize,
    pub layers: Vec<LayerSpec>,
    pub names: LayerNames,
    /// Word and position tables (`{name}.weight`).
    pub word: String,
    pub positions: String,
    /// The LayerNorm on the summed embeddings and its name (none in some pre-LN families).
    pub embed_norm: Option<(Norm, String)>,
    /// The MLM decoder module (its `.weight` is read only when untied).
    pub decoder: String,
    pub tied: bool,
    pub padding_idx: Option<usize>,
    pub encoder: EncoderSpec,
}

impl EncoderParts<'_> {
    pub fn build(self) -> ModelSpec {
        let (embed_norm, norm_name) = match self.embed_norm {
            Some((n, name)) => (Some(n), name),
            None => (None, String::new()),
        };
        // Unused: an encoder's final norm (pre-LN families) is `EncoderSpec::final_norm`.
        let unused = embed_norm.clone().or_else(|| self.encoder.final_norm.as_ref().map(|(n, _)| n.clone()));
        let final_norm = unused.unwrap_or(Norm::Layer { eps: 1e-12, bias: true });
        let size = (self.vocab, self.hidden);
        let mut spec = ModelSpec {
            embed_norm,
            embed_norm_name: norm_name,
            tied_head: self.tied,
            embed_name: self.word,
            final_norm_name: String::new(),
            head_name: self.decoder,
            position_embedding: Some(self.positions),
            padding_idx: self.padding_idx,
            encoder: Some(self.encoder),
            ..ModelSpec::with_layers(self.model_type, size, self.layers, final_norm, self.names)
        };
        spec.weight_map = legacy_norm_names(&spec);
        spec
    }
}

/// Checkpoints converted from TensorFlow store LayerNorms as `gamma` / `beta` (bert-base-uncased);
/// transformers renames them on load. Each norm's old names map to its parameters (and are
/// saved under the names the folder used).
fn legacy_norm_names(spec: &ModelSpec) -> Vec<MapEntry> {
    let n = &spec.layer_names;
    let mut norms: Vec<String> = spec.embed_norm.iter().map(|_| spec.embed_norm_name.clone()).collect();
    for i in 0..spec.layers.len() {
        norms.push(layer_name(&n.attn_norm, i));
        norms.push(layer_name(&n.mlp_norm, i));
    }
    if let Some(e) = &spec.encoder {
        norms.extend(e.final_norm.iter().map(|(_, name)| name.clone()));
        if let EncoderHead::MaskedLm(h) = &e.head {
            // Empty: a head without a transform (EuroBERT's bare `lm_head`).
            norms.extend(Some(h.norm_name.clone()).filter(|n| !n.is_empty()));
        }
    }
    let rename = |from: String, to: String| MapEntry { hf: from, transpose: false, parts: vec![(to, 0)], groups: 1 };
    norms
        .iter()
        .flat_map(|m| {
            [rename(format!("{m}.gamma"), format!("{m}.weight")), rename(format!("{m}.beta"), format!("{m}.bias"))]
        })
        .collect()
}
