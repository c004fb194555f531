//! `vkformers generate --source-lang L --target-lang T` on a multilingual encoder-decoder (mBART,
//! mBART-50, NLLB, M2M-100): text sources carry the source language token as the tokenizer's
//! `src_lang` places it, and the decoder's first generated token is forced to the target
//! language's (`forced_bos_token_id`), as transformers' translation pipeline does.

use std::path::Path;

use anyhow::bail;
use vkformers_data::{PairEncoder, Seq2SeqRead};
use vkformers_io::HfTokenizer;

use super::Args;

/// `--source-lang` / `--target-lang` for generation.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct GenLangArgs {
    /// Encoder-decoders with a multilingual tokenizer: the source language (its `src_lang`, e.g.
    /// en_XX, eng_Latn, en), placed in text prompts as the tokenizer places it.
    #[arg(long, requires = "target_lang")]
    pub source_lang: Option<String>,
    /// The target language: its token is forced as the first generated one (overrides
    /// `forced_bos_token_id`).
    #[arg(long, requires = "source_lang")]
    pub target_lang: Option<String>,
}

/// Sources with languages: token ids per prompt, the tokenizer, the target language's id.
pub type LangSources = (Vec<Vec<u32>>, HfTokenizer, u32);

/// The sources (text prompts with language tokens, or token ids as given), the tokenizer, and
/// the target language's id to force first. `None` when no languages are given.
pub fn sources(dir: &Path, args: &Args) -> anyhow::Result<Option<LangSources>> {
    let l = &args.langs;
    let (Some(src), Some(tgt)) = (&l.source_lang, &l.target_lang) else { return Ok(None) };
    let tok = super::tokenizer(dir, "--source-lang/--target-lang")?;
    let read = Seq2SeqRead { source_lang: Some(src.clone()), target_lang: Some(tgt.clone()), ..Default::default() };
    let enc = PairEncoder::new(&tok, &read).map_err(anyhow::Error::msg)?;
    let Some(langs) = enc.langs() else {
        let class = tok.config().raw.get("tokenizer_class").cloned().unwrap_or_default();
        bail!("--source-lang/--target-lang need a multilingual tokenizer (mBART, mBART-50, NLLB, M2M-100, PLBART); this one is {class}");
    };
    let forced = langs.target.1;
    let ids = if args.prompt_ids.is_some() || args.prompt_ids_file.is_some() {
        super::prompts(dir, args)?.0
    } else {
        let texts = super::prompt_texts(args)?;
        texts.iter().map(|t| enc.source(t).map_err(anyhow::Error::msg)).collect::<anyhow::Result<_>>()?
    };
    Ok(Some((ids, tok, forced)))
}
