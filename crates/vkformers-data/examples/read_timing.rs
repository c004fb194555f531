//! Times `read_dataset`: rows, tokens and seconds for a tokenizer folder and dataset files.
//!
//! Usage: `cargo run -p vkformers-data --example read_timing -- TOKENIZER_DIR FILE...`

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((dir, files)) = args.split_first() else {
        eprintln!("usage: read_timing TOKENIZER_DIR FILE...");
        return ExitCode::FAILURE;
    };
    let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
    let result = vkformers_io::HfTokenizer::from_dir(dir).map_err(|e| e.to_string()).and_then(|tok| {
        let start = Instant::now();
        let data = vkformers_data::read_dataset(&files, &tok, &Default::default()).map_err(|e| e.to_string())?;
        Ok((data, start.elapsed()))
    });
    match result {
        Ok((data, elapsed)) => {
            let tokens: usize = data.examples.iter().map(|e| e.input_ids.len()).sum();
            let rate = tokens as f64 / elapsed.as_secs_f64();
            println!("{} rows, {tokens} tokens in {elapsed:.2?} ({rate:.0} tokens/s)", data.examples.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
