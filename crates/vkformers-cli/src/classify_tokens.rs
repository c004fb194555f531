//! `vkformers classify` on a token classifier (`*ForTokenClassification`), as transformers'
//! token-classification pipeline gives it without aggregation: each token that is not a special
//! token, with its best label by softmax and that probability, its index in the encoding, its
//! string and character offsets; tokens whose label is `O` are left out (`ignore_labels`).

use std::process::ExitCode;

use vkformers_io::HfTokenizer;

use vkformers_models::model::Model;
use vkformers_tensor::Graph;

/// A token classifier's entities of each text, printed (one line a token) or as JSON.
pub fn run(
    g: &Graph<'_>,
    model: &Model,
    dir: &std::path::Path,
    texts: &[String],
    json: bool,
    num_labels: usize,
) -> anyhow::Result<ExitCode> {
    crate::load::generate_in_weight_type(g, model);
    let tok = HfTokenizer::from_dir(dir)?;
    let names = vkformers_train::model::label_names(&model.config);
    let mut all = Vec::with_capacity(texts.len());
    for text in texts {
        all.push(entities(g, model, &tok, text, (&names, num_labels))?);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&to_json(&all))?);
        return Ok(ExitCode::SUCCESS);
    }
    for (text, entities) in texts.iter().zip(&all) {
        println!("{text}");
        for x in entities {
            println!("  {:<16} {:<12} {:.6}  [{}..{})", x.word, x.entity, x.score, x.start, x.end);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One token the pipeline reports.
pub struct Entity {
    pub entity: String,
    pub score: f64,
    pub index: usize,
    pub word: String,
    pub start: usize,
    pub end: usize,
}

/// The entities of one text under a token classifier of `num_labels` labels named `names`.
pub fn entities(
    g: &Graph<'_>,
    model: &Model,
    tok: &HfTokenizer,
    text: &str,
    (names, num_labels): (&[String], usize),
) -> anyhow::Result<Vec<Entity>> {
    // Character offsets, as the pipeline's (Python) offsets.
    let e = tok.inner().encode_char_offsets(text, true).map_err(|e| anyhow::anyhow!("tokenizing {text:?}: {e}"))?;
    let logits = g.no_grad(|| crate::classify::encoding_logits(g, model, text, &e))?;
    g.clear_tape();
    let mut out = Vec::new();
    for (i, row) in logits.chunks(num_labels).enumerate() {
        if e.get_special_tokens_mask().get(i).is_some_and(|&s| s != 0) {
            continue;
        }
        // Softmax in f64; the best label and its probability.
        let max = row.iter().map(|&v| f64::from(v)).fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|&v| (f64::from(v) - max).exp()).sum();
        let (best, top) = row.iter().enumerate().fold((0, f64::NEG_INFINITY), |acc, (k, &v)| {
            if f64::from(v) > acc.1 {
                (k, f64::from(v))
            } else {
                acc
            }
        });
        let entity = names.get(best).cloned().unwrap_or_else(|| format!("LABEL_{best}"));
        if entity == "O" {
            continue;
        }
        let (start, end) = e.get_offsets()[i];
        // An unknown token shows the text it stands for, as the pipeline's `word_ref`.
        let unk = tok.unk().is_some_and(|u| u.id == e.get_ids()[i]);
        let word = if unk { text.chars().skip(start).take(end - start).collect() } else { e.get_tokens()[i].clone() };
        let score = (top - max).exp() / sum;
        out.push(Entity { entity, score, index: i, word, start, end });
    }
    Ok(out)
}

/// JSON as the pipeline prints it: one list of entities a text.
pub fn to_json(all: &[Vec<Entity>]) -> serde_json::Value {
    let one = |x: &Entity| {
        serde_json::json!({"entity": x.entity, "score": x.score, "index": x.index, "word": x.word,
                           "start": x.start, "end": x.end})
    };
    serde_json::Value::Array(all.iter().map(|es| serde_json::Value::Array(es.iter().map(one).collect())).collect())
}
