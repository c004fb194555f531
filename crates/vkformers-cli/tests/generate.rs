//! `vkformers generate` and `vkformers chat` run as a user runs them, on the tiny model folder
//! `tests/fixtures_generate/cli_model` (llama fixture weights, a character tokenizer, a ChatML
//! template; written by `tools/parity/make_cli_model.py`).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use vkformers_chat::{render, select_template, Message, SpecialTokens};
use vkformers_generate::decode::greedy_cached;
use vkformers_generate::generation::{generate, GenerateOptions};
use vkformers_io::HfTokenizer;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_generate/cli_model")
}

fn vkformers(args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vkformers"));
    cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run vkformers");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn ok(args: &[&str], stdin: Option<&str>) -> String {
    let out = vkformers(args, stdin);
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "vkformers {args:?} failed\nstdout: {so}\nstderr: {se}");
    so.into_owned()
}

fn generate_json(extra: &[&str]) -> Value {
    let m = model();
    let mut args = vec!["generate", "--model", m.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&args, None)).unwrap()
}

fn tokens(row: &Value) -> Vec<u32> {
    row["token_ids"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

#[test]
fn prompt_ids_json_equals_library_greedy() {
    let prompt = [1u32, 44, 73, 84, 5, 84, 72, 69, 82, 69];
    let ids: Vec<String> = prompt.iter().map(u32::to_string).collect();
    let out = generate_json(&["--prompt-ids", &ids.join(","), "--max-new-tokens", "16"]);
    let row = &out["rows"][0];
    let got = tokens(row);
    on_every_device("cli_generate", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &model()).unwrap();
        let want = greedy_cached(&g, &model, &prompt, 16).unwrap();
        // The CLI stops at the model's EOS id (2, generation_config.json); the library loop has none.
        let end = want.iter().position(|&t| t == 2).map_or(want.len(), |i| i + 1);
        assert_eq!(got, want[..end], "CLI greedy tokens vs library greedy");
        let reason = if end < want.len() { "stop" } else { "length" };
        assert_eq!(row["finish_reason"], reason);
        Ok(())
    });
    let t = &out["timings"];
    assert_eq!(t["prefill_tokens"], prompt.len());
    assert!(t["prefill_tokens_per_second"].as_f64().unwrap() > 0.0);
    assert_eq!(t["decode_tokens"].as_u64().unwrap() as usize, got.len() - 1);
}

#[test]
fn prompt_file_batch_equals_each_prompt_alone() {
    let prompts = ["Hi", "A much longer prompt than the first", "Mid length"];
    let file = std::env::temp_dir().join(format!("vkformers-prompts-{}.txt", std::process::id()));
    std::fs::write(&file, prompts.join("\n") + "\n\n").unwrap();
    let batch = generate_json(&["--prompt-file", file.to_str().unwrap(), "--max-new-tokens", "12"]);
    std::fs::remove_file(&file).ok();
    let rows = batch["rows"].as_array().unwrap();
    assert_eq!(rows.len(), prompts.len());
    for (p, row) in prompts.iter().zip(rows) {
        let alone = generate_json(&["--prompt", p, "--max-new-tokens", "12"]);
        assert_eq!(row["prompt_ids"], alone["rows"][0]["prompt_ids"], "{p}");
        assert_eq!(row["token_ids"], alone["rows"][0]["token_ids"], "batched vs alone: {p}");
        assert_eq!(row["text"], alone["rows"][0]["text"], "{p}");
    }
}

#[test]
fn seeded_sampling_repeats_exactly() {
    let run = |seed: &str| {
        let out = generate_json(&[
            "--prompt",
            "Once",
            "--do-sample",
            "--temperature",
            "1.5",
            "--top-k",
            "0",
            "--seed",
            seed,
            "--max-new-tokens",
            "24",
        ]);
        tokens(&out["rows"][0])
    };
    let (a, b, c) = (run("7"), run("7"), run("8"));
    assert_eq!(a, b, "the same seed must repeat the run");
    assert_ne!(a, c, "another seed should draw other tokens");
    let greedy = tokens(&generate_json(&["--prompt", "Once", "--max-new-tokens", "24"])["rows"][0]);
    assert_ne!(a, greedy, "sampling at temperature 1.5 should leave the greedy path");
}

#[test]
fn stop_string_ends_the_row_and_is_cut() {
    let full = generate_json(&["--prompt", "Tell", "--max-new-tokens", "24", "--top-k", "1"]);
    let text = full["rows"][0]["text"].as_str().unwrap().to_string();
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() >= 8, "too little text to pick a stop string from: {text:?}");
    let stop: String = chars[4..6].iter().collect();
    let want = &text[..text.find(&stop).unwrap()];
    let cut = generate_json(&["--prompt", "Tell", "--max-new-tokens", "24", "--stop", &stop]);
    let row = &cut["rows"][0];
    assert_eq!(row["text"].as_str().unwrap(), want, "text cut before {stop:?}");
    assert_eq!(row["finish_reason"], "stop");
    assert!(tokens(row).len() < tokens(&full["rows"][0]).len(), "generation stopped early");
    // Streamed text (no --json) is the same, followed by a newline.
    let m = model();
    let streamed = ok(
        &["generate", "--model", m.to_str().unwrap(), "--prompt", "Tell", "--max-new-tokens", "24", "--stop", &stop],
        None,
    );
    assert_eq!(streamed, format!("{want}\n"));
}

#[test]
fn chat_over_a_pipe_resets_and_exits() {
    let m = model();
    let m = m.to_str().unwrap();
    let out = ok(
        &["chat", "--model", m, "--max-new-tokens", "12"],
        Some("hello\nhow are you\n/reset\nhello\n/exit\nnever read\n"),
    );
    // Piped, an empty line separates the printed blocks (replies and the reset notice).
    assert_eq!(out.lines().filter(|l| l.is_empty()).count(), 3, "{out:?}");
    let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    let reset = lines.iter().position(|l| *l == "(conversation reset)").expect("/reset acknowledged");
    assert_eq!(reset, 2, "two replies before /reset: {out:?}");
    assert_eq!(lines.len(), 4, "one reply after /reset, nothing after /exit: {out:?}");
    assert_eq!(lines[3], lines[0], "after /reset the same first message gets the same reply");
    // The first reply is what `generate` gives for the rendered template.
    let one = ok(&["generate", "--model", m, "--chat", "--prompt", "hello", "--max-new-tokens", "12"], None);
    assert_eq!(format!("{}\n", lines[0]), one);
    // The second reply is the library's generation after the rendered two-turn conversation,
    // ending on EOS (`</s>`) or the template's end of turn (`<|im_end|>`).
    let tok = HfTokenizer::from_dir(model()).unwrap();
    let template = select_template(tok.config(), None).unwrap();
    let messages = [Message::user("hello"), Message::assistant(lines[0]), Message::user("how are you")];
    let text = render(template, &messages, true, &SpecialTokens::from_config(tok.config()), &Value::Null).unwrap();
    let ids = tok.encode(&text, false).unwrap();
    let end = vec![tok.token_to_id("</s>").unwrap(), tok.token_to_id("<|im_end|>").unwrap()];
    on_every_device("cli_chat_second_turn", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &model()).unwrap();
        let opts = GenerateOptions { eos: end.clone(), ..GenerateOptions::greedy(12) };
        let gen = generate(&g, &model, std::slice::from_ref(&ids), &opts, &mut |_, _| false).unwrap();
        assert_eq!(tok.decode(&gen.rows[0], true).unwrap(), lines[1], "second chat turn");
        Ok(())
    });
}

#[test]
fn bad_input_gets_a_clear_error() {
    let m = model();
    let m = m.to_str().unwrap();
    let missing = vkformers(&["generate", "--model", "/no/such/model", "--prompt", "x"], None);
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("/no/such/model"), "{err}");
    let long = "x".repeat(300);
    let too_long = vkformers(&["generate", "--model", m, "--prompt", &long], None);
    assert!(!too_long.status.success());
    let err = String::from_utf8_lossy(&too_long.stderr);
    assert!(err.contains("context is 256"), "{err}");
    let bad = vkformers(&["generate", "--model", m, "--prompt", "x", "--do-sample", "--top-p", "1.5"], None);
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("'--top-p <TOP_P>': must be in (0, 1]"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let bad = vkformers(&["generate", "--model", m, "--prompt", "x", "--do-sample", "--temperature", "0"], None);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("temperature"), "{}", String::from_utf8_lossy(&bad.stderr));
    let oov = vkformers(&["generate", "--model", m, "--prompt-ids", "1,128"], None);
    assert!(String::from_utf8_lossy(&oov.stderr).contains("outside the model's vocabulary of 128"));
    let ids = vkformers(&["generate", "--model", m, "--prompt-ids", "1,x"], None);
    assert!(String::from_utf8_lossy(&ids.stderr).contains("`x` is not a token id"));
}

#[test]
fn repeat_runs_the_same_generation_and_reports_each_run() {
    let args = ["--prompt-ids", "1,44,73,84,5", "--max-new-tokens", "6"];
    let once = generate_json(&args);
    let mut thrice_args = args.to_vec();
    thrice_args.extend_from_slice(&["--repeat", "3"]);
    let thrice = generate_json(&thrice_args);
    // Each run starts from an empty cache: the last run's tokens are the single run's.
    assert_eq!(tokens(&thrice["rows"][0]), tokens(&once["rows"][0]));
    assert_eq!(thrice["rows"].as_array().unwrap().len(), 1, "rows are reported once");
    let runs = thrice["runs"].as_array().expect("runs with --repeat");
    assert_eq!(runs.len(), 3);
    for r in runs {
        assert_eq!(r["prefill_tokens"], 5);
        assert_eq!(r["decode_tokens"], once["timings"]["decode_tokens"]);
        assert!(r["prefill_seconds"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(runs[2]["prefill_seconds"], thrice["timings"]["prefill_seconds"], "timings are the last run's");
    assert!(once.get("runs").is_none(), "one run reports no runs list");
    let m = model();
    let out = vkformers(
        &["generate", "--model", m.to_str().unwrap(), "--prompt-ids", "1,2", "--repeat", "2", "--profile"],
        None,
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--profile times one run"));
}
