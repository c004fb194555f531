//! `vkformers classify`: the labels of a sequence classifier and their scores, as transformers'
//! text-classification pipeline gives them: softmax over the labels, sigmoid for multi-label
//! models and models of one label, the raw value for regression (`problem_type`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use vkformers_io::HfTokenizer;
use vkformers_models::encoder::{self, EncoderBatch, EncoderHead, Problem};
use vkformers_models::model::Model;
use vkformers_tensor::ops::cast;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::{Context, DeviceSelector};

#[derive(clap::Args)]
pub struct Args {
    /// A sequence- or token-classification model folder (`*ForSequenceClassification`,
    /// `*ForTokenClassification`) or Hub id.
    #[arg(long)]
    model: String,
    /// A text to classify (repeat for several).
    #[arg(long, required_unless_present = "file")]
    text: Vec<String>,
    /// The second text of a pair (sentence-pair models, e.g. NLI): one for each --text.
    #[arg(long)]
    text_pair: Vec<String>,
    /// A file of texts to classify, one a line (empty lines skipped).
    #[arg(long, conflicts_with = "text")]
    file: Option<PathBuf>,
    /// Show only the best K labels of each text (default: all).
    #[arg(long, value_parser = crate::ranges::at_least_one)]
    top_k: Option<usize>,
    /// Print JSON: one list of {"label", "score"} a text, best first.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    dtype: crate::precision::DtypeArgs,
}

/// How logits become scores (the pipeline's `function_to_apply`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scores {
    Softmax,
    Sigmoid,
    Raw,
}

pub fn run(selector: &DeviceSelector, args: &Args) -> anyhow::Result<ExitCode> {
    let dir = vkformers_hub::resolve_model(&args.model)?;
    crate::outdir::check_complete(&dir)?;
    let texts = crate::embed::input_texts(&args.text, args.file.as_deref(), "classify")?;
    if !args.text_pair.is_empty() && args.text_pair.len() != texts.len() {
        bail!("{} --text-pair for {} texts: give one for each --text", args.text_pair.len(), texts.len());
    }
    let ctx = Context::new(selector)?;
    let g = Graph::new(&ctx);
    let model = Model::load_for_inference(&g, &dir, args.dtype.resolve(&dir)?)
        .with_context(|| format!("loading {}", dir.display()))?;
    let scores = match model.spec.encoder.as_ref().map(|e| &e.head) {
        Some(EncoderHead::SequenceClassification(h)) => match (h.problem, h.num_labels) {
            (Some(Problem::Regression), _) => Scores::Raw,
            (Some(Problem::MultiLabel), _) | (_, 1) => Scores::Sigmoid,
            _ => Scores::Softmax,
        },
        Some(EncoderHead::TokenClassification { num_labels, .. }) => {
            if !args.text_pair.is_empty() {
                bail!("--text-pair is for sequence classifiers; a token classifier reads one text");
            }
            return crate::classify_tokens::run(&g, &model, &dir, &texts, args.json, *num_labels);
        }
        _ => bail!(
            "{}: `classify` needs a sequence or token classifier (*ForSequenceClassification, \
             *ForTokenClassification); this folder is `{}`",
            dir.display(),
            model.config["architectures"][0].as_str().unwrap_or(&model.spec.model_type)
        ),
    };
    crate::load::generate_in_weight_type(&g, &model);
    let tok = HfTokenizer::from_dir(&dir)?;
    let names = vkformers_train::model::label_names(&model.config);
    let mut results = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let logits = g.no_grad(|| logits_of(&g, &model, &tok, text, args.text_pair.get(i)))?;
        g.clear_tape();
        let mut labels: Vec<(String, f64)> = apply(&logits, scores)
            .into_iter()
            .enumerate()
            .map(|(k, s)| (names.get(k).cloned().unwrap_or_else(|| format!("LABEL_{k}")), s))
            .collect();
        labels.sort_by(|a, b| b.1.total_cmp(&a.1));
        labels.truncate(args.top_k.unwrap_or(usize::MAX));
        results.push(labels);
    }
    print(args, &texts, &results)?;
    Ok(ExitCode::SUCCESS)
}

/// The logits `[num_labels]` of one text (or pair) with the tokenizer's special tokens.
fn logits_of(
    g: &Graph<'_>,
    model: &Model,
    tok: &HfTokenizer,
    text: &str,
    pair: Option<&String>,
) -> anyhow::Result<Vec<f32>> {
    let e = match pair {
        Some(p) => tok.inner().encode((text, p.as_str()), true),
        None => tok.inner().encode(text, true),
    }
    .map_err(|e| anyhow::anyhow!("tokenizing {text:?}: {e}"))?;
    encoding_logits(g, model, text, &e)
}

/// The encoder's logits (f32, `[tokens · labels]`) of one tokenized text, its token types
/// included; an error naming the text when it has more tokens than the model's positions.
pub(crate) fn encoding_logits(
    g: &Graph<'_>,
    model: &Model,
    text: &str,
    e: &tokenizers::Encoding,
) -> anyhow::Result<Vec<f32>> {
    let ids: Vec<i32> = e.get_ids().iter().map(|&x| x as i32).collect();
    let types: Vec<i32> = e.get_type_ids().iter().map(|&x| x as i32).collect();
    let max = model.spec.encoder.as_ref().map_or(usize::MAX, |enc| enc.max_positions);
    if ids.len() > max {
        bail!("{text:?} has {} tokens, more than the model's {max} positions", ids.len());
    }
    let mask = vec![1; ids.len()];
    let batch = EncoderBatch { ids: &ids, mask: &mask, token_types: Some(&types), batch: 1, seq: ids.len() };
    let logits = encoder::forward(g, &model.spec, &model.weights, &batch)?;
    Ok(g.read(&cast::cast(g, &logits, DType::F32)?)?)
}

fn apply(logits: &[f32], scores: Scores) -> Vec<f64> {
    let x: Vec<f64> = logits.iter().map(|&v| f64::from(v)).collect();
    match scores {
        Scores::Raw => x,
        Scores::Sigmoid => x.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect(),
        Scores::Softmax => {
            let max = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = x.iter().map(|v| (v - max).exp()).sum();
            x.iter().map(|v| (v - max).exp() / sum).collect()
        }
    }
}

fn print(args: &Args, texts: &[String], results: &[Vec<(String, f64)>]) -> anyhow::Result<()> {
    if args.json {
        let out: Vec<Vec<serde_json::Value>> = results
            .iter()
            .map(|labels| labels.iter().map(|(l, s)| serde_json::json!({"label": l, "score": s})).collect())
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    for (text, labels) in texts.iter().zip(results) {
        println!("{text}");
        for (label, score) in labels {
            println!("  {label:<20} {score:.6}");
        }
    }
    Ok(())
}
