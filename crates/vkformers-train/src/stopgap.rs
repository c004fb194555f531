//! Stand-ins for what `vkformers-data` provides once merged: `load_examples` (for
//! `read_dataset`) and `train_tokenizer` (for `train_bpe_tokenizer`). They read only
//! pre-tokenized rows and `text` rows of JSONL files; the CLI reaches data through these two
//! functions alone, so switching to the real reader changes nothing else.

use std::path::{Path, PathBuf};

use serde_json::Value;
use vkformers_data::{Dataset, Example};
use vkformers_io::tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use vkformers_io::tokenizers::normalizers::NormalizerWrapper;
use vkformers_io::tokenizers::pre_tokenizers::byte_level::ByteLevel;
use vkformers_io::tokenizers::{AddedToken, TokenizerImpl};
use vkformers_io::HfTokenizer;

use crate::error::{Result, TrainError};
use crate::pretokenized::{is_pretokenized, read_pretokenized};

/// Special tokens of a trained tokenizer, ids 0, 1, 2: pad, bos, eos.
pub const SPECIAL: [&str; 3] = ["<pad>", "<s>", "</s>"];

/// Rows of `files`: pre-tokenized (`input_ids` [+ `labels`]) used as they are, or `text` rows
/// tokenized with EOS appended and every token trained on.
pub fn load_examples(files: &[PathBuf], tok: Option<&HfTokenizer>) -> Result<Dataset> {
    if files.iter().all(|f| is_pretokenized(f)) {
        return Ok(Dataset { examples: read_pretokenized(files)?, plain_text: false });
    }
    let tok = tok
        .ok_or_else(|| TrainError::Config("text rows need a tokenizer (tokenizer.json in the model folder)".into()))?;
    let mut examples = Vec::new();
    for f in files {
        for (line, text) in text_rows(f)? {
            let mut ids = tok.encode(&text, true).map_err(|e| TrainError::Data {
                path: f.clone(),
                line,
                message: e.to_string(),
            })?;
            if let Some(eos) = tok.eos() {
                ids.push(eos.id);
            }
            let labels = ids.iter().map(|&t| t as i32).collect();
            examples.push(Example { input_ids: ids, labels });
        }
    }
    Ok(Dataset { examples, plain_text: true })
}

/// `(line number, text)` of every `text`/`content` row of a JSONL file.
fn text_rows(f: &Path) -> Result<Vec<(usize, String)>> {
    let body = std::fs::read_to_string(f).map_err(|e| TrainError::file(f, e))?;
    let mut out = Vec::new();
    for (i, line) in body.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err = |message: String| TrainError::Data { path: f.to_path_buf(), line: i + 1, message };
        let v: Value = serde_json::from_str(line).map_err(|e| err(format!("not JSON: {e}")))?;
        let text = v.get("text").or_else(|| v.get("content")).and_then(Value::as_str);
        out.push((
            i + 1,
            text.ok_or_else(|| err("no `text` (this stop-gap reader takes text or input_ids rows)".into()))?
                .to_string(),
        ));
    }
    Ok(out)
}

/// Trains a byte-level BPE tokenizer of `vocab_size` tokens on the `text` rows of `files` and
/// writes `tokenizer.json` and `tokenizer_config.json` into `out_dir`.
pub fn train_tokenizer(files: &[PathBuf], vocab_size: usize, out_dir: &Path) -> Result<()> {
    let mut texts = Vec::new();
    for f in files {
        texts.extend(text_rows(f)?.into_iter().map(|(_, t)| t));
    }
    let special: Vec<AddedToken> = SPECIAL.iter().map(|s| AddedToken::from(*s, true)).collect();
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(2)
        .show_progress(false)
        .special_tokens(special)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut tok: TokenizerImpl<BPE, NormalizerWrapper, ByteLevel, ByteLevel, ByteLevel> =
        TokenizerImpl::new(BPE::default());
    tok.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tok.with_decoder(Some(ByteLevel::default()));
    tok.with_post_processor(Some(ByteLevel::new(false, true, true)));
    let fail =
        |e: Box<dyn std::error::Error + Send + Sync>| TrainError::file(out_dir, format!("training the tokenizer: {e}"));
    tok.train(&mut trainer, texts.iter()).map_err(fail)?;
    std::fs::create_dir_all(out_dir).map_err(|e| TrainError::file(out_dir, e))?;
    let json = tok.to_string(false).map_err(fail)?;
    vkformers_io::write_atomic(out_dir.join("tokenizer.json"), |w| w.write_all(json.as_bytes()))?;
    let config = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": SPECIAL[0],
        "bos_token": SPECIAL[1],
        "eos_token": SPECIAL[2],
        "add_bos_token": false,
        "clean_up_tokenization_spaces": false,
    });
    vkformers_io::write_json_atomic(out_dir.join("tokenizer_config.json"), &config)?;
    Ok(())
}
