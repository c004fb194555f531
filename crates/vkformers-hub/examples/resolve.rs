//! Resolves a `--model`/`--data` argument the way every vkformers command does and prints the
//! local path(s): `cargo run -p vkformers-hub --example resolve -- org/name[@rev]` or
//! `... -- --data org/dataset [config] [split] [files-glob]`. Honours HF_ENDPOINT, HF_HOME,
//! HF_HUB_CACHE, HF_HUB_OFFLINE and HF_TOKEN like Python.

use std::process::ExitCode;
use vkformers_hub::{resolve_dataset, resolve_model, DatasetQuery};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("--data") if args.len() >= 2 => {
            let arg = |i: usize| args.get(i).filter(|s| !s.is_empty()).cloned();
            let query = DatasetQuery { config: arg(2), split: arg(3), files: arg(4) };
            resolve_dataset(&args[1], &query).map(|files| files.iter().map(|f| f.display().to_string()).collect())
        }
        Some(model) => resolve_model(model).map(|dir| vec![dir.display().to_string()]),
        None => {
            eprintln!("usage: resolve MODEL[@REV] | resolve --data DATASET [CONFIG] [SPLIT] [GLOB]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(paths) => {
            paths.iter().for_each(|p| println!("{p}"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
