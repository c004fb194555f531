//! `vkformers generate` on an encoder-decoder folder (T5, BART families): each prompt is a source
//! the encoder reads once; the decoder generates from `decoder_start_token_id`, greedily with the
//! cached loop of `vkformers_generate::seq2seq` or, with `--num-beams` above 1 (or
//! `num_beams` in `generation_config.json`), by `vkformers_generate::seq2seq_beam` (forced BOS/EOS
//! and EOS ids from `generation_config.json`; `--target-lang` forces its language token first,
//! see `seq2seq_lang`). `--adapter` attaches a PEFT LoRA adapter unmerged. `--do-sample` (with
//! temperature, top-k, top-p, min-p, `--seed`) and `--repetition-penalty` run on the greedy loop.
//! Stop strings, chat templates and continuous batching are not supported here yet and say so.

use std::path::Path;
use std::process::ExitCode;

use anyhow::bail;
use serde_json::{json, Value};
use vkformers_generate::beam::BeamIds;
use vkformers_generate::config::GenerationDefaults;
use vkformers_generate::seq2seq::{greedy, Seq2SeqOptions};
use vkformers_generate::seq2seq_beam::{beam_search, BeamOptions, EarlyStopping};
use vkformers_tensor::{DType, Graph};
use vkformers_vk::{Context, DeviceSelector};

use super::Args;

/// Beam-search flags (transformers' `generate` names); each overrides `generation_config.json`.
#[derive(clap::Args, Debug, Clone)]
pub struct BeamArgs {
    /// Beams per prompt (1 = greedy).
    #[arg(long, value_parser = crate::ranges::at_least_one)]
    pub num_beams: Option<usize>,
    /// Finished beams are scored `sum of log-probs / length^length_penalty` (default 1).
    #[arg(long)]
    pub length_penalty: Option<f64>,
    /// `true`: stop once num_beams hypotheses are finished; `false` (default): transformers'
    /// heuristic; `never`: the canonical stopping rule.
    #[arg(long, value_parser = ["true", "false", "never"])]
    pub early_stopping: Option<String>,
    /// No n-gram of this size occurs twice in a hypothesis (0 = off).
    #[arg(long)]
    pub no_repeat_ngram_size: Option<usize>,
    /// Hypotheses returned per prompt, the best first (at most --num-beams).
    #[arg(long, value_parser = crate::ranges::at_least_one)]
    pub num_return_sequences: Option<usize>,
}

/// The beam settings of the flags over `generation_config.json`; `None` for greedy search.
fn beam_options(b: &BeamArgs, gen: &Value) -> anyhow::Result<Option<BeamOptions>> {
    let u = |k: &str| gen.get(k).and_then(Value::as_u64).map(|v| v as usize);
    let num_beams = b.num_beams.or(u("num_beams")).unwrap_or(1);
    let num_return = b.num_return_sequences.or(u("num_return_sequences")).unwrap_or(1);
    if num_beams == 1 {
        if num_return > 1 {
            bail!("--num-return-sequences {num_return} needs --num-beams of at least {num_return}");
        }
        return Ok(None);
    }
    let early = match b.early_stopping.as_deref() {
        Some("true") => EarlyStopping::True,
        Some("never") => EarlyStopping::Never,
        Some(_) => EarlyStopping::False,
        None => match gen.get("early_stopping") {
            Some(Value::Bool(true)) => EarlyStopping::True,
            Some(Value::String(s)) if s == "never" => EarlyStopping::Never,
            _ => EarlyStopping::False,
        },
    };
    Ok(Some(BeamOptions {
        num_beams,
        length_penalty: b.length_penalty.or(gen.get("length_penalty").and_then(Value::as_f64)).unwrap_or(1.0),
        early_stopping: early,
        no_repeat_ngram_size: b.no_repeat_ngram_size.or(u("no_repeat_ngram_size")).unwrap_or(0),
        num_return_sequences: num_return,
    }))
}

/// The beam settings for a decoder-only folder, when beams are asked for (flags or
/// `generation_config.json`) and `--greedy` is not given.
pub fn decoder_beams(args: &Args, dir: &Path) -> anyhow::Result<Option<BeamOptions>> {
    let p = dir.join("generation_config.json");
    let gen = if p.is_file() { vkformers_io::read_json(&p)? } else { Value::Null };
    if args.sampling.greedy {
        return Ok(None);
    }
    beam_options(&args.beams, &gen)
}

/// Beam search after each prompt of a decoder-only model on the paged KV cache (beams share the
/// prompt's blocks; see `vkformers_generate::decoder_beam`), f32 weights, with `--adapter`
/// unmerged; the rows print as the encoder-decoder ones do.
pub fn run_decoder_beams(
    selector: &DeviceSelector,
    args: &Args,
    dir: &Path,
    defaults: &GenerationDefaults,
    beams: &BeamOptions,
) -> anyhow::Result<ExitCode> {
    refuse_unsupported(args, "beam search")?;
    if args.sampling.do_sample || defaults.params.do_sample {
        bail!("beam sampling is not supported yet: pass --greedy or drop --do-sample");
    }
    if args.dtype.resolve(dir)? != DType::F32 {
        bail!("beam search runs in f32 only for now: pass --dtype f32");
    }
    let (prompts, tok) = super::prompts(dir, args)?;
    let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let from_length = defaults.max_length.map(|l| l.saturating_sub(width)).filter(|&n| n > 0);
    let max_new = args.sampling.max_new_tokens.or(defaults.max_new_tokens).or(from_length).unwrap_or(20);
    let pad = defaults.pad.or(defaults.eos.first().copied()).unwrap_or(0);
    let ids = BeamIds { eos: defaults.eos.clone(), pad, forced_bos: None, forced_eos: None, max_new_tokens: max_new };
    let ctx = Context::new(selector)?;
    let g = Graph::new(&ctx);
    // An adapter stays unmerged: the cached forward adds its LoRA terms.
    let model = crate::load::model_with_adapter(&g, dir, &args.adapter)?;
    if let Some(bad) = prompts.iter().flatten().find(|&&t| t as usize >= model.spec.vocab) {
        bail!("token id {bad} is outside the model's vocabulary of {} ids", model.spec.vocab);
    }
    let hyps = vkformers_generate::decoder_beam::beam_search(&g, &model, &prompts, &ids, beams)?;
    let mut out = Vec::new();
    for (p, hs) in prompts.iter().zip(&hyps) {
        for h in hs {
            // The new tokens, cut after the first EOS.
            let new = &h.tokens[p.len()..];
            let end = new.iter().position(|t| ids.eos.contains(t)).map_or(new.len(), |i| i + 1);
            let text = tok.as_ref().map(|t| t.decode(&new[..end], true)).transpose()?;
            out.push(json!({ "prompt_ids": p, "token_ids": &new[..end], "text": text, "score": h.score }));
        }
    }
    print_rows(args, &out)
}

fn print_rows(args: &Args, out: &[Value]) -> anyhow::Result<ExitCode> {
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

/// True when `dir`'s config is an encoder-decoder (its spec has the seq2seq part).
pub fn is_seq2seq(dir: &Path) -> anyhow::Result<bool> {
    let config = vkformers_io::read_json(dir.join("config.json"))?;
    Ok(vkformers_models::spec_from_config(&config).is_ok_and(|s| s.seq2seq.is_some()))
}

/// Flags the encoder-decoder path does not take yet, named.
fn refuse_unsupported(args: &Args, path: &str) -> anyhow::Result<()> {
    let s = &args.sampling;
    let unsupported =
        [(!s.stop.is_empty(), "--stop"), (args.chat, "--chat"), (args.max_batch.is_some(), "--max-batch")];
    if let Some((_, what)) = unsupported.iter().find(|(on, _)| *on) {
        bail!("{what} is not supported yet for {path}");
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
    refuse_unsupported(args, "encoder-decoder models")?;
    if args.dtype.resolve(dir)? != DType::F32 {
        bail!("encoder-decoder models generate in f32 only for now: pass --dtype f32");
    }
    let mut opts = Seq2SeqOptions::from_configs(&gen, &cfg, max_new_tokens(args, &gen))?;
    // Sampling and the processors as the decoder path reads them (flags over generation_config).
    let sampling = super::options(&GenerationDefaults::from_dir(dir)?, &args.sampling, 0, opts.pad)?;
    (opts.params, opts.seed) = (sampling.params, sampling.seed);
    let (sources, tok) = match super::seq2seq_lang::sources(dir, args)? {
        Some((ids, tok, forced)) => {
            opts.forced_bos = Some(forced);
            (ids, Some(tok))
        }
        None => super::prompts(dir, args)?,
    };
    let ctx = Context::new(selector)?;
    let g = Graph::new(&ctx);
    // A PEFT adapter (SEQ_2_SEQ_LM) stays unmerged: every projection adds its low-rank term.
    let model = crate::load::model_with_adapter(&g, dir, &args.adapter)?;
    if let Some(bad) = sources.iter().flatten().find(|&&t| t as usize >= model.spec.vocab) {
        bail!("token id {bad} is outside the model's vocabulary of {} ids", model.spec.vocab);
    }
    let beams = if args.sampling.greedy { None } else { beam_options(&args.beams, &gen)? };
    if beams.is_some() && opts.params.do_sample {
        bail!("beam sampling is not supported yet: pass --greedy, --num-beams 1 or drop --do-sample");
    }
    // Per source: its hypotheses (one when greedy) and their scores (beam search only).
    let hyps: Vec<Vec<(Vec<u32>, Option<f32>)>> = match &beams {
        None => greedy(&g, &model, &sources, &opts)?.into_iter().map(|s| vec![(s, None)]).collect(),
        Some(b) => beam_search(&g, &model, &sources, &opts, b)?
            .into_iter()
            .map(|hs| hs.into_iter().map(|h| (h.tokens, Some(h.score))).collect())
            .collect(),
    };
    let mut out = Vec::new();
    for (src, hs) in sources.iter().zip(&hyps) {
        for (seq, score) in hs {
            // Drop the start token and the filling after a finished hypothesis' EOS.
            let end = seq.iter().skip(1).position(|t| opts.eos.contains(t)).map_or(seq.len(), |p| p + 2);
            let ids = &seq[1..end];
            let text = tok.as_ref().map(|t| t.decode(ids, true)).transpose()?;
            out.push(json!({ "prompt_ids": src, "token_ids": ids, "text": text, "score": score }));
        }
    }
    print_rows(args, &out)
}
