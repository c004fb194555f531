//! `vkformers generate` on an encoder-decoder folder (T5, BART families): each prompt is a source
//! the encoder reads once; the decoder generates greedily from `decoder_start_token_id` with the
//! cached loop of `vkformers_generate::seq2seq` (forced BOS/EOS and EOS ids from
//! `generation_config.json`). Sampling, beams, stop strings, chat templates and continuous
//! batching are not supported here yet and say so.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use vkformers_generate::seq2seq::{greedy, Seq2SeqOptions};
use vkformers_tensor::{DType, Graph};
use vkformers_vk::{Context, DeviceSelector};

use super::Args;

/// True when `dir`'s config is an encoder-decoder (its spec has the seq2seq part).
pub fn is_seq2seq(dir: &Path) -> anyhow::Result<bool> {
    let config = vkformers_io::read_json(dir.join("config.json"))?;
    Ok(vkformers_models::spec_from_config(&config).is_ok_and(|s| s.seq2seq.is_some()))
}

/// Flags the encoder-decoder path does not take yet, named.
fn refuse_unsupported(args: &Args, gen: &Value) -> anyhow::Result<()> {
    let s = &args.sampling;
    let sampled = (s.do_sample || gen.get("do_sample").and_then(Value::as_bool) == Some(true)) && !s.greedy;
    let beams = gen.get("num_beams").and_then(Value::as_u64).is_some_and(|n| n > 1);
    let unsupported = [
        (sampled, "sampling (--do-sample or do_sample in generation_config.json; pass --greedy)"),
        (beams && !s.greedy, "beam search (num_beams in generation_config.json; pass --greedy)"),
        (!s.stop.is_empty(), "--stop"),
        (args.chat, "--chat"),
        (args.max_batch.is_some(), "--max-batch"),
        (args.adapter.adapter.is_some(), "--adapter"),
    ];
    if let Some((_, what)) = unsupported.iter().find(|(on, _)| *on) {
        bail!("{what} is not supported yet for encoder-decoder models; they generate greedily");
    }
    Ok(())
}

/// New tokens at most: the flag, else `max_new_tokens`, else `max_length` (which counts the
/// decoder's start token; transformers' default 20) minus one.
fn max_new_tokens(args: &Args, gen: &Value) -> usize {
    let u = |k: &str| gen.get(k).and_then(Value::as_u64).map(|v| v as usize);
    args.sampling.max_new_tokens.or(u("max_new_tokens")).unwrap_or_else(|| u("max_length").unwrap_or(20).max(2) - 1)
}

pub fn run(selector: &DeviceSelector, args: &Args, dir: &Path) -> anyhow::Result<ExitCode> {
    let read = |f: &str| -> anyhow::Result<Value> {
        let p = dir.join(f);
        Ok(if p.is_file() { vkformers_io::read_json(&p)? } else { Value::Null })
    };
    let (gen, cfg) = (read("generation_config.json")?, read("config.json")?);
    refuse_unsupported(args, &gen)?;
    if args.dtype.resolve(dir)? != DType::F32 {
        bail!("encoder-decoder models generate in f32 only for now: pass --dtype f32");
    }
    let opts = Seq2SeqOptions::from_configs(&gen, &cfg, max_new_tokens(args, &gen))?;
    let (sources, tok) = super::prompts(dir, args)?;
    let ctx = Context::new(selector)?;
    let g = Graph::new(&ctx);
    let model = vkformers_models::model::Model::load(&g, dir)
        .with_context(|| format!("loading the model in {}", dir.display()))?;
    if let Some(bad) = sources.iter().flatten().find(|&&t| t as usize >= model.spec.vocab) {
        bail!("token id {bad} is outside the model's vocabulary of {} ids", model.spec.vocab);
    }
    let rows = greedy(&g, &model, &sources, &opts)?;
    let mut out = Vec::new();
    for (src, seq) in sources.iter().zip(&rows) {
        // Drop the start token and the padding after a finished row's EOS.
        let end = seq.iter().skip(1).position(|t| opts.eos.contains(t)).map_or(seq.len(), |p| p + 2);
        let ids = &seq[1..end];
        let text = tok.as_ref().map(|t| t.decode(ids, true)).transpose()?;
        out.push(json!({ "prompt_ids": src, "token_ids": ids, "text": text }));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json!({ "rows": out }))?);
    } else {
        for (i, r) in out.iter().enumerate() {
            match r["text"].as_str() {
                Some(t) if out.len() == 1 => println!("{t}"),
                Some(t) => println!("[{i}] {t}"),
                None => println!("[{i}] {}", r["token_ids"]),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
