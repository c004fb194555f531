//! The serve engine thread's text work per decode step: `B` requests of `T` new tokens each, every
//! step one token more for each, through `stop::TextStream` as serve's sink drives it (each token
//! pushed, the finished request's text decoded once at the end), with the incremental
//! detokenizer's window (`detok`, the tokenizer's own mode) against the full decode of every
//! request's whole text at every token (`DetokMode::Full`, the previous behaviour). Host time per
//! step (all `B` rows), best of the runs: the mean over the `T` steps, and the last step (the
//! longest texts).
//!
//! The requests' ids are `T`-token stretches of `TEXT` encoded by the tokenizer, as a model's
//! output would be.
//!
//! `cargo run --release -p vkformers-generate --example detok_cost -- TOKENIZER_JSON TEXT [B T]`
//! (default B = 64, T = 256). `tools/bench/detok_tokenizers.py` trains tokenizers of a real
//! model's size and layout where none is at hand.

use std::time::Instant;

use vkformers_generate::detok::{mode_of, DetokMode, Detokenizer};
use vkformers_generate::stop::{StopStrings, TextStream};
use vkformers_io::HfTokenizer;

const RUNS: usize = 3;

/// Mean and last-step microseconds per step of one pass over `rows`. Checks that each row printed
/// its full decode (cut before a stop string).
fn pass(detok: &Detokenizer<'_>, rows: &[Vec<u32>], stops: &StopStrings) -> (f64, f64) {
    let t = rows[0].len();
    let mut streams: Vec<TextStream> = rows.iter().map(|_| TextStream::default()).collect();
    let mut printed = vec![String::new(); rows.len()];
    let (mut total, mut last) = (0.0, 0.0);
    for k in 1..=t {
        let start = Instant::now();
        for ((row, stream), out) in rows.iter().zip(&mut streams).zip(&mut printed) {
            let chunk = stream.push(detok, &row[..k], stops).expect("decode");
            out.push_str(&chunk.text);
            if k == t {
                let text = detok.decode(row).expect("decode");
                out.push_str(&stream.finish(&text, stops));
            }
        }
        let us = start.elapsed().as_secs_f64() * 1e6;
        total += us;
        last = us;
    }
    for (row, out) in rows.iter().zip(&printed) {
        let text = detok.decode(row).expect("decode");
        assert_eq!(out, stops.trim(&text), "{:?}: ids {row:?}", detok.mode());
    }
    (total / t as f64, last)
}

fn best(detok: &Detokenizer<'_>, rows: &[Vec<u32>], stops: &StopStrings) -> (f64, f64) {
    (0..RUNS).map(|_| pass(detok, rows, stops)).fold((f64::MAX, f64::MAX), |a, b| (a.0.min(b.0), a.1.min(b.1)))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(tok_path), Some(text_path)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: detok_cost TOKENIZER_JSON TEXT [B T]");
        std::process::exit(2);
    };
    let b: usize = args.get(3).map_or(64, |s| s.parse().expect("B"));
    let t: usize = args.get(4).map_or(256, |s| s.parse().expect("T"));
    let tok = HfTokenizer::from_file(tok_path).expect("tokenizer");
    let text = std::fs::read_to_string(text_path).expect("text");
    let ids = tok.encode(&text, false).expect("encode");
    assert!(ids.len() > t, "the text has {} tokens, fewer than T = {t}", ids.len());
    // Each request a different stretch of the text.
    let rows: Vec<Vec<u32>> = (0..b).map(|r| ids[(r * 997) % (ids.len() - t)..][..t].to_vec()).collect();
    let window = Detokenizer::new(&tok);
    let full = Detokenizer::with_mode(&tok, DetokMode::Full);
    println!("{tok_path}: {:?}, {b} requests x {t} tokens", mode_of(&tok));
    for (what, stops) in [
        ("no stop strings", StopStrings::default()),
        // Stops that do not occur: the row runs its T tokens, each searched (a stop that occurs
        // retires the row, which then costs nothing more).
        (
            "stops [\"<|im_end|>\", \"\\n\\n\\n\\n\"]",
            StopStrings::new(["<|im_end|>".to_string(), "\n\n\n\n".to_string()]),
        ),
    ] {
        let (old_mean, old_last) = best(&full, &rows, &stops);
        let (new_mean, new_last) = best(&window, &rows, &stops);
        println!(
            "{what}: full decode {old_mean:.0} us/step (last step {old_last:.0}), window {new_mean:.0} us/step \
             (last step {new_last:.0}): {:.1}x",
            old_mean / new_mean
        );
    }
}
