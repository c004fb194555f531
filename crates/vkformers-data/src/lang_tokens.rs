//! Language tokens of multilingual encoder-decoder tokenizers, placed as transformers'
//! `set_src_lang_special_tokens` / `set_tgt_lang_special_tokens` place them, by the
//! `tokenizer_class` of `tokenizer_config.json`:
//!
//! - `MBartTokenizer`, `PLBartTokenizer`, `NllbTokenizer` with `legacy_behaviour`: `X </s> lang`;
//! - `MBart50Tokenizer`, `M2M100Tokenizer`, `NllbTokenizer`: `lang X </s>`.
//!
//! The source side uses the source language, the target side (`text_target=`) the target one.
//! Languages not given fall back as transformers' do: the saved `src_lang` / `tgt_lang`, then the
//! class default source (`en_XX`, `eng_Latn`, `en`), the target falling back to the source.

use serde_json::Value;
use vkformers_io::HfTokenizer;

/// Where the language token goes around the text `X`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LangLayout {
    /// `X </s> lang` (mBART, PLBART, legacy NLLB).
    AfterEos,
    /// `lang X </s>` (mBART-50, M2M-100, NLLB).
    First,
}

/// The resolved language ids of one tokenizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LangTokens {
    pub layout: LangLayout,
    pub eos: u32,
    /// The source and target language tokens (`en_XX`, `__en__`, ...) and their ids.
    pub source: (String, u32),
    pub target: (String, u32),
}

impl LangTokens {
    /// The language layout of `tok`, or `None` when its class places no language tokens (then
    /// `--source-lang/--target-lang` only pick translation keys). An unknown language is an
    /// error naming the tokenizer's class.
    pub fn resolve(tok: &HfTokenizer, source: Option<&str>, target: Option<&str>) -> Result<Option<Self>, String> {
        let raw = &tok.config().raw;
        let class = raw.get("tokenizer_class").and_then(Value::as_str).unwrap_or("");
        let class = class.strip_suffix("Fast").unwrap_or(class);
        let legacy = raw.get("legacy_behaviour").and_then(Value::as_bool) == Some(true);
        let (layout, default_source) = match class {
            "MBartTokenizer" => (LangLayout::AfterEos, Some("en_XX")),
            "PLBartTokenizer" => (LangLayout::AfterEos, None),
            "NllbTokenizer" if legacy => (LangLayout::AfterEos, Some("eng_Latn")),
            "NllbTokenizer" => (LangLayout::First, Some("eng_Latn")),
            "MBart50Tokenizer" => (LangLayout::First, Some("en_XX")),
            "M2M100Tokenizer" => (LangLayout::First, Some("en")),
            _ => return Ok(None),
        };
        let saved = |k: &str| raw.get(k).and_then(Value::as_str);
        let src = source.or(saved("src_lang")).or(default_source);
        let tgt = target.or(saved("tgt_lang")).or(src);
        // PLBART without a language: `X </s>`, the plain post-processor's.
        let (Some(src), Some(tgt)) = (src, tgt) else { return Ok(None) };
        let eos = tok.eos().ok_or_else(|| format!("{class} has no eos_token to end a sequence with"))?.id;
        Ok(Some(LangTokens { layout, eos, source: lang_id(tok, class, src)?, target: lang_id(tok, class, tgt)? }))
    }

    /// The tokens before and after the text of the source (`target` false) or target side.
    pub fn around(&self, target: bool) -> (Vec<u32>, Vec<u32>) {
        let lang = if target { self.target.1 } else { self.source.1 };
        match self.layout {
            LangLayout::AfterEos => (vec![], vec![self.eos, lang]),
            LangLayout::First => (vec![lang], vec![self.eos]),
        }
    }
}

/// The token of `lang`: M2M-100 writes `en` as `__en__`, PLBART `java` as `__java__`
/// (`_convert_lang_code_special_format`); a language given in token form is taken as it is.
fn lang_id(tok: &HfTokenizer, class: &str, lang: &str) -> Result<(String, u32), String> {
    let wrapped = format!("__{lang}__");
    let candidates: Vec<&str> = match class {
        "M2M100Tokenizer" | "PLBartTokenizer" => vec![&wrapped, lang],
        _ => vec![lang],
    };
    candidates
        .iter()
        .find_map(|c| tok.token_to_id(c).map(|id| (c.to_string(), id)))
        .ok_or_else(|| format!("{class}: language `{lang}` is not a token of this tokenizer (tried {candidates:?})"))
}
