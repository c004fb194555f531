//! The BERT family of post-LN encoders with a masked-LM head: `bert`, `roberta` and the models
//! that reuse their modules under another prefix. Learned absolute positions (RoBERTa: counted
//! from `padding_idx + 1` over non-pad ids), token types, LayerNorm after each residual add.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::activation::Activation;

use super::common::parse;
use super::encoder_common::{activation, head as head_of, is_bare, layer, EncoderParts};
use crate::encoder::{EncoderHead, EncoderSpec, MlmHead, NormPlacement, PoolAct, Positions};
use crate::error::{ModelError, Result};
use crate::spec::{padding_idx_or, LayerNames, ModelSpec, Norm};

#[derive(Deserialize)]
struct Config {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "gelu")]
    hidden_act: String,
    #[serde(default = "default_positions")]
    max_position_embeddings: usize,
    #[serde(default = "two")]
    type_vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
    #[serde(default)]
    is_decoder: bool,
    #[serde(default)]
    add_cross_attention: bool,
    /// ERNIE 3.0's task-type embeddings.
    #[serde(default)]
    use_task_id: bool,
    /// Configs older than transformers 5 may name relative position schemes here.
    position_embedding_type: Option<String>,
}

fn gelu() -> String {
    "gelu".into()
}
fn default_positions() -> usize {
    512
}
fn two() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn yes() -> bool {
    true
}

/// BERT's module names under `{p}.encoder.layer.{i}`: the norm after attention sits in the
/// `attn_norm` slot and the one after the MLP in `mlp_norm` (applied post-add).
pub(super) fn names(p: &str) -> LayerNames {
    let l = under(p, "encoder.layer.{i}");
    LayerNames {
        attn_norm: format!("{l}.attention.output.LayerNorm"),
        q: format!("{l}.attention.self.query"),
        k: format!("{l}.attention.self.key"),
        v: format!("{l}.attention.self.value"),
        o: format!("{l}.attention.output.dense"),
        q_norm: String::new(),
        k_norm: String::new(),
        mlp_norm: format!("{l}.output.LayerNorm"),
        post_attn_norm: String::new(),
        post_mlp_norm: String::new(),
        gate: String::new(),
        up: format!("{l}.intermediate.dense"),
        down: format!("{l}.output.dense"),
    }
}

/// Where a family's layer norms sit and what they are called.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// BERT: after each residual add; a LayerNorm on the embeddings.
    Post,
    /// RoBERTa-PreLayerNorm: before attention (`attention.LayerNorm`) and the MLP
    /// (`intermediate.LayerNorm`), a final `LayerNorm`; the embeddings keep theirs.
    PreLn,
    /// XLM-RoBERTa-XL: pre-LN (`attention.self_attn_layer_norm`, the layer's `LayerNorm`), a
    /// final `encoder.LayerNorm`, no norm on the embeddings.
    XlmRobertaXl,
    /// Megatron-BERT: pre-LN (`attention.ln`, the layer's `ln`), a final `encoder.ln`, no norm
    /// on the embeddings.
    Megatron,
}

impl Layout {
    fn names(self, p: &str) -> LayerNames {
        let l = under(p, "encoder.layer.{i}");
        let (attn_norm, mlp_norm) = match self {
            Layout::Post => return names(p),
            Layout::PreLn => (format!("{l}.attention.LayerNorm"), format!("{l}.intermediate.LayerNorm")),
            Layout::XlmRobertaXl => (format!("{l}.attention.self_attn_layer_norm"), format!("{l}.LayerNorm")),
            Layout::Megatron => (format!("{l}.attention.ln"), format!("{l}.ln")),
        };
        LayerNames { attn_norm, mlp_norm, ..names(p) }
    }

    /// The norm after the last layer (pre-LN layouts).
    fn final_norm(self, p: &str) -> Option<String> {
        match self {
            Layout::Post => None,
            Layout::PreLn => Some(under(p, "LayerNorm")),
            Layout::XlmRobertaXl => Some(under(p, "encoder.LayerNorm")),
            Layout::Megatron => Some(under(p, "encoder.ln")),
        }
    }

    fn embedding_norm(self) -> bool {
        matches!(self, Layout::Post | Layout::PreLn)
    }
}

/// `{prefix}.{name}`, or `name` under no prefix (a bare model's tensors).
fn under(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.into()
    } else {
        format!("{prefix}.{name}")
    }
}

/// The head's module layout.
#[derive(Clone, Copy)]
enum Head {
    /// `cls.predictions.{transform.dense, transform.LayerNorm, bias}` with `hidden_act`.
    Bert,
    /// `lm_head.{dense, layer_norm, bias}` with exact GELU whatever `hidden_act` says.
    Roberta,
}

/// The spec of a BERT-shaped masked-LM model stored under `prefix` (`bert`, `roberta`, ...);
/// `from_ids`: RoBERTa's position ids; `pad_default`: the config class's `pad_token_id`.
fn spec(
    model_type: &str,
    prefix: &str,
    head: Head,
    from_ids: bool,
    pad_default: i64,
    layout: Layout,
    cfg: &Value,
) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    // A bare model (`BertModel`) stores its tensors without the `bert.` prefix.
    let prefix = if is_bare(cfg) { "" } else { prefix };
    if c.is_decoder || c.add_cross_attention {
        return Err(ModelError::Unsupported(format!("{model_type} as a decoder (is_decoder / add_cross_attention)")));
    }
    if let Some(p) = c.position_embedding_type.as_deref().filter(|p| *p != "absolute") {
        return Err(ModelError::Unsupported(format!("{model_type} position_embedding_type `{p}`")));
    }
    if c.use_task_id {
        return Err(ModelError::Unsupported(format!("{model_type} use_task_id (task-type embeddings)")));
    }
    if !c.tie_word_embeddings {
        // Untied, transformers' decoder keeps its own bias and `{head}.bias` becomes a dead
        // parameter (no gradient, no AdamW update): not modelled yet.
        return Err(ModelError::Unsupported(format!("{model_type} with tie_word_embeddings false")));
    }
    let act = activation(&c.hidden_act)?;
    let norm = Norm::Layer { eps: c.layer_norm_eps as f32, bias: true };
    let layer = layer(c.hidden_size, c.num_attention_heads, c.intermediate_size, act, &norm)?;
    let padding_idx = padding_idx_or(cfg, pad_default, c.vocab_size);
    let positions = match (from_ids, padding_idx) {
        (false, _) => Positions::Arange,
        (true, Some(padding_idx)) => Positions::FromIds { padding_idx },
        (true, None) => {
            return Err(ModelError::Config(format!("{model_type} needs a pad_token_id for its position ids")))
        }
    };
    let (head_prefix, head) = task_head(cfg, head, prefix, act, &norm)?;
    let ignored = ignored(prefix, head_prefix, &head);
    let e = under(prefix, "embeddings");
    let spec = EncoderParts {
        model_type,
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        layers: vec![layer; c.num_hidden_layers],
        names: layout.names(prefix),
        word: format!("{e}.word_embeddings"),
        positions: format!("{e}.position_embeddings"),
        embed_norm: layout.embedding_norm().then(|| (norm.clone(), format!("{e}.LayerNorm"))),
        decoder: format!("{head_prefix}.decoder"),
        tied: true,
        padding_idx,
        encoder: EncoderSpec {
            embed_dim: c.hidden_size,
            token_types: Some((format!("{e}.token_type_embeddings"), c.type_vocab_size)),
            positions,
            max_positions: c.max_position_embeddings,
            embed_project: None,
            placement: if layout == Layout::Post { NormPlacement::Post } else { NormPlacement::Pre },
            final_norm: layout.final_norm(prefix).map(|name| (norm.clone(), name)),
            head,
            ignored,
        },
    }
    .build();
    check_positions(spec, c.max_position_embeddings)
}

/// The family's head prefix and the head `architectures` asks for: the masked LM
/// (`cls.predictions.*` with `hidden_act`, or RoBERTa's `lm_head.*` with exact GELU), the
/// sequence classifier (BERT's tanh pooler + `classifier`, or RoBERTa's `classifier.dense` +
/// `classifier.out_proj`), the token classifier or the bare model.
fn task_head(
    cfg: &Value,
    head: Head,
    prefix: &str,
    act: Activation,
    norm: &Norm,
) -> Result<(&'static str, EncoderHead)> {
    let pooler = under(prefix, "pooler.dense");
    let (head_prefix, mlm, cls) = match head {
        Head::Bert => (
            "cls.predictions",
            MlmHead {
                dense: "cls.predictions.transform.dense".into(),
                act,
                norm: norm.clone(),
                norm_name: "cls.predictions.transform.LayerNorm".into(),
                bias: "cls.predictions.bias".into(),
            },
            (pooler.as_str(), PoolAct::Tanh, "classifier"),
        ),
        Head::Roberta => (
            "lm_head",
            MlmHead {
                dense: "lm_head.dense".into(),
                act: Activation::Gelu,
                norm: norm.clone(),
                norm_name: "lm_head.layer_norm".into(),
                bias: "lm_head.bias".into(),
            },
            ("classifier.dense", PoolAct::Tanh, "classifier.out_proj"),
        ),
    };
    Ok((head_prefix, head_of(cfg, mlm, cls, Some(&pooler))?))
}

/// Tensors of heads a pre-training checkpoint stores that this model has not: the pooler (only
/// BERT's sequence classifier and the bare model read it), the other family head prefixes, and
/// the tied decoder's bias alias (`cls.predictions.decoder.bias` = `cls.predictions.bias`).
fn ignored(prefix: &str, head_prefix: &str, head: &EncoderHead) -> Vec<String> {
    let pooler_used = match head {
        EncoderHead::Bare { .. } => true,
        EncoderHead::SequenceClassification(c) => c.dense.ends_with("pooler.dense"),
        _ => false,
    };
    let mut out = Vec::new();
    if !pooler_used {
        out.push(under(prefix, "pooler."));
    }
    if let EncoderHead::MaskedLm(_) = head {
        out.push(format!("{head_prefix}.decoder.bias"));
        out.push("cls.seq_relationship.".into());
    } else {
        out.extend(["cls.".into(), "lm_head.".into()]);
    }
    out
}

/// RoBERTa's ids start at `padding_idx + 1`, so its table must hold more than that.
fn check_positions(s: ModelSpec, max: usize) -> Result<ModelSpec> {
    if let Some(Positions::FromIds { padding_idx }) = s.encoder.as_ref().map(|e| e.positions) {
        if max <= padding_idx + 1 {
            return Err(ModelError::Config(format!(
                "max_position_embeddings {max} leaves no position after padding_idx {padding_idx}"
            )));
        }
    }
    Ok(s)
}

pub fn bert(cfg: &Value) -> Result<ModelSpec> {
    spec("bert", "bert", Head::Bert, false, 0, Layout::Post, cfg)
}

pub fn roberta(cfg: &Value) -> Result<ModelSpec> {
    spec("roberta", "roberta", Head::Roberta, true, 1, Layout::Post, cfg)
}

/// RoBERTa's modules (XLM-R's vocabulary is larger; the graph is the same).
pub fn xlm_roberta(cfg: &Value) -> Result<ModelSpec> {
    spec("xlm-roberta", "roberta", Head::Roberta, true, 1, Layout::Post, cfg)
}

pub fn camembert(cfg: &Value) -> Result<ModelSpec> {
    spec("camembert", "roberta", Head::Roberta, true, 1, Layout::Post, cfg)
}

pub fn data2vec_text(cfg: &Value) -> Result<ModelSpec> {
    spec("data2vec-text", "data2vec_text", Head::Roberta, true, 1, Layout::Post, cfg)
}

/// BERT's modules under `ernie.` (without `use_task_id`).
pub fn ernie(cfg: &Value) -> Result<ModelSpec> {
    spec("ernie", "ernie", Head::Bert, false, 0, Layout::Post, cfg)
}

/// RoBERTa with pre-LN layers and a final `roberta_prelayernorm.LayerNorm`.
pub fn roberta_prelayernorm(cfg: &Value) -> Result<ModelSpec> {
    spec("roberta-prelayernorm", "roberta_prelayernorm", Head::Roberta, true, 1, Layout::PreLn, cfg)
}

/// RoBERTa's modules with pre-LN layers and no norm on the embeddings.
pub fn xlm_roberta_xl(cfg: &Value) -> Result<ModelSpec> {
    spec("xlm-roberta-xl", "roberta", Head::Roberta, true, 1, Layout::XlmRobertaXl, cfg)
}

/// BERT's modules with pre-LN layers (`ln`), a final `encoder.ln`, no norm on the embeddings.
pub fn megatron_bert(cfg: &Value) -> Result<ModelSpec> {
    spec("megatron-bert", "bert", Head::Bert, false, 0, Layout::Megatron, cfg)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::archs::spec_from_config;

    fn bert(edit: impl Fn(&mut serde_json::Value)) -> String {
        let mut c = json!({
            "model_type": "bert", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 48
        });
        edit(&mut c);
        match spec_from_config(&c) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn options_the_graph_does_not_model_are_refused_by_name() {
        assert_eq!(bert(|_| {}), "");
        for (key, v, named) in [
            ("is_decoder", json!(true), "is_decoder"),
            ("use_task_id", json!(true), "use_task_id"),
            ("tie_word_embeddings", json!(false), "tie_word_embeddings"),
            ("position_embedding_type", json!("relative_key"), "relative_key"),
            ("hidden_act", json!("mish"), "mish"),
            ("num_attention_heads", json!(5), "attention heads"),
        ] {
            let e = bert(|c| c[key] = v.clone());
            assert!(e.contains(named), "{key}={v}: {e:?}");
        }
    }

    #[test]
    fn roberta_needs_room_for_its_offset_positions() {
        let c = json!({
            "model_type": "roberta", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 4, "intermediate_size": 48, "max_position_embeddings": 2
        });
        let e = spec_from_config(&c).expect_err("error").to_string();
        assert!(e.contains("max_position_embeddings 2"), "{e}");
    }
}
