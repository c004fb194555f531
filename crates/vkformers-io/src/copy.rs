//! Copying the tokenizer and generation files of a model folder to another.

use std::path::{Path, PathBuf};

use crate::atomic::write_atomic;
use crate::error::{IoError, Result};

/// Files [`copy_tokenizer_files`] copies when present.
pub const TOKENIZER_FILES: [&str; 15] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "generation_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "spm.model",
    "sentencepiece.bpe.model",
    "vocab.model",
];

/// Copies every file of [`TOKENIZER_FILES`] that exists in `src_dir` into `dst_dir` (created if
/// missing), each atomically, and returns the copies' paths.
pub fn copy_tokenizer_files(src_dir: impl AsRef<Path>, dst_dir: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
    let (src_dir, dst_dir) = (src_dir.as_ref(), dst_dir.as_ref());
    if !src_dir.is_dir() {
        return Err(IoError::FolderNotFound { path: src_dir.to_path_buf() });
    }
    std::fs::create_dir_all(dst_dir).map_err(|e| IoError::io(dst_dir, e))?;
    let mut copied = Vec::new();
    for name in TOKENIZER_FILES {
        let src = src_dir.join(name);
        if !src.is_file() {
            continue;
        }
        let dst = dst_dir.join(name);
        let mut file = std::fs::File::open(&src).map_err(|e| IoError::io(&src, e))?;
        write_atomic(&dst, |w| std::io::copy(&mut file, w).map(|_| ()))?;
        copied.push(dst);
    }
    Ok(copied)
}
