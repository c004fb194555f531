//! Decoder beam search on the paged KV cache (beams sharing the prompt's blocks) against the
//! uncached search (every beam's whole sequence each step) on one model folder: wall time of
//! each, new tokens per second over all beams, the cache's blocks after the prompt, at the peak
//! and at the end, and whether both searches return the same hypotheses.
//!
//! `cargo run --release -p vkformers-generate --example beam_bench -- MODEL_DIR [PROMPT_LEN]
//! [NEW_TOKENS] [BEAMS] [--no-uncached]`
//!
//! The prompt is `PROMPT_LEN` ids `(7·i + 3) mod vocab`; EOS is off (every beam runs
//! `NEW_TOKENS`), so both searches do the same number of steps.

use std::path::PathBuf;
use std::time::Instant;

use vkformers_generate::decoder_beam::{beam_search_paged, beam_search_uncached, BeamIds, BeamOptions, EarlyStopping};
use vkformers_models::decoder::BLOCK_SIZE;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::{Context, DeviceSelector};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().ok_or("usage: MODEL_DIR [PROMPT_LEN] [NEW_TOKENS] [BEAMS] [--no-uncached]")?);
    let num = |i: usize, default: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    let (plen, new, beams) = (num(1, 128), num(2, 32), num(3, 4));
    let ctx = Context::new(&DeviceSelector::Best)?;
    let g = Graph::new(&ctx);
    let model = Model::load(&g, &dir)?;
    let vocab = model.spec.vocab;
    let prompt: Vec<u32> = (0..plen).map(|i| ((7 * i + 3) % vocab) as u32).collect();
    let ids = BeamIds { eos: vec![], pad: 0, forced_bos: None, forced_eos: None, max_new_tokens: new };
    let bo = BeamOptions {
        num_beams: beams,
        length_penalty: 1.0,
        early_stopping: EarlyStopping::False,
        no_repeat_ngram_size: 0,
        num_return_sequences: 1,
    };
    // A first run loads the kernels; the second is timed.
    beam_search_paged(&g, &model, &prompt, &ids, &bo, BLOCK_SIZE)?;
    let start = Instant::now();
    let (paged, used) = beam_search_paged(&g, &model, &prompt, &ids, &bo, BLOCK_SIZE)?;
    let secs = start.elapsed().as_secs_f64();
    let rate = (new * beams) as f64 / secs;
    println!(
        "paged: {secs:.3} s, {rate:.1} beam tokens/s, blocks after prompt {}, peak {}, end {}",
        used.after_prompt, used.peak, used.at_end
    );
    if args.iter().any(|a| a == "--no-uncached") {
        return Ok(());
    }
    let start = Instant::now();
    let uncached = beam_search_uncached(&g, &model, std::slice::from_ref(&prompt), &ids, &bo)?.remove(0);
    let secs_u = start.elapsed().as_secs_f64();
    println!("uncached: {secs_u:.3} s ({:.1}x the paged time)", secs_u / secs);
    let same = paged.iter().zip(&uncached).all(|(a, b)| a.tokens == b.tokens);
    println!("same hypotheses: {same}; scores {} vs {}", paged[0].score, uncached[0].score);
    Ok(())
}
