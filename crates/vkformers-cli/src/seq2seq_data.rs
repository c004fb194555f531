//! Encoder-decoder data for `train`, `finetune` and `eval`: the rows of
//! `vkformers_data::read_seq2seq_dataset` (a source and a target each), read instead of the
//! decoder/encoder row shapes when the model is an encoder-decoder.

use anyhow::bail;
use vkformers_data::{Dataset, Seq2SeqRead};
use vkformers_io::HfTokenizer;
use vkformers_models::model::Model;

/// `--source-lang` / `--target-lang`, `--max-source-len` / `--max-target-len`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LangArgs {
    /// Encoder-decoders: the key of `{"translation": {...}}` rows read as the source (e.g. en;
    /// `en_XX` also finds `en`), and the source language token of a multilingual tokenizer
    /// (mBART, mBART-50, NLLB, M2M-100, PLBART) as its `src_lang`.
    #[arg(long, requires = "target_lang")]
    pub source_lang: Option<String>,
    /// Encoder-decoders: the key of `{"translation": {...}}` rows read as the target (e.g. de),
    /// and a multilingual tokenizer's `tgt_lang`.
    #[arg(long, requires = "source_lang")]
    pub target_lang: Option<String>,
    /// Encoder-decoders: tokens at most per source text (its EOS and language tokens kept, as
    /// `tokenizer(..., max_length=N, truncation=True)`); token-id rows are used as given.
    #[arg(long, value_parser = crate::ranges::at_least_one)]
    pub max_source_len: Option<usize>,
    /// Encoder-decoders: tokens at most per target text (the labels), as --max-source-len.
    #[arg(long, value_parser = crate::ranges::at_least_one)]
    pub max_target_len: Option<usize>,
}

/// Whether the model is an encoder-decoder (rows are a source and a target).
pub fn is_seq2seq(model: &Model) -> bool {
    model.spec.seq2seq.is_some()
}

/// Refuses the language flags for a model that reads no translation rows.
pub fn check_langs(model: &Model, langs: &LangArgs) -> anyhow::Result<()> {
    let any = langs.source_lang.is_some() || langs.max_source_len.is_some() || langs.max_target_len.is_some();
    if any && !is_seq2seq(model) {
        bail!(
            "--source-lang/--target-lang/--max-source-len/--max-target-len are for encoder-decoder models; this one is `{}`",
            model.spec.model_type
        );
    }
    Ok(())
}

/// The rows of `arg` as sources and targets (`tokenizer(text, text_target=...)` for text rows;
/// `{input_ids, labels}` rows as given).
pub fn read(
    arg: &str,
    query: &vkformers_hub::DatasetQuery,
    tok: Option<&HfTokenizer>,
    langs: &LangArgs,
    add_eos: bool,
) -> anyhow::Result<Dataset> {
    let files = vkformers_hub::resolve_dataset(arg, query)?;
    let read = Seq2SeqRead {
        source_lang: langs.source_lang.clone(),
        target_lang: langs.target_lang.clone(),
        add_eos,
        max_source_len: langs.max_source_len,
        max_target_len: langs.max_target_len,
        max_rows: None,
    };
    Ok(vkformers_data::read_seq2seq_dataset(&files, tok, &read)?)
}
