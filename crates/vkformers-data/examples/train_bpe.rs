//! Trains the byte-level BPE tokenizer of `vkformers_data::train_bpe_tokenizer`.
//!
//! Usage: `cargo run -p vkformers-data --example train_bpe -- OUT_DIR VOCAB_SIZE FILE...`

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(out), Some(vocab), files) = (args.first(), args.get(1).and_then(|v| v.parse().ok()), args.get(2..))
    else {
        eprintln!("usage: train_bpe OUT_DIR VOCAB_SIZE FILE...");
        return ExitCode::FAILURE;
    };
    let files: Vec<PathBuf> = files.unwrap_or_default().iter().map(PathBuf::from).collect();
    match vkformers_data::train_bpe_tokenizer(&files, vocab, &PathBuf::from(out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
