//! What the encoder families share: `hidden_act` names, the post-LN BERT layer, and the
//! `ModelSpec` of an encoder from its parts (the decoder-only fields left neutral).

use serde_json::Value;
use vkformers_kernels::activation::Activation;

use crate::encoder::{ClassifierHead, EncoderHead, EncoderSpec, MlmHead, PoolAct, Problem};
use crate::error::{ModelError, Result};
use crate::spec::{
    layer_name, AttnSpec, LayerNames, LayerSpec, MapEntry, MlpSpec, ModelSpec, Norm, PositionIds, Residual,
};

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
        let mut spec = ModelSpec {
            model_type: self.model_type.into(),
            vocab: self.vocab,
            hidden: self.hidden,
            embed_scale: 1.0,
            embed_norm,
            embed_norm_name: norm_name,
            layers: self.layers,
            final_norm: unused.unwrap_or(Norm::Layer { eps: 1e-12, bias: true }),
            tied_head: self.tied,
            head_bias: false,
            logit_scale: 1.0,
            final_softcap: None,
            embed_name: self.word,
            final_norm_name: String::new(),
            head_name: self.decoder,
            layer_names: self.names,
            position_embedding: Some(self.positions),
            position_ids: PositionIds::Arange,
            position_offset: 0,
            sinusoidal: None,
            project_in: None,
            project_out: None,
            weight_map: Vec::new(),
            joins: Vec::new(),
            padding_idx: self.padding_idx,
            encoder: Some(self.encoder),
            residual_init: crate::spec::ResidualInit::Plain,
            layer_init_std: None,
            carried: Vec::new(),
            module_paths: Vec::new(),
            seq2seq: None,
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
            norms.push(h.norm_name.clone());
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

/// The first name of `architectures` (empty when none).
pub(crate) fn first_architecture(cfg: &Value) -> &str {
    cfg.get("architectures").and_then(Value::as_array).and_then(|a| a.first()).and_then(Value::as_str).unwrap_or("")
}

/// `architectures` names the base model (`BertModel`, `RobertaModel`): its tensors are stored
/// without the base-model prefix (`embeddings.word_embeddings.weight`).
pub(super) fn is_bare(cfg: &Value) -> bool {
    let first = first_architecture(cfg);
    first.ends_with("Model") && !first.contains("For")
}

/// The head `architectures` names: `*ForSequenceClassification` gets the classifier `cls`
/// (its dense layer, activation and output names) sized by the config's labels, with its
/// `problem_type`; `*ForTokenClassification` a `classifier` on every position (the name in all
/// these families); `*ForMaskedLM` (or none) the masked-LM head.
/// A bare model (`BertModel`: no `For...` head) is supported where the family passes the name
/// of its pooler (`bare_pooler`), i.e. where its spec strips the base-model prefix.
pub(super) fn head(
    cfg: &Value,
    mlm: MlmHead,
    cls: (&str, PoolAct, &str),
    bare_pooler: Option<&str>,
) -> Result<EncoderHead> {
    let first = first_architecture(cfg);
    if is_bare(cfg) {
        return match bare_pooler {
            Some(p) => Ok(EncoderHead::Bare { pooler: Some(p.into()) }),
            None => Err(ModelError::Unsupported(format!("the bare `{first}` (without a task head)"))),
        };
    }
    let token = first.ends_with("ForTokenClassification");
    if !token && !first.ends_with("ForSequenceClassification") {
        if !(first.is_empty() || first.ends_with("ForMaskedLM")) {
            return Err(ModelError::Unsupported(format!(
                "the `{first}` head (supported: *ForMaskedLM, *ForSequenceClassification, *ForTokenClassification)"
            )));
        }
        return Ok(EncoderHead::MaskedLm(mlm));
    }
    // transformers sizes the classifier by `id2label` (which `num_labels` sets and saves).
    let num_labels = match cfg.get("id2label").and_then(Value::as_object) {
        Some(m) => m.len(),
        None => cfg.get("num_labels").and_then(Value::as_u64).unwrap_or(2) as usize,
    };
    if num_labels == 0 {
        return Err(ModelError::Config("a sequence classifier with no labels (id2label / num_labels)".into()));
    }
    if token {
        return Ok(EncoderHead::TokenClassification { out: "classifier".into(), num_labels });
    }
    let problem = match cfg.get("problem_type").and_then(Value::as_str) {
        None => None,
        Some("regression") => Some(Problem::Regression),
        Some("single_label_classification") => Some(Problem::SingleLabel),
        Some("multi_label_classification") => Some(Problem::MultiLabel),
        Some(other) => return Err(ModelError::Config(format!("unknown problem_type `{other}`"))),
    };
    let (dense, act, out) = cls;
    Ok(EncoderHead::SequenceClassification(ClassifierHead {
        dense: dense.into(),
        act,
        out: out.into(),
        num_labels,
        problem,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::archs::spec_from_config;
    use crate::encoder::{EncoderHead, Problem};

    fn head(model_type: &str, edit: impl Fn(&mut Value)) -> crate::error::Result<EncoderHead> {
        let mut c = json!({
            "model_type": model_type, "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 4, "intermediate_size": 48, "dim": 32, "n_layers": 1, "n_heads": 4,
            "hidden_dim": 48, "embedding_size": 32
        });
        edit(&mut c);
        Ok(spec_from_config(&c)?.encoder.expect("an encoder").head)
    }

    #[test]
    fn the_head_follows_architectures_and_problem_type() {
        assert!(matches!(head("bert", |_| {}).unwrap(), EncoderHead::MaskedLm(_)));
        let cls = head("roberta", |c| {
            c["architectures"] = json!(["RobertaForSequenceClassification"]);
            c["id2label"] = json!({"0": "a", "1": "b", "2": "c"});
            c["problem_type"] = json!("multi_label_classification");
        });
        match cls.unwrap() {
            EncoderHead::SequenceClassification(h) => {
                assert_eq!((h.num_labels, h.problem), (3, Some(Problem::MultiLabel)));
                assert_eq!(h.out, "classifier.out_proj");
            }
            other => panic!("{other:?}"),
        }
        let tok = head("electra", |c| c["architectures"] = json!(["ElectraForTokenClassification"])).unwrap();
        assert_eq!(tok, EncoderHead::TokenClassification { out: "classifier".into(), num_labels: 2 });
        let bare = head("bert", |c| c["architectures"] = json!(["BertModel"])).unwrap();
        assert_eq!(bare, EncoderHead::Bare { pooler: Some("pooler.dense".into()) });
    }

    #[test]
    fn heads_and_options_not_modelled_are_refused_by_name() {
        for (mt, arch) in
            [("bert", "BertForPreTraining"), ("distilbert", "DistilBertModel"), ("electra", "ElectraModel")]
        {
            let e = head(mt, |c| c["architectures"] = json!([arch])).unwrap_err().to_string();
            assert!(e.contains(arch), "{arch}: {e}");
        }
        let e = head("bert", |c| {
            c["architectures"] = json!(["BertForSequenceClassification"]);
            c["problem_type"] = json!("ranking");
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("ranking"), "{e}");
    }
}
