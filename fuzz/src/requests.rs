//! The generation targets: `generation_config.json` as `vkformers generate` and `serve` read it,
//! `generate`'s prompt files, and the serve API's request bodies parsed and checked as its routes do (no server, no GPU).
//! Both end where the engine would start: one token chosen on the host from fixed logits with
//! the options the input asked for (`row_choice::host_choice`, the device kernel's reference).

use std::path::Path;

use serde_json::Value;
use vkformers_generate::config::GenerationDefaults;
use vkformers_generate::engine::RequestOptions;
use vkformers_generate::prompt_file::{id_prompts, text_prompts};
use vkformers_generate::row_choice::{device_row, host_choice};
use vkformers_generate::seq2seq::Seq2SeqOptions;
use vkformers_generate::Penalties;
use vkformers_serve::api::{plan, sampling, ChatRequest, Common, CompletionRequest};
use vkformers_serve::embeddings::EmbeddingRequest;
use vkformers_serve::limits::PromptLimits;

use crate::targets::Ctx;

/// The vocabulary and context the requests are checked against (the chatml fixture's ids).
const VOCAB: usize = 406;
const MAX_MODEL_LEN: usize = 64;

/// The config.json beside the generation config (ids fall back to it).
fn llama_config() -> Value {
    let text = std::fs::read(crate::root().join("tests/fixtures/llama/config.json")).expect("llama config fixture");
    serde_json::from_slice(&text).expect("llama config fixture is JSON")
}

/// Seeds: every fixture's `generation_config.json`.
pub fn generation_seeds(root: &Path) -> Vec<Vec<u8>> {
    let mut out = crate::targets::files_named(root, "tests/fixtures", "generation_config.json");
    out.extend(crate::targets::files_named(root, "tests/fixtures_generate", "generation_config.json"));
    out
}

/// Seeds: request bodies of the three endpoints under `fuzz/seeds/serve_request/`.
pub fn request_seeds(root: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(root.join("fuzz/seeds/serve_request")) else { return Vec::new() };
    let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    paths.into_iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// One token for `prompt` with `opts` as the engine chooses it (row 0, first step).
fn choose(opts: &RequestOptions, prompt: &[u32]) {
    let Ok(pipeline) = opts.params.processors() else { return };
    let _ = device_row(opts, &pipeline, 0, 0);
    let mut logits: Vec<f32> = (0..VOCAB).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
    let _ = host_choice(opts, &pipeline, (prompt, &[]), &mut logits);
}

pub fn generation_config(_: &Ctx, input: &[u8]) {
    let Ok(gen) = serde_json::from_slice::<Value>(input) else { return };
    let cfg = llama_config();
    // The input as generation_config.json over the fixture's config.json, and as a config.json
    // with no generation_config.json (the ids' fallback).
    for defaults in [GenerationDefaults::from_values(&gen, &cfg), GenerationDefaults::from_values(&Value::Null, &gen)] {
        // Every stop id is one the files name (not another id wrapped into u32).
        let named = |id: u32| {
            let lists = [&gen, &cfg, &gen["text_config"], &cfg["text_config"]].map(|v| &v["eos_token_id"]);
            lists.iter().any(|l| l.as_u64() == Some(id.into()) || l.as_array().is_some_and(|a| a.contains(&id.into())))
        };
        assert!(defaults.eos.iter().all(|&e| named(e)), "eos ids {:?} are not the files' ids", defaults.eos);
        // `vkformers generate`: the new tokens from max_length minus the prompt, then the context.
        let width = 5;
        let from_length = defaults.max_length.map(|l| l.saturating_sub(width)).filter(|&n| n > 0);
        let max_new = defaults.max_new_tokens.or(from_length).unwrap_or(128);
        let _ = defaults.context.map(|c| c.checked_sub(width).map(|room| room.min(max_new)));
        let opts = RequestOptions {
            params: defaults.params.clone(),
            penalties: Penalties::default(),
            seed: 0,
            row: 0,
            max_new_tokens: max_new,
            eos: defaults.eos.clone(),
            logprobs: None,
        };
        choose(&opts, &[1, 2, 3]);
        // `vkformers serve`: a request that names nothing takes these defaults.
        if let Ok(p) = plan(&Common::default(), &defaults, None, defaults.eos.clone()) {
            choose(&p.opts, &[1, 2, 3]);
        }
        let _ = sampling(&Common { temperature: Some(0.5), ..Common::default() }, &defaults);
    }
    // Encoder-decoders read their start, EOS, pad and forced ids from the same file.
    let _ = Seq2SeqOptions::from_configs(&gen, &cfg, 8);
    let _ = Seq2SeqOptions::from_configs(&Value::Null, &gen, 8);
}

/// Seeds: a `--prompt-file` and a `--prompt-ids-file`.
pub fn prompt_file_seeds(root: &Path) -> Vec<Vec<u8>> {
    ["prompts.txt", "ids.jsonl"]
        .iter()
        .filter_map(|f| std::fs::read(root.join("fuzz/seeds/prompt_files").join(f)).ok())
        .collect()
}

/// A file as `vkformers generate --prompt-file` and `--prompt-ids-file` read it (both read the
/// file as UTF-8 text first), each prompt then encoded or checked against the vocabulary.
pub fn prompt_files(ctx: &Ctx, input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else { return };
    let file = Path::new("prompts");
    for prompt in text_prompts(text, file).unwrap_or_default() {
        let _ = ctx.tokenizer.encode(&prompt, true);
    }
    if let Ok(prompts) = id_prompts(text, file) {
        let _ = admit(&prompts, Some(1));
    }
}

/// The prompt checks of `AppState::submit` (serve's `PromptLimits`), with the fixture's limits.
fn admit(prompts: &[Vec<u32>], max_tokens: Option<usize>) -> bool {
    let limits = PromptLimits { vocab: VOCAB, max_model_len: MAX_MODEL_LEN };
    limits.admit(prompts, max_tokens, |room| room.min(16)).is_ok()
}

fn completion(ctx: &Ctx, req: &CompletionRequest, defaults: &GenerationDefaults) {
    if req.refuse_unsupported().is_err() {
        return;
    }
    let Ok(prompts) = req.prompt_ids(|t| ctx.tokenizer.encode(t, true)) else { return };
    let Ok(p) = plan(&req.common, defaults, req.logprobs, defaults.eos.clone()) else { return };
    if admit(&prompts, p.max_tokens) {
        for prompt in &prompts {
            choose(&p.opts, prompt);
            let _ = p.stops.trim("Once upon a time.\nThe end");
        }
    }
}

fn chat(ctx: &Ctx, mut req: ChatRequest, defaults: &GenerationDefaults) {
    if req.messages.is_empty() {
        return;
    }
    let Ok(messages) = req.messages.iter().map(|m| m.to_message()).collect::<Result<Vec<_>, _>>() else { return };
    let Ok(text) = vkformers_chat::assistant_prompt(&ctx.tokenizer, &messages) else { return };
    let Ok(prompt) = ctx.tokenizer.encode(&text, false) else { return };
    let logprobs = req.settle_options();
    let Ok(p) = plan(&req.common, defaults, logprobs, defaults.eos.clone()) else { return };
    if admit(std::slice::from_ref(&prompt), p.max_tokens) {
        choose(&p.opts, &prompt);
    }
}

/// A body as each route would parse it (every route gets every body: a client may send a chat
/// body to /v1/completions).
pub fn serve_request(ctx: &Ctx, input: &[u8]) {
    let defaults =
        GenerationDefaults::from_values(&serde_json::json!({"do_sample": true, "top_k": 20}), &llama_config());
    if let Ok(req) = serde_json::from_slice::<CompletionRequest>(input) {
        completion(ctx, &req, &defaults);
    }
    if let Ok(req) = serde_json::from_slice::<ChatRequest>(input) {
        chat(ctx, req, &defaults);
    }
    if let Ok(req) = serde_json::from_slice::<EmbeddingRequest>(input) {
        let _ = (req.inputs(VOCAB), req.base64());
    }
}
