//! Encoder-decoder data for `train`, `finetune` and `eval`: the rows of
//! `vkformers_data::read_seq2seq_dataset` (a source and a target each), read instead of the
//! decoder/encoder row shapes when the model is an encoder-decoder.

use anyhow::bail;
use vkformers_data::{Dataset, Seq2SeqRead};
use vkformers_io::HfTokenizer;
use vkformers_models::model::Model;

/// `--source-lang` / `--target-lang`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LangArgs {
    /// Encoder-decoders: the key of `{"translation": {...}}` rows read as the source (e.g. en).
    #[arg(long, requires = "target_lang")]
    pub source_lang: Option<String>,
    /// Encoder-decoders: the key of `{"translation": {...}}` rows read as the target (e.g. de).
    #[arg(long, requires = "source_lang")]
    pub target_lang: Option<String>,
}

/// Whether the model is an encoder-decoder (rows are a source and a target).
pub fn is_seq2seq(model: &Model) -> bool {
    model.spec.seq2seq.is_some()
}

/// Refuses the language flags for a model that reads no translation rows.
pub fn check_langs(model: &Model, langs: &LangArgs) -> anyhow::Result<()> {
    if langs.source_lang.is_some() && !is_seq2seq(model) {
        bail!("--source-lang/--target-lang are for encoder-decoder models; this one is `{}`", model.spec.model_type);
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
        max_rows: None,
    };
    Ok(vkformers_data::read_seq2seq_dataset(&files, tok, &read)?)
}
