//! `vkformers generate` on encoder-decoder fixture folders (`tests/fixtures/{t5,bart}`): the
//! token ids it prints are transformers' `generate` sequences (`greedy_seq2seq.json`) without
//! the decoder's start token, and what it cannot do yet is refused by name.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

fn vkformers(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vkformers")).args(args).output().expect("run vkformers")
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Token ids as the `--prompt-ids` flag takes them: `"5,6,7"`.
fn prompt_arg(v: &Value) -> String {
    let text: Vec<String> = ids(v).iter().map(u64::to_string).collect();
    text.join(",")
}

/// The JSON a `--json` run printed, after checking it succeeded (`what` names it on failure).
fn json_out(out: &Output, what: &str) -> Value {
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// An encoder-decoder sequence (start token first) as the CLI prints its new tokens: without the
/// start token, up to and with the first EOS after it.
fn new_tokens_to_eos(seq: &[u64], eos: u64) -> Vec<u64> {
    let end = seq.iter().skip(1).position(|&t| t == eos).map_or(seq.len(), |p| p + 2);
    seq[1..end].to_vec()
}

/// The flags of one beam reference run's `options` (`early_stopping` true, false or "never").
fn beam_flags(o: &Value) -> Vec<String> {
    let early = o["early_stopping"].as_str().map_or_else(|| o["early_stopping"].to_string(), str::to_string);
    let mut flags = Vec::new();
    for (flag, value) in [
        ("--num-beams", o["num_beams"].to_string()),
        ("--length-penalty", o["length_penalty"].to_string()),
        ("--early-stopping", early),
        ("--no-repeat-ngram-size", o["no_repeat_ngram_size"].to_string()),
        ("--num-return-sequences", o["num_return_sequences"].to_string()),
    ] {
        flags.extend([flag.to_string(), value]);
    }
    flags
}

/// `vkformers generate --json` on `dir` for one prompt with the beam options `o`.
fn generate_beams(dir: &Path, prompt: &str, max_new_tokens: &Value, o: &Value) -> Output {
    let max = max_new_tokens.to_string();
    let mut args = vec!["generate", "--model", dir.to_str().unwrap(), "--prompt-ids", prompt, "--max-new-tokens", &max];
    let flags = beam_flags(o);
    args.extend(flags.iter().map(String::as_str));
    args.push("--json");
    vkformers(&args)
}

#[test]
fn generate_prints_transformers_sequences_for_t5_and_bart() {
    for name in ["t5", "bart"] {
        let dir = fixture(name);
        let want = read_json(&dir.join("greedy_seq2seq.json"));
        let rows = want["rows"].as_array().unwrap();
        let file = std::env::temp_dir().join(format!("vkformers-s2s-{name}-{}.jsonl", std::process::id()));
        let lines: Vec<String> =
            rows.iter().map(|r| serde_json::json!({"input_ids": r["input_ids"]}).to_string()).collect();
        std::fs::write(&file, lines.join("\n")).unwrap();
        let out = vkformers(&[
            "generate",
            "--model",
            dir.to_str().unwrap(),
            "--prompt-ids-file",
            file.to_str().unwrap(),
            "--max-new-tokens",
            &want["max_new_tokens"].to_string(),
            "--json",
        ]);
        let _ = std::fs::remove_file(&file);
        let got = json_out(&out, name);
        for (r, g) in rows.iter().zip(got["rows"].as_array().unwrap()) {
            assert_eq!(ids(&g["token_ids"]), ids(&r["sequences"])[1..].to_vec(), "{name}: {}", r["input_ids"]);
        }
    }
}

/// The new token ids `vkformers generate --json` prints for one prompt with `extra` flags.
fn new_ids(name: &str, prompt: &str, extra: &[&str]) -> Vec<u64> {
    let dir = fixture(name);
    let mut args = vec!["generate", "--model", dir.to_str().unwrap(), "--prompt-ids", prompt, "--json"];
    args.extend_from_slice(extra);
    let got = json_out(&vkformers(&args), &format!("{name} {extra:?}"));
    ids(&got["rows"][0]["token_ids"])
}

/// Sampling an encoder-decoder: a seed repeats the run, top-k 1 is greedy, a hot temperature
/// leaves the greedy path for some seed; beams with sampling are refused by name.
#[test]
fn sampling_an_encoder_decoder_is_seeded() {
    let (name, prompt, n) = ("bart", "5,6,7,9,11", "12");
    let greedy = new_ids(name, prompt, &["--max-new-tokens", n]);
    let top1 = new_ids(name, prompt, &["--max-new-tokens", n, "--do-sample", "--top-k", "1", "--seed", "3"]);
    assert_eq!(top1, greedy);
    let hot = |seed: &str| {
        new_ids(
            name,
            prompt,
            &["--max-new-tokens", n, "--do-sample", "--temperature", "3", "--top-k", "0", "--seed", seed],
        )
    };
    assert_eq!(hot("1"), hot("1"), "the same seed draws the same tokens");
    assert!(["1", "2", "3"].iter().any(|s| hot(s) != greedy), "a temperature of 3 never left the greedy tokens");
    let dir = fixture(name);
    let out = vkformers(&[
        "generate",
        "--model",
        dir.to_str().unwrap(),
        "--prompt-ids",
        prompt,
        "--do-sample",
        "--num-beams",
        "2",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("beam sampling is not supported"));
}

#[test]
fn beam_flags_give_transformers_beams() {
    let dir = fixture("bart");
    let want = read_json(&dir.join("beam_seq2seq.json"));
    // The second setting: 4 beams, length penalty 0.6, early stopping, no repeated 2-grams, 2 returned.
    let run = &want["runs"][1];
    let o = &run["options"];
    let row = &run["rows"][1];
    let out = generate_beams(&dir, &prompt_arg(&row["input_ids"]), &want["max_new_tokens"], o);
    let got = json_out(&out, "bart beams");
    let got = got["rows"].as_array().unwrap();
    let seqs = row["sequences"].as_array().unwrap();
    assert_eq!(got.len(), seqs.len());
    for (g, s) in got.iter().zip(seqs) {
        // transformers' sequence without its start token, cut after EOS (id 2 in this fixture).
        assert_eq!(ids(&g["token_ids"]), new_tokens_to_eos(&ids(s), 2));
    }
}

#[test]
fn beam_flags_on_a_decoder_give_transformers_beams() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_generate/beam/llama.json");
    let want = read_json(&path);
    // The llama fixture with the EOS and pad ids the reference generated with.
    let dir = std::env::temp_dir().join(format!("vkformers-beam-llama-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture("llama").join(f), dir.join(f)).unwrap();
    }
    let gen = serde_json::json!({"eos_token_id": want["eos_token_id"], "pad_token_id": want["pad_token_id"]});
    std::fs::write(dir.join("generation_config.json"), gen.to_string()).unwrap();
    // The third setting: 3 beams, length penalty 2, early_stopping "never", no repeated 3-grams, 3 returned.
    let run = &want["runs"][2];
    let (o, row) = (&run["options"], &run["rows"][0]);
    let prompt = ids(&row["input_ids"]);
    let out = generate_beams(&dir, &prompt_arg(&row["input_ids"]), &want["max_new_tokens"], o);
    let _ = std::fs::remove_dir_all(&dir);
    let got = json_out(&out, "llama beams");
    let got = got["rows"].as_array().unwrap();
    let seqs = row["sequences"].as_array().unwrap();
    assert_eq!(got.len(), seqs.len());
    let eos = want["eos_token_id"].as_u64().unwrap();
    for (g, s) in got.iter().zip(seqs) {
        // The new tokens, cut after the first EOS, as the CLI prints them.
        let s = ids(s)[prompt.len()..].to_vec();
        let end = s.iter().position(|&t| t == eos).map_or(s.len(), |i| i + 1);
        assert_eq!(ids(&g["token_ids"]), s[..end].to_vec());
    }
}

/// `--source-lang/--target-lang` on multilingual folders (the `mbart` fixture with an mBART
/// tokenizer, the `m2m_100` fixture with an NLLB one): the text sources carry the language token
/// as transformers' tokenizer places it and the generated ids equal `generate(...,
/// forced_bos_token_id=<target language>)` (tests/fixtures_train/seq2seq/lang/generate.json,
/// tools/parity/seq2seq_lang_reference.py).
#[test]
fn language_flags_give_transformers_translation_ids() {
    let lang = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_train/seq2seq/lang");
    let want = read_json(&lang.join("generate.json"));
    for run in want["runs"].as_array().unwrap() {
        let (fix, tokn) = (run["fixture"].as_str().unwrap(), run["tokenizer"].as_str().unwrap());
        let dir = std::env::temp_dir().join(format!("vkformers-lang-{fix}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["config.json", "generation_config.json", "model.safetensors"] {
            std::fs::copy(fixture(fix).join(f), dir.join(f)).unwrap();
        }
        for f in ["tokenizer.json", "tokenizer_config.json"] {
            std::fs::copy(lang.join(format!("{tokn}_tokenizer")).join(f), dir.join(f)).unwrap();
        }
        let rows = run["rows"].as_array().unwrap();
        let prompts: Vec<&str> = rows.iter().map(|r| r["source"].as_str().unwrap()).collect();
        std::fs::write(dir.join("prompts.txt"), prompts.join("\n")).unwrap();
        let out = vkformers(&[
            "generate",
            "--model",
            dir.to_str().unwrap(),
            "--prompt-file",
            dir.join("prompts.txt").to_str().unwrap(),
            "--source-lang",
            run["source_lang"].as_str().unwrap(),
            "--target-lang",
            run["target_lang"].as_str().unwrap(),
            "--max-new-tokens",
            &run["max_new_tokens"].to_string(),
            "--json",
        ]);
        let _ = std::fs::remove_dir_all(&dir);
        let got = json_out(&out, fix);
        for (r, g) in rows.iter().zip(got["rows"].as_array().unwrap()) {
            assert_eq!(ids(&g["prompt_ids"]), ids(&r["input_ids"]), "{fix}: {}", r["source"]);
            let seq = ids(&r["sequences"]);
            assert_eq!(seq[1], run["forced_bos_token_id"].as_u64().unwrap());
            assert_eq!(ids(&g["token_ids"]), seq[1..].to_vec(), "{fix}: {}", r["source"]);
        }
    }
}

/// `--adapter` on t5 and bart: the PEFT LoRA adapters of tests/fixtures_lora, unmerged, give
/// `PeftModel.generate`'s sequences, which differ from the base model's
/// (tools/parity/seq2seq_lora_generate_reference.py).
#[test]
fn adapters_give_peft_sequences() {
    for name in ["t5", "bart"] {
        let lora = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_lora").join(name);
        let want = read_json(&lora.join("greedy_seq2seq.json"));
        let config = read_json(&fixture(name).join("config.json"));
        let eos = config["eos_token_id"].as_u64().unwrap();
        for r in want["rows"].as_array().unwrap() {
            assert_ne!(r["sequences"], r["base_sequences"], "{name}: the adapter must change the output");
            let prompt = prompt_arg(&r["input_ids"]);
            let out = vkformers(&[
                "generate",
                "--model",
                fixture(name).to_str().unwrap(),
                "--adapter",
                lora.to_str().unwrap(),
                "--prompt-ids",
                &prompt,
                "--max-new-tokens",
                &want["max_new_tokens"].to_string(),
                "--json",
            ]);
            let got = json_out(&out, name);
            let want = new_tokens_to_eos(&ids(&r["sequences"]), eos);
            assert_eq!(ids(&got["rows"][0]["token_ids"]), want, "{name}: {}", r["input_ids"]);
        }
    }
}

/// `--repetition-penalty` over the decoder ids (start token included) gives transformers'
/// sequences on t5 and bart for penalties 1.5 and 0.7 (tests/fixtures_train/seq2seq/
/// repetition.json, tools/parity/seq2seq_generate_reference.py; on bart they differ from the
/// unpenalised ones, and 0.7 ends at once on the boosted start/EOS token).
#[test]
fn repetition_penalty_gives_transformers_sequences() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_train/seq2seq/repetition.json");
    let want = read_json(&path);
    let mut changed = 0;
    for run in want["runs"].as_array().unwrap() {
        let name = run["fixture"].as_str().unwrap();
        let eos = read_json(&fixture(name).join("config.json"))["eos_token_id"].as_u64().unwrap();
        for r in run["rows"].as_array().unwrap() {
            changed += usize::from(r["sequences"] != r["plain_sequences"]);
            let prompt = prompt_arg(&r["input_ids"]);
            let flags = [
                "--max-new-tokens",
                &run["max_new_tokens"].to_string(),
                "--repetition-penalty",
                &run["repetition_penalty"].to_string(),
            ];
            let got = new_ids(name, &prompt, &flags);
            let want = new_tokens_to_eos(&ids(&r["sequences"]), eos);
            assert_eq!(got, want, "{name} penalty {}: {}", run["repetition_penalty"], r["input_ids"]);
        }
    }
    assert!(changed >= 4, "the penalties must change some sequences ({changed})");
}
