//! Training encoders from the CLI: `--task` gives a folder another task head (a masked-LM
//! checkpoint fine-tuned as a classifier: the head's parameters drawn as transformers draws a
//! head it does not find), and `--mlm-probability` masks masked-LM rows as
//! `DataCollatorForLanguageModeling` does.

use std::path::Path;

use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use vkformers_data::{Example, LabelMap};
use vkformers_io::HfTokenizer;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_train::{MlmMasking, Objective};

/// An encoder task (`--task`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Task {
    /// One label per row (`{"text", "label"}`, `{"text", "text_pair", "label"}`).
    SequenceClassification,
    /// One label per word (`{"tokens", "labels"}`).
    TokenClassification,
    /// Masked-LM pre-training (the `*ForMaskedLM` head).
    MaskedLm,
}

impl Task {
    fn suffix(self) -> &'static str {
        match self {
            Task::SequenceClassification => "ForSequenceClassification",
            Task::TokenClassification => "ForTokenClassification",
            Task::MaskedLm => "ForMaskedLM",
        }
    }
}

/// The config of `dir` with the head of `task` (`architectures` renamed; `id2label` /
/// `label2id` for `num_labels` classes when given or when the config has none), and whether
/// it names another head than the folder's.
pub fn task_config(dir: &Path, task: Task, num_labels: Option<usize>) -> anyhow::Result<(Value, bool)> {
    let mut config = vkformers_io::read_json(dir.join("config.json"))?;
    let first = config["architectures"].get(0).and_then(Value::as_str).unwrap_or_default().to_string();
    let Some(base) = ["ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForPreTraining"]
        .iter()
        .find_map(|s| first.strip_suffix(s))
    else {
        bail!(
            "{}: --task needs a folder saved with a task head (`architectures` is {first:?}; a bare \
             `*Model` folder is not supported yet): start from a *ForMaskedLM checkpoint",
            dir.display()
        );
    };
    let arch = format!("{base}{}", task.suffix());
    let changed = arch != first;
    config["architectures"] = json!([arch]);
    if task != Task::MaskedLm {
        let have = config.get("id2label").and_then(Value::as_object).map(|m| m.len());
        let n = num_labels.or(have).unwrap_or(2);
        if have != Some(n) {
            let id2label: serde_json::Map<String, Value> =
                (0..n).map(|i| (i.to_string(), json!(format!("LABEL_{i}")))).collect();
            let label2id: serde_json::Map<String, Value> = (0..n).map(|i| (format!("LABEL_{i}"), json!(i))).collect();
            config["id2label"] = Value::Object(id2label);
            config["label2id"] = Value::Object(label2id);
        }
        return Ok((config, changed || have != Some(n)));
    }
    Ok((config, changed))
}

/// The model of `dir` for `task`: loaded as it is when its head is that task's, else with the
/// new head drawn from `seed` (printing what was drawn and left out, as transformers warns).
/// Only the tensors `trainable` accepts are parameters (`|_| true` to train in full; LoRA's
/// `modules_to_save` for a frozen base).
pub fn load_for_task(
    g: &Graph<'_>,
    dir: &Path,
    task: Task,
    num_labels: Option<usize>,
    seed: u64,
    trainable: &dyn Fn(&str) -> bool,
) -> anyhow::Result<Model> {
    Ok(load_for_task_drawn(g, dir, task, num_labels, seed, trainable)?.0)
}

/// [`load_for_task`], with the names of the parameters drawn for a new head.
pub fn load_for_task_drawn(
    g: &Graph<'_>,
    dir: &Path,
    task: Task,
    num_labels: Option<usize>,
    seed: u64,
    trainable: &dyn Fn(&str) -> bool,
) -> anyhow::Result<(Model, Vec<String>)> {
    let (config, new_head) = task_config(dir, task, num_labels)?;
    if !new_head {
        let model =
            Model::load_with_trainable(g, dir, trainable).with_context(|| format!("loading {}", dir.display()))?;
        return Ok((model, Vec::new()));
    }
    let (model, drawn, left_out) = Model::load_with_new_head(g, dir, config, seed, trainable)
        .with_context(|| format!("loading {} with a new {task:?} head", dir.display()))?;
    let arch = model.config["architectures"][0].as_str().unwrap_or_default().to_string();
    eprintln!("{arch}: newly initialised (train them on the task): {}", drawn.join(", "));
    if !left_out.is_empty() {
        eprintln!("{arch}: not used from the checkpoint: {}", left_out.join(", "));
    }
    Ok((model, drawn))
}

/// `label2id` of the model's config (class names of string labels).
pub fn label2id(model: &Model) -> LabelMap {
    let map = model.config.get("label2id").and_then(Value::as_object);
    map.map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_i64()?))).collect()).unwrap_or_default()
}

/// Rows of the position table a sequence cannot use: RoBERTa-style position ids start after
/// `padding_idx`, so `max_position_embeddings - (padding_idx + 1)` tokens fit.
pub fn position_offset(model: &Model) -> usize {
    match model.spec.encoder.as_ref().map(|e| e.positions) {
        Some(vkformers_models::encoder::Positions::FromIds { padding_idx }) => padding_idx + 1,
        _ => 0,
    }
}

/// Whether the model is an encoder (no EOS appended, no packing: rows are sentences).
pub fn is_encoder(model: &Model) -> bool {
    model.spec.encoder.is_some()
}

/// The masking of a masked-LM model's rows: `--mlm-probability` when given; 0.15 (run_mlm's
/// default) for plain-text rows; none (rows used as given, -100 = not a target) for
/// pre-tokenized rows with labels.
pub fn mlm_masking(
    model: &Model,
    tok: Option<&HfTokenizer>,
    probability: Option<f64>,
    plain_text: bool,
    seed: u64,
) -> anyhow::Result<Option<MlmMasking>> {
    let is_mlm = vkformers_train::model::encoder_objective(model) == Some(Objective::MaskedLm);
    if !is_mlm {
        if probability.is_some() {
            bail!("--mlm-probability is for masked-LM models; this one is `{}`", model.spec.model_type);
        }
        return Ok(None);
    }
    let Some(p) = probability.or(plain_text.then_some(0.15)) else { return Ok(None) };
    let Some(tok) = tok else {
        bail!("--mlm-probability needs the model's tokenizer (its mask token); give pre-masked rows instead")
    };
    let mask_id = mask_token_id(tok)?;
    let special: Vec<u32> =
        tok.inner().get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect();
    Ok(Some(MlmMasking::new(p, mask_id, tok.vocab_size() as u32, special, seed)?))
}

fn mask_token_id(tok: &HfTokenizer) -> anyhow::Result<u32> {
    let raw = &tok.config().raw["mask_token"];
    let configured = raw.as_str().or_else(|| raw["content"].as_str());
    for name in configured.into_iter().chain(["[MASK]", "<mask>"]) {
        if let Some(id) = tok.token_to_id(name) {
            return Ok(id);
        }
    }
    bail!("the tokenizer has no mask token (mask_token in tokenizer_config.json, or [MASK] / <mask>)")
}

/// Evaluation rows of a masked-LM run: masked once, deterministically.
pub fn mask_eval_rows(masking: Option<&MlmMasking>, rows: Vec<Example>) -> Vec<Example> {
    match masking {
        Some(m) => m.mask_all(&rows),
        None => rows,
    }
}
