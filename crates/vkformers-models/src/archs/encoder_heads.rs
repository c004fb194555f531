//! An encoder's task head from the config's `architectures`: masked LM, sequence classifier
//! (with its `problem_type`), token classifier, or the bare model.

use serde_json::Value;

use crate::encoder::{ClassifierHead, ClsPooling, EncoderHead, MlmHead, PoolAct, Problem};
use crate::error::{ModelError, Result};

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
        return Ok(EncoderHead::TokenClassification { out: "classifier".into(), num_labels, transform: None });
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
        pooling: ClsPooling::First,
        dense_bias: true,
        norm: None,
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
        assert_eq!(tok, EncoderHead::TokenClassification { out: "classifier".into(), num_labels: 2, transform: None });
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
