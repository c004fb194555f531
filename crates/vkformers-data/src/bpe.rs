//! Training a byte-level BPE tokenizer on text files (for pre-training from scratch), saved as
//! a Hugging Face tokenizer folder that `HfTokenizer::from_dir` and
//! `transformers.AutoTokenizer.from_pretrained` both load.
//!
//! The tokenizer is GPT-2's byte-level BPE (every byte is in the alphabet, so there is no unknown
//! text) with no normalizer, a post-processor that puts `<s>` first (as Llama's does), and four
//! special tokens: `<s>` (BOS), `</s>` (EOS), `<pad>`, `<unk>` with ids 0..4. Training is
//! deterministic: the same files give the same `tokenizer.json`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};
use vkformers_io::{write_atomic, write_json_atomic};

use crate::error::{DataError, Result};

/// `(role, token)` of the special tokens, in id order.
const SPECIAL_TOKENS: [(&str, &str); 4] =
    [("bos_token", "<s>"), ("eos_token", "</s>"), ("pad_token", "<pad>"), ("unk_token", "<unk>")];

/// The chat template written with the tokenizer: BOS, then each turn as `<|role|>\n{content}</s>\n`,
/// and `<|assistant|>\n` as the generation prompt. Turns end with EOS so that generation stops.
pub const CHAT_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}\
{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}{% endfor %}\
{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}";

/// Settings of [`train_bpe_tokenizer_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpeOptions {
    /// Vocabulary size including the 4 special tokens and the 256 byte symbols.
    pub vocab_size: usize,
    /// A pair must occur at least this often to be merged.
    pub min_frequency: u64,
    /// `model_max_length` written to `tokenizer_config.json`.
    pub model_max_length: usize,
}

impl Default for BpeOptions {
    fn default() -> Self {
        BpeOptions { vocab_size: 4096, min_frequency: 2, model_max_length: 2048 }
    }
}

/// Trains a byte-level BPE tokenizer of `vocab_size` tokens on the lines of `files` and writes
/// `tokenizer.json` and `tokenizer_config.json` to `out_dir` (created if missing).
pub fn train_bpe_tokenizer(files: &[PathBuf], vocab_size: usize, out_dir: &Path) -> Result<()> {
    train_bpe_tokenizer_with(files, &BpeOptions { vocab_size, ..BpeOptions::default() }, out_dir)
}

/// [`train_bpe_tokenizer`] with every setting.
pub fn train_bpe_tokenizer_with(files: &[PathBuf], opts: &BpeOptions, out_dir: &Path) -> Result<()> {
    let min_vocab = SPECIAL_TOKENS.len() + ByteLevel::alphabet().len();
    if opts.vocab_size < min_vocab {
        return Err(DataError::TrainTokenizer(format!(
            "vocab_size {} is below {min_vocab} (the 256 byte symbols and 4 special tokens)",
            opts.vocab_size
        )));
    }
    let corpus = read_corpus(files)?;
    let tokenizer = train(&corpus, opts)?;
    std::fs::create_dir_all(out_dir).map_err(|source| DataError::Io { path: out_dir.to_path_buf(), source })?;
    let text = tokenizer.to_string(true).map_err(|e| DataError::TrainTokenizer(e.to_string()))?;
    write_atomic(out_dir.join("tokenizer.json"), |w| w.write_all(text.as_bytes()))?;
    write_json_atomic(out_dir.join("tokenizer_config.json"), &tokenizer_config(opts))?;
    Ok(())
}

/// Every line of every file, in order (lines are the training sequences, as `tokenizers`'
/// `train_from_files` uses them).
fn read_corpus(files: &[PathBuf]) -> Result<Vec<String>> {
    if files.is_empty() {
        return Err(DataError::NoFiles);
    }
    let mut lines = Vec::new();
    for path in files {
        if !path.is_file() {
            return Err(DataError::FileNotFound { path: path.clone() });
        }
        let text = std::fs::read_to_string(path).map_err(|source| DataError::Io { path: path.clone(), source })?;
        lines.extend(text.lines().map(|l| format!("{l}\n")));
    }
    Ok(lines)
}

fn train(corpus: &[String], opts: &BpeOptions) -> Result<Tokenizer> {
    let fail = |e: tokenizers::Error| DataError::TrainTokenizer(e.to_string());
    let specials: Vec<AddedToken> = SPECIAL_TOKENS.iter().map(|(_, t)| AddedToken::from(*t, true)).collect();
    let alphabet: HashSet<char> = ByteLevel::alphabet().into_iter().collect();
    let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
        .show_progress(false)
        .vocab_size(opts.vocab_size)
        .min_frequency(opts.min_frequency)
        .special_tokens(specials)
        .initial_alphabet(alphabet)
        .build()
        .into();
    let mut tokenizer = Tokenizer::new(BPE::default());
    // GPT-2's split (contractions, letters, digits, punctuation, spaces) and byte mapping, no
    // prefix space; offsets are not trimmed.
    tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, false, true)));
    tokenizer.with_decoder(Some(ByteLevel::default()));
    tokenizer.train(&mut trainer, corpus.iter()).map_err(fail)?;
    let bos = SPECIAL_TOKENS[0].1;
    let bos_id = tokenizer.token_to_id(bos).ok_or_else(|| DataError::TrainTokenizer("no BOS id".to_string()))?;
    let template = TemplateProcessing::builder()
        .try_single(format!("{bos}:0 $A:0"))
        .and_then(|b| b.try_pair(format!("{bos}:0 $A:0 {bos}:1 $B:1")))
        .map_err(DataError::TrainTokenizer)?
        .special_tokens(vec![(bos, bos_id)])
        .build()
        .map_err(|e| DataError::TrainTokenizer(e.to_string()))?;
    tokenizer.with_post_processor(Some(template));
    Ok(tokenizer)
}

/// `tokenizer_config.json`: the special tokens, the chat template and `model_max_length`, with
/// `added_tokens_decoder` as `transformers` writes it.
fn tokenizer_config(opts: &BpeOptions) -> Value {
    let mut config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": opts.model_max_length,
        "add_bos_token": true,
        "add_eos_token": false,
        "clean_up_tokenization_spaces": false,
        "chat_template": CHAT_TEMPLATE,
    });
    let mut decoder = serde_json::Map::new();
    for (id, (role, token)) in SPECIAL_TOKENS.iter().enumerate() {
        config[*role] = json!(token);
        decoder.insert(
            id.to_string(),
            json!({"content": token, "lstrip": false, "normalized": false, "rstrip": false,
                   "single_word": false, "special": true}),
        );
    }
    config["added_tokens_decoder"] = Value::Object(decoder);
    config
}
