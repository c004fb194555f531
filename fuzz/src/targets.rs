//! The fuzz targets: each takes one input and drives a parser the way the commands do. A target
//! passes an input when it returns, with `Ok` or an error; a panic or a stall is a finding.

use std::path::{Path, PathBuf};

use serde_json::Value;
use vkformers_chat::{render, select_template, special_tokens_from_config, Message};
use vkformers_data::{read_dataset, read_seq2seq_dataset, ReadOptions, Seq2SeqRead};
use vkformers_io::{HfTokenizer, ModelWeights, TokenizerConfig};

/// What the targets share: a scratch folder and the tokenizer the row parser encodes with.
pub struct Ctx {
    pub dir: tempfile::TempDir,
    pub tokenizer: HfTokenizer,
}

impl Ctx {
    pub fn new(root: &Path) -> Ctx {
        let tokenizer =
            HfTokenizer::from_dir(root.join("tests/fixtures_data/chatml")).expect("chatml tokenizer fixture");
        Ctx { dir: tempfile::tempdir().expect("a scratch folder"), tokenizer }
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).expect("scratch write");
        path
    }
}

/// How a target's inputs are mutated.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Bytes,
    Json,
    /// A safetensors file: its JSON header mutated as JSON, then framed again (sometimes with a
    /// wrong length or cut short).
    Safetensors,
}

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    pub shape: Shape,
    /// Seed files under the repository root (globs are not needed: listed folders).
    pub seeds: fn(&Path) -> Vec<Vec<u8>>,
    pub run: fn(&Ctx, &[u8]),
}

pub(crate) fn files_named(root: &Path, folder: &str, name: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.join(folder)) else { return out };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path().join(name)).filter(|p| p.is_file()).collect();
    paths.sort();
    for p in paths {
        out.push(std::fs::read(p).expect("seed read"));
    }
    out
}

fn lines_of(root: &Path, file: &str) -> Vec<Vec<u8>> {
    let text = std::fs::read(root.join(file)).unwrap_or_default();
    text.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec).collect()
}

fn safetensors(ctx: &Ctx, input: &[u8]) {
    let path = ctx.file("model.safetensors", input);
    if let Ok(w) = ModelWeights::open_file(&path) {
        for info in w.tensors() {
            // Headers are checked against the file's size, so a tensor here is at most the file.
            let _ = w.tensor_f32(&info.name);
        }
    }
}

fn config(_: &Ctx, input: &[u8]) {
    if let Ok(v) = serde_json::from_slice::<Value>(input) {
        let _ = vkformers_models::archs::spec_from_config(&v);
    }
}

fn rows(ctx: &Ctx, input: &[u8]) {
    let path = ctx.file("rows.jsonl", input);
    let _ = read_dataset(&[path], &ctx.tokenizer, &ReadOptions::default());
}

/// An encoder-decoder dataset as `vkformers train` reads one for a seq2seq model (translation
/// rows read en -> de; sources and targets cut to 8 tokens).
fn seq2seq_rows(ctx: &Ctx, input: &[u8]) {
    let path = ctx.file("pairs.jsonl", input);
    let read = Seq2SeqRead {
        source_lang: Some("en".into()),
        target_lang: Some("de".into()),
        add_eos: true,
        max_source_len: Some(8),
        max_target_len: Some(8),
        max_rows: None,
    };
    let _ = read_seq2seq_dataset(&[path], Some(&ctx.tokenizer), &read);
}

/// A `.parquet` dataset as `--data` reads it (the parquet crate's record reader, then the rows'
/// shapes as for JSON lines).
fn parquet_rows(ctx: &Ctx, input: &[u8]) {
    let path = ctx.file("rows.parquet", input);
    let _ = read_dataset(&[path], &ctx.tokenizer, &ReadOptions::default());
}

fn chat_template(_: &Ctx, input: &[u8]) {
    let template = String::from_utf8_lossy(input);
    let messages = [
        Message { role: "system".into(), content: "Be brief.".into() },
        Message { role: "user".into(), content: "Hi {{ there }} {% raw %}".into() },
        Message { role: "assistant".into(), content: "Hello.".into() },
        Message { role: "user".into(), content: String::new() },
    ];
    let special = vkformers_chat::SpecialTokens {
        bos_token: Some("<s>".into()),
        eos_token: Some("</s>".into()),
        ..Default::default()
    };
    let _ = render(&template, &messages, true, &special, &Value::Null);
}

fn tokenizer_config(ctx: &Ctx, input: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(input) else { return };
    if let Ok(config) = TokenizerConfig::from_value(&ctx.dir.path().join("tokenizer_config.json"), v) {
        let special = special_tokens_from_config(&config);
        if let Ok(t) = select_template(&config, None) {
            let messages = [Message { role: "user".into(), content: "Hi".into() }];
            let _ = render(t, &messages, true, &special, &Value::Null);
        }
    }
}

fn chat_templates(root: &Path) -> Vec<Vec<u8>> {
    let text = std::fs::read(root.join("tests/fixtures_chat/cases.json")).unwrap_or_default();
    let cases: Value = serde_json::from_slice(&text).unwrap_or(Value::Null);
    let Some(templates) = cases["templates"].as_object() else { return Vec::new() };
    templates.values().filter_map(Value::as_str).map(|t| t.as_bytes().to_vec()).collect()
}

/// Every target, in the order they run.
pub const TARGETS: &[Target] = &[
    Target {
        name: "safetensors",
        shape: Shape::Safetensors,
        seeds: |r| files_named(r, "tests/fixtures", "model.safetensors").into_iter().take(4).collect(),
        run: safetensors,
    },
    Target {
        name: "config",
        shape: Shape::Json,
        seeds: |r| files_named(r, "tests/fixtures", "config.json"),
        run: config,
    },
    Target {
        name: "rows",
        shape: Shape::Json,
        seeds: |r| {
            let mut seeds: Vec<Vec<u8>> = ["chat.jsonl", "prompts.jsonl", "text.jsonl"]
                .iter()
                .flat_map(|f| lines_of(r, &format!("crates/vkformers-data/tests/data/{f}")))
                .collect();
            // Classification, tagging, pre-tokenized, instruction and Q&A rows.
            seeds.extend(lines_of(r, "fuzz/seeds/rows_labelled.jsonl"));
            seeds
        },
        run: rows,
    },
    Target {
        name: "seq2seq_rows",
        shape: Shape::Json,
        seeds: |r| lines_of(r, "fuzz/seeds/seq2seq_rows.jsonl"),
        run: seq2seq_rows,
    },
    Target { name: "parquet_rows", shape: Shape::Bytes, seeds: |_| crate::parquet_seeds::seeds(), run: parquet_rows },
    Target { name: "chat_template", shape: Shape::Bytes, seeds: chat_templates, run: chat_template },
    Target {
        name: "tokenizer_config",
        shape: Shape::Json,
        seeds: |r| files_named(r, "tests/fixtures_data", "tokenizer_config.json"),
        run: tokenizer_config,
    },
    Target {
        name: "adapter_config",
        shape: Shape::Json,
        seeds: crate::adapter::config_seeds,
        run: crate::adapter::adapter_config,
    },
    Target {
        name: "adapter_weights",
        shape: Shape::Safetensors,
        seeds: crate::adapter::weight_seeds,
        run: crate::adapter::adapter_weights,
    },
    Target {
        name: "generation_config",
        shape: Shape::Json,
        seeds: crate::requests::generation_seeds,
        run: crate::requests::generation_config,
    },
    Target {
        name: "prompt_files",
        shape: Shape::Bytes,
        seeds: crate::requests::prompt_file_seeds,
        run: crate::requests::prompt_files,
    },
    Target {
        name: "serve_request",
        shape: Shape::Json,
        seeds: crate::requests::request_seeds,
        run: crate::requests::serve_request,
    },
];
