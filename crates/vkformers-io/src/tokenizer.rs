//! A Hugging Face tokenizer (`tokenizer.json` through the `tokenizers` library) with its
//! configuration and resolved special-token ids.

use std::path::{Path, PathBuf};

use crate::error::{IoError, Result};
use crate::tokenizer_config::{TokenizerConfig, SPECIAL_TOKEN_ROLES};

/// A special token and its id in the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialToken {
    pub content: String,
    pub id: u32,
}

/// A loaded tokenizer: `tokenizer.json` plus its configuration, special tokens resolved to ids.
pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    config: TokenizerConfig,
    /// Resolved tokens in the order of [`SPECIAL_TOKEN_ROLES`].
    special: [Option<SpecialToken>; 4],
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("special", &self.special)
            .finish_non_exhaustive()
    }
}

impl HfTokenizer {
    /// Loads a tokenizer folder: `tokenizer.json` (required) and its configuration
    /// ([`TokenizerConfig::from_dir`]).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(IoError::FolderNotFound { path: dir.to_path_buf() });
        }
        let path = dir.join("tokenizer.json");
        let config = TokenizerConfig::from_dir(dir)?;
        // DeBERTa-v2/v3 checkpoints may ship only their sentencepiece model.
        let spm = !path.exists() && dir.join(crate::spm::SPM_MODEL).is_file();
        let inner = if spm && crate::spm::is_deberta_v2(dir, &config.raw) {
            crate::spm::load_deberta_v2(dir, &config.raw)?
        } else {
            load(&path)?
        };
        Self::new(inner, config)
    }

    /// Loads a `tokenizer.json` alone, with an empty configuration.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        Self::new(load(path.as_ref())?, TokenizerConfig::default())
    }

    /// Combines a tokenizer with a configuration, resolving each configured special token to its
    /// id; a token that is not in the vocabulary is an error naming the role and the file.
    ///
    /// Padding and truncation saved in `tokenizer.json` are turned off, as transformers' fast
    /// tokenizers turn them off on every call that does not ask for them (all-MiniLM-L6-v2's
    /// file pads every text to 128 ids).
    pub fn new(mut inner: tokenizers::Tokenizer, config: TokenizerConfig) -> Result<Self> {
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| IoError::Tokenizer { action: "turn off truncation", message: e.to_string() })?;
        let mut special: [Option<SpecialToken>; 4] = Default::default();
        for (slot, role) in special.iter_mut().zip(SPECIAL_TOKEN_ROLES) {
            let Some(content) = config.token(role) else { continue };
            let id = inner.token_to_id(content).ok_or_else(|| IoError::SpecialTokenNotInVocab {
                path: config
                    .origin(role)
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from("tokenizer_config.json")),
                role: role.to_string(),
                token: content.to_string(),
            })?;
            *slot = Some(SpecialToken { content: content.to_string(), id });
        }
        Ok(HfTokenizer { inner, config, special })
    }

    /// Token ids of `text`; with `add_special_tokens`, the tokenizer's post-processor adds its
    /// special tokens (e.g. BOS) as `transformers` does by default.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|e| IoError::Tokenizer { action: "encode", message: e.to_string() })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Text of token ids, optionally leaving special tokens out.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| IoError::Tokenizer { action: "decode", message: e.to_string() })
    }

    /// Id of a token (added tokens included).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Token of an id.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<&SpecialToken> {
        self.special[0].as_ref()
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<&SpecialToken> {
        self.special[1].as_ref()
    }

    /// Padding token.
    pub fn pad(&self) -> Option<&SpecialToken> {
        self.special[2].as_ref()
    }

    /// Unknown-word token.
    pub fn unk(&self) -> Option<&SpecialToken> {
        self.special[3].as_ref()
    }

    /// The configuration (special tokens, chat templates, `add_bos_token`, the raw JSON).
    pub fn config(&self) -> &TokenizerConfig {
        &self.config
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

fn load(path: &Path) -> Result<tokenizers::Tokenizer> {
    if !path.is_file() {
        return Err(IoError::FileNotFound {
            path: path.to_path_buf(),
            expected: "the tokenizer (`tokenizer.json`, as `tokenizers` or `transformers` save it)".to_string(),
        });
    }
    tokenizers::Tokenizer::from_file(path)
        .map_err(|e| IoError::TokenizerLoad { path: path.to_path_buf(), message: e.to_string() })
}
