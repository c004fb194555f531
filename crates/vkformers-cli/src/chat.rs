//! `vkformers chat`: a multi-turn chat in the terminal (or over a pipe: one user message per
//! stdin line). Each turn renders the whole conversation with the model's chat template (with the
//! assistant prompt), streams the reply, and stops on EOS or the template's end-of-turn token.
//! The KV cache carries over between turns when the new rendering extends what the cache holds;
//! otherwise (a template that rewrites earlier turns) the conversation is prefilled again.
//! `/reset` starts over, `/exit` (or end of input) quits.

use std::io::{BufRead as _, Write as _};
use std::process::ExitCode;

use anyhow::Context as _;
use vkformers_chat::Message;
use vkformers_generate::config::GenerationDefaults;
use vkformers_generate::detok::Detokenizer;
use vkformers_generate::generation::{generate_cached, Context as History, GenerateOptions, Timings};
use vkformers_generate::stop::{StopStrings, TextStream};
use vkformers_io::HfTokenizer;
use vkformers_models::decoder::KvCache;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::{Context, DeviceSelector};

use crate::generate::{chat_prompt, end_ids, model_dir, options, tokenizer, SamplingArgs};

#[derive(clap::Args)]
pub struct Args {
    /// Model folder (config.json, model.safetensors, tokenizer files with a chat template).
    #[arg(long)]
    model: String,
    #[command(flatten)]
    adapter: crate::load::AdapterArgs,
    /// A system message that opens the conversation.
    #[arg(long)]
    system: Option<String>,
    /// After each reply, print to stderr how many tokens came from the KV cache, how many were
    /// prefilled, and the prefill and decode tokens/s.
    #[arg(long)]
    stats: bool,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    dtype: crate::precision::DtypeArgs,
}

/// The conversation and what the KV cache holds of it.
struct Session<'g, 'c> {
    g: &'g Graph<'c>,
    model: &'g Model,
    tok: &'g HfTokenizer,
    defaults: GenerationDefaults,
    sampling: SamplingArgs,
    system: Option<String>,
    stats: bool,
    messages: Vec<Message>,
    /// Token ids whose keys and values the cache holds, and the cache.
    cached: Vec<u32>,
    cache: Option<KvCache>,
}

impl Session<'_, '_> {
    fn reset(&mut self) {
        self.messages = self.system.iter().map(|s| Message::system(s.clone())).collect();
        self.cached.clear();
        self.cache = None;
    }

    /// One user turn: streams the reply to `out` and returns it.
    fn turn(&mut self, user: &str, out: &mut dyn std::io::Write) -> anyhow::Result<String> {
        self.messages.push(Message::user(user));
        let ids = self.tok.encode(&chat_prompt(self.tok, &self.messages)?, false)?;
        let mut opts = options(&self.defaults, &self.sampling, ids.len(), self.defaults.pad.unwrap_or(0))?;
        opts.eos = end_ids(&self.defaults, self.tok);
        let reuse = self.cache.is_some() && ids.len() > self.cached.len() && ids.starts_with(&self.cached);
        if !reuse {
            self.cache = Some(KvCache::new(self.g, &self.model.spec, ids.len() + opts.max_new_tokens)?);
        }
        let cache = self.cache.as_mut().context("no KV cache")?;
        let reused = cache.len();
        let (tokens, text, t) =
            stream_reply(self.g, self.model, self.tok, cache, &ids, &opts, &self.sampling.stop, out)?;
        if self.stats {
            eprintln!(
                "[{reused} tokens from the cache, {} prefilled at {:.1} tokens/s, {} new at {:.1} tokens/s]",
                t.prefill_tokens,
                t.prefill_tokens_per_sec(),
                tokens.len(),
                t.decode_tokens_per_sec()
            );
        }
        // The cache holds the prompt and every reply token but the last one sampled.
        self.cached = ids;
        self.cached.extend(&tokens[..tokens.len().saturating_sub(1)]);
        self.messages.push(Message::assistant(text.clone()));
        Ok(text)
    }
}

/// Generates one reply after `ids` (the cache holds a prefix of them), streaming its text.
/// Returns the reply's tokens, its text (special tokens and stop strings cut) and the timings.
#[allow(clippy::too_many_arguments)]
fn stream_reply(
    g: &Graph<'_>,
    model: &Model,
    tok: &HfTokenizer,
    cache: &mut KvCache,
    ids: &[u32],
    opts: &GenerateOptions,
    stop: &[String],
    out: &mut dyn std::io::Write,
) -> anyhow::Result<(Vec<u32>, String, Timings)> {
    let stops = StopStrings::new(stop.iter().cloned());
    let detok = Detokenizer::new(tok);
    let mut stream = TextStream::default();
    let mut error = None;
    let history = History { history: vec![ids.to_vec()], masks: vec![vec![1; ids.len()]] };
    let gen = generate_cached(g, model, cache, history, opts, &mut |_, new| {
        let mut step = || -> anyhow::Result<bool> {
            let chunk = stream.push(&detok, new, &stops)?;
            write!(out, "{}", chunk.text)?;
            let done =
                chunk.stop || new.last().is_some_and(|t| opts.eos.contains(t)) || new.len() == opts.max_new_tokens;
            if done {
                write!(out, "{}", stream.finish(&detok.decode(new)?, &stops))?;
            }
            out.flush()?;
            Ok(chunk.stop)
        };
        step().unwrap_or_else(|e| {
            error.get_or_insert(e);
            true
        })
    })?;
    if let Some(e) = error {
        return Err(e);
    }
    writeln!(out)?;
    let tokens = gen.rows.into_iter().next().unwrap_or_default();
    let text = stops.trim(&tok.decode(&tokens, true)?).to_string();
    Ok((tokens, text, gen.timings))
}

pub fn run(selector: &DeviceSelector, args: &Args) -> anyhow::Result<ExitCode> {
    let dir = model_dir(&args.model)?;
    let tok = tokenizer(&dir, "chat")?;
    vkformers_chat::select_template(tok.config(), None)
        .context("chat needs a chat template in tokenizer_config.json")?;
    let ctx = Context::new(selector)?;
    let g = Graph::new(&ctx);
    let model = crate::load::inference_model(&g, &dir, &args.adapter, args.dtype.resolve(&dir)?)?;
    crate::load::generate_in_weight_type(&g, &model);
    let mut session = Session {
        g: &g,
        model: &model,
        tok: &tok,
        defaults: GenerationDefaults::from_dir(&dir)?,
        sampling: args.sampling.clone(),
        system: args.system.clone(),
        stats: args.stats,
        messages: Vec::new(),
        cached: Vec::new(),
        cache: None,
    };
    session.reset();
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin());
    if interactive {
        eprintln!("chatting with {} — /reset starts over, /exit quits", dir.display());
    }
    let mut stdout = std::io::stdout();
    let mut stdin = std::io::stdin().lock();
    // Piped, replies would run together: an empty line goes between the blocks printed.
    let mut printed = false;
    let mut separate = |out: &mut std::io::Stdout| -> std::io::Result<()> {
        if std::mem::replace(&mut printed, true) && !interactive {
            writeln!(out)?;
        }
        Ok(())
    };
    loop {
        if interactive {
            eprint!("> ");
        }
        let mut line = String::new();
        if stdin.read_line(&mut line).context("reading stdin")? == 0 {
            break;
        }
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                session.reset();
                separate(&mut stdout)?;
                writeln!(stdout, "(conversation reset)")?;
            }
            user => {
                separate(&mut stdout)?;
                session.turn(user, &mut stdout)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
