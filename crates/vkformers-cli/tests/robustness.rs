//! What `vkformers` refuses, and what it leaves behind: a matrix of broken inputs, each run as
//! a user runs it, must exit non-zero with a message naming the culprit and leave no output
//! folder; and the outputs of good runs are complete, shareable (umask modes) and summarised.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn path(rel: &str) -> String {
    repo().join(rel).to_str().unwrap().to_string()
}

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vkformers"));
    cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let input = stdin.unwrap_or("").to_string();
    let mut pipe = child.stdin.take().unwrap();
    std::thread::spawn(move || std::io::Write::write_all(&mut pipe, input.as_bytes()));
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `args` and checks it failed, its message has every one of `culprit`, it printed no
/// Rust Debug text, and `out` (when given) was not created.
fn refused(case: &str, args: &[&str], culprit: &[&str], out: Option<&Path>) {
    let o = run(args, None);
    let err = stderr(&o);
    assert!(!o.status.success(), "{case}: exit 0\n{err}");
    for c in culprit {
        assert!(err.contains(c), "{case}: the message does not name `{c}`:\n{err}");
    }
    for debug in ["Some(", "Names(", "Regex(", "String(", "Os {"] {
        assert!(!err.contains(debug), "{case}: Rust Debug text in the message:\n{err}");
    }
    if let Some(out) = out {
        assert!(!out.exists(), "{case}: {} was left behind", out.display());
    }
}

/// `train` on the tiny Llama with the training fixture's rows, one step, into `out`.
fn train_args<'a>(model: &'a str, data: &'a str, out: &'a str) -> Vec<&'a str> {
    vec!["train", "--model", model, "--data", data, "--out", out, "--max-steps", "1", "--batch-size", "2"]
}

fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(extra).copied().collect()
}

/// A copy of a fixture folder to break.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Out-of-range hyper-parameters, refused when the command line is parsed: the message names
/// the flag and the allowed range, and nothing is written.
#[test]
fn out_of_range_flags_are_refused_naming_the_flag_and_range() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (model, data, o) =
        (path("tests/fixtures/llama"), path("tests/fixtures_train/rows.jsonl"), out.to_str().unwrap());
    // Without train_args' --max-steps and --batch-size, which the cases set themselves.
    let train = train_args(&model, &data, o)[..7].to_vec();
    let finetune = with(&["finetune"], &train[1..]);
    let gen = ["generate", "--model", &model, "--prompt-ids", "1,2"];
    let eval = ["eval", "--model", &model, "--data", &data];
    let chat = ["chat", "--model", &model];
    let cases: Vec<(Vec<&str>, [&str; 2])> = vec![
        (with(&train, &["--batch-size", "0"]), ["--batch-size", "at least 1"]),
        (with(&train, &["--grad-accum", "0"]), ["--grad-accum", "at least 1"]),
        (with(&train, &["--max-steps", "0"]), ["--max-steps", "at least 1"]),
        (with(&train, &["--epochs", "0"]), ["--epochs", "at least 1"]),
        (with(&train, &["--seq-len", "0"]), ["--seq-len", "at least 1"]),
        (with(&train, &["--beta1", "2"]), ["--beta1", "[0, 1)"]),
        (with(&train, &["--beta2", "1"]), ["--beta2", "[0, 1)"]),
        (with(&train, &["--eps=-1"]), ["--eps", "greater than 0"]),
        (with(&train, &["--eps", "0"]), ["--eps", "greater than 0"]),
        (with(&train, &["--weight-decay=-5"]), ["--weight-decay", "0 or more"]),
        (with(&train, &["--max-grad-norm=-1"]), ["--max-grad-norm", "0 or more"]),
        (with(&train, &["--lr", "-1e-4"]), ["--lr", "0 or more"]),
        (with(&train, &["--lr", "nan"]), ["--lr", "finite"]),
        (with(&train, &["--min-lr", "-1"]), ["--min-lr", "0 or more"]),
        (with(&train, &["--eval-split", "1"]), ["--eval-split", "[0, 1)"]),
        (with(&finetune, &["--batch-size", "0"]), ["--batch-size", "at least 1"]),
        (with(&finetune, &["--lora-rank", "0"]), ["--lora-rank", "at least 1"]),
        (with(&finetune, &["--lora-dropout", "1"]), ["--lora-dropout", "[0, 1)"]),
        (with(&finetune, &["--lora-dropout", "-0.1"]), ["--lora-dropout", "[0, 1)"]),
        (with(&finetune, &["--lora-alpha", "0"]), ["--lora-alpha", "greater than 0"]),
        (with(&eval, &["--batch-size", "0"]), ["--batch-size", "at least 1"]),
        (with(&eval, &["--seq-len", "0"]), ["--seq-len", "at least 1"]),
        (with(&gen, &["--temperature", "-1"]), ["--temperature", "0 or more"]),
        (with(&gen, &["--top-p", "0"]), ["--top-p", "(0, 1]"]),
        (with(&gen, &["--top-p", "1.5"]), ["--top-p", "(0, 1]"]),
        (with(&gen, &["--top-k", "-1"]), ["--top-k", "0 or more"]),
        (with(&gen, &["--min-p", "2"]), ["--min-p", "[0, 1]"]),
        (with(&gen, &["--repetition-penalty", "0"]), ["--repetition-penalty", "greater than 0"]),
        (with(&gen, &["--max-new-tokens", "0"]), ["--max-new-tokens", "at least 1"]),
        (with(&gen, &["--max-batch", "0"]), ["--max-batch", "at least 1"]),
        (with(&chat, &["--temperature", "-0.5"]), ["--temperature", "0 or more"]),
        (with(&chat, &["--top-k", "-3"]), ["--top-k", "0 or more"]),
    ];
    for (args, culprit) in &cases {
        refused(&args[5..].join(" "), args, culprit, Some(&out));
    }
}

/// `--out` must not be the model, a file, or a folder of someone else's files.
#[test]
fn unsafe_output_folders_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    copy_dir(&repo().join("tests/fixtures/llama"), &model);
    let before = std::fs::read(model.join("model.safetensors")).unwrap();
    let data = path("tests/fixtures_train/rows.jsonl");
    let m = model.to_str().unwrap();
    refused("train --out = --model", &train_args(m, &data, m), &["--out", "--model", "--overwrite-output-dir"], None);
    let ft = with(&["finetune"], &train_args(m, &data, m)[1..]);
    refused("finetune --out = --model", &ft, &["--out", "--model"], None);
    let notes = tmp.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("thesis.txt"), "mine").unwrap();
    let n = notes.to_str().unwrap();
    refused("foreign --out", &train_args(m, &data, n), &[n, "--overwrite-output-dir"], None);
    assert_eq!(std::fs::read_dir(&notes).unwrap().count(), 1, "the foreign folder is untouched");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    refused("--out is a file", &train_args(m, &data, file.to_str().unwrap()), &["a-file", "is a file"], None);
    assert_eq!(std::fs::read(model.join("model.safetensors")).unwrap(), before, "the model is untouched");
}

/// Broken inputs found after parsing: each names its culprit and leaves no `--out`.
#[test]
fn broken_inputs_leave_no_output_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = out.to_str().unwrap();
    let (llama, data) = (path("tests/fixtures/llama"), path("tests/fixtures_train/rows.jsonl"));
    let empty = tmp.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let e = empty.to_str().unwrap();
    refused("missing data", &train_args(&llama, "/no/such/data.jsonl", o), &["/no/such/data.jsonl"], Some(&out));
    refused("empty data", &train_args(&llama, e, o), &["empty.jsonl", "no rows"], Some(&out));
    refused("missing model", &train_args("/no/such/model", &data, o), &["/no/such/model"], Some(&out));
    // A learned position table has no rows past n_positions (64).
    let gpt2 = path("tests/fixtures/gpt2");
    refused(
        "gpt2 --seq-len 65",
        &with(&train_args(&gpt2, &data, o), &["--seq-len", "65"]),
        &["--seq-len 65", "64"],
        Some(&out),
    );
    let eval = ["eval", "--model", &gpt2, "--data", &data, "--seq-len", "65"];
    refused("eval gpt2 --seq-len 65", &eval, &["--seq-len 65", "64"], None);
    // The target-module error shows the targets as written, not Rust's Debug form.
    let ft = with(&["finetune"], &with(&train_args(&llama, &data, o), &["--target-modules", "nope_proj"])[1..]);
    refused("unknown target module", &ft, &["target_modules nope_proj", "q_proj"], Some(&out));
    let adapter = tmp.path().join("ia3");
    copy_dir(&repo().join("tests/fixtures_lora/llama"), &adapter);
    let cfg = std::fs::read_to_string(adapter.join("adapter_config.json")).unwrap().replace("\"LORA\"", "\"IA3\"");
    std::fs::write(adapter.join("adapter_config.json"), cfg).unwrap();
    let a = adapter.to_str().unwrap();
    refused(
        "IA3 adapter",
        &["eval", "--model", &llama, "--adapter", a, "--data", &data],
        &["peft_type is \"IA3\""],
        None,
    );
    // A decoder sequence classifier (`score` on each row's last token): no such head is built,
    // so LoRA on `score` is refused naming the head, not as missing/unexpected tensors.
    let cls = tmp.path().join("llama_seqcls");
    copy_dir(Path::new(&llama), &cls);
    let cfg = std::fs::read_to_string(cls.join("config.json")).unwrap();
    std::fs::write(cls.join("config.json"), cfg.replace("LlamaForCausalLM", "LlamaForSequenceClassification")).unwrap();
    let ft = with(&["finetune"], &with(&train_args(cls.to_str().unwrap(), &data, o), &["--lora-dropout", "0.3"])[1..]);
    refused(
        "decoder classifier",
        &with(&ft, &["--target-modules", "q_proj,score"]),
        &["the `LlamaForSequenceClassification` head on the `llama` model"],
        Some(&out),
    );
}

/// A config.json (or generation_config.json) far over any real one is refused before it is
/// read, naming the file, its size and the limit (a sparse file: the test reads nothing).
#[test]
fn oversized_json_files_are_refused_before_reading() {
    let tmp = tempfile::tempdir().unwrap();
    let data = path("tests/fixtures_train/rows.jsonl");
    for file in ["config.json", "generation_config.json"] {
        let model = tmp.path().join(file);
        copy_dir(&repo().join("tests/fixtures_generate/cli_model"), &model);
        std::fs::File::create(model.join(file)).unwrap().set_len(69 << 20).unwrap();
        let m = model.to_str().unwrap();
        let want = [file, "72351744 bytes", "16 MiB limit"];
        refused(&format!("generate, huge {file}"), &["generate", "--model", m, "--prompt-ids", "1"], &want, None);
        if file == "config.json" {
            refused("eval, huge config.json", &["eval", "--model", m, "--data", &data], &want, None);
        }
    }
}

/// A folder whose final save was interrupted (the marker is still there) is refused by every
/// command that loads a model.
#[test]
fn an_interrupted_save_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    copy_dir(&repo().join("tests/fixtures_generate/cli_model"), &model);
    std::fs::write(model.join(".vkformers-incomplete"), "").unwrap();
    let (m, data) = (model.to_str().unwrap(), path("tests/fixtures_train/rows.jsonl"));
    let out = tmp.path().join("out");
    let want = ["interrupted", m];
    refused("generate", &["generate", "--model", m, "--prompt-ids", "1"], &want, None);
    refused("eval", &["eval", "--model", m, "--data", &data], &want, None);
    refused("train", &train_args(m, &data, out.to_str().unwrap()), &want, Some(&out));
}

/// A run that fails after it started writing takes back the empty metrics.jsonl and the
/// folder it created (here: weights that are NaN, so step 1's loss is not finite).
#[test]
fn a_failed_run_leaves_no_empty_folder_or_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("nan");
    copy_dir(&repo().join("tests/fixtures/llama"), &model);
    let w = vkformers_io::ModelWeights::open(&model).unwrap();
    let tensors: Vec<(String, Vec<usize>, Vec<f32>)> = w
        .tensors()
        .into_iter()
        .map(|t| {
            let n = t.shape.iter().product();
            (t.name, t.shape, vec![f32::NAN; n])
        })
        .collect();
    drop(w);
    let save: Vec<_> = tensors
        .iter()
        .map(|(n, s, d)| vkformers_io::SaveTensor::f32(n.clone(), vkformers_io::Dtype::F32, s, d))
        .collect();
    vkformers_io::save_safetensors(&model, &save, u64::MAX).unwrap();
    let out = tmp.path().join("out");
    let data = path("tests/fixtures_train/rows.jsonl");
    refused("NaN weights", &train_args(model.to_str().unwrap(), &data, out.to_str().unwrap()), &["step 1"], Some(&out));
}

/// A good run into its own folder: leftovers of a killed run are cleaned, the final files are
/// complete (no marker, no temporary folder) with umask modes, `--json` sums the run up, and
/// `--resume` into the folder is accepted. `--seq-len` past a RoPE model's
/// max_position_embeddings is a warning.
#[test]
fn a_run_into_its_own_folder_cleans_up_and_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("metrics.jsonl"), "").unwrap();
    std::fs::write(out.join(".model.safetensors.a1b2.tmp"), "partial").unwrap();
    std::fs::create_dir(out.join(".final.tmp")).unwrap();
    std::fs::write(out.join("model-00002-of-00002.safetensors"), "stale shard").unwrap();
    let (model, data) = (path("tests/fixtures/llama"), path("tests/fixtures_train/rows.jsonl"));
    let args =
        with(&train_args(&model, &data, out.to_str().unwrap()), &["--json", "--seq-len", "80", "--save-every", "1"]);
    let o = run(&args, None);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("warning: --seq-len 80 is longer than the model's max_position_embeddings (64)"), "{err}");
    assert_eq!(err.matches("training llama").count(), 1, "one header line:\n{err}");
    assert!(err.contains("1 step,") && !err.contains("1 steps"), "{err}");
    assert!(err.contains("peak device memory"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for key in ["steps", "final_loss", "tokens", "tokens_per_s", "peak_device_bytes"] {
        assert!(!v[key].is_null(), "--json has no {key}: {v}");
    }
    assert_eq!(v["steps"], 1);
    let mut names: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["checkpoint-1", "config.json", "generation_config.json", "metrics.jsonl", "model.safetensors"]);
    let umask = u32::from_str_radix(
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .unwrap()
            .trim(),
        8,
    )
    .unwrap();
    for f in ["config.json", "model.safetensors", "metrics.jsonl"] {
        let mode = std::fs::metadata(out.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !umask, "{f}: mode {mode:o}");
    }
    // Resuming into the run's own folder is accepted (it holds our checkpoint and metrics).
    let resume = with(&train_args(&model, &data, out.to_str().unwrap()), &["--resume", out.to_str().unwrap()]);
    let o = run(&resume, None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("resumed from"), "{}", stderr(&o));
}

/// `finetune --help` lists only what fine-tuning uses.
#[test]
fn finetune_help_has_no_pretraining_options() {
    let help = String::from_utf8(run(&["finetune", "--help"], None).stdout).unwrap();
    assert!(help.contains("--lora-rank") && help.contains("--overwrite-output-dir"), "{help}");
    for flag in ["--init-from-config", "--train-tokenizer", "--tokenizer "] {
        assert!(!help.contains(flag), "finetune --help lists {flag}");
    }
    let help = String::from_utf8(run(&["train", "--help"], None).stdout).unwrap();
    assert!(help.contains("--init-from-config") && help.contains("--json"), "{help}");
}

/// Streamed `generate` ends its output with a newline.
#[test]
fn streamed_generate_ends_with_a_newline() {
    let m = path("tests/fixtures_generate/cli_model");
    let o = run(&["generate", "--model", &m, "--prompt", "hello", "--max-new-tokens", "3"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout.ends_with(b"\n"), "{:?}", String::from_utf8_lossy(&o.stdout));
}

/// `merge-lora` says the base folder was left as it was and where the merged model went.
#[test]
fn merge_lora_says_where_the_model_went() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("merged");
    let (m, a) = (path("tests/fixtures/llama"), path("tests/fixtures_lora/llama"));
    let o = run(&["merge-lora", "--model", &m, "--adapter", &a, "--out", out.to_str().unwrap()], None);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(text.contains("left unchanged") && text.contains(out.to_str().unwrap()), "{text}");
}

/// `bench gemm` prints GFLOP/s where the rate is under 1 TFLOP/s (not "0.0 TFLOP/s").
#[test]
fn bench_gemm_prints_gflops_when_slow() {
    let o = run(&["bench", "gemm", "--m", "64", "--n", "64", "--k", "64", "--dtype", "f32", "--iters", "2"], None);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!text.contains("0.0 TFLOP/s"), "{text}");
    assert!(text.contains("FLOP/s"), "{text}");
}

/// `merge-lora` never writes into the base model or the adapter it reads.
#[test]
fn merge_lora_refuses_to_write_into_its_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    copy_dir(&repo().join("tests/fixtures/llama"), &model);
    let before = std::fs::read(model.join("model.safetensors")).unwrap();
    let (m, a) = (model.to_str().unwrap(), path("tests/fixtures_lora/llama"));
    refused(
        "merge into the base",
        &["merge-lora", "--model", m, "--adapter", &a, "--out", m],
        &["--out", "input folder"],
        None,
    );
    refused(
        "merge into the adapter",
        &["merge-lora", "--model", m, "--adapter", &a, "--out", &a],
        &["--out", "input folder"],
        None,
    );
    assert_eq!(std::fs::read(model.join("model.safetensors")).unwrap(), before, "the base is untouched");
}

/// `finetune` says what it does in one header line (not `train`'s and its own), in the singular
/// where there is one of something.
#[test]
fn finetune_prints_one_header_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("adapter");
    let (model, data) = (path("tests/fixtures/llama"), path("tests/fixtures_train/rows.jsonl"));
    let args = with(&["finetune"], &train_args(&model, &data, out.to_str().unwrap())[1..]);
    let o = run(&with(&args, &["--target-modules", "model.layers.0.self_attn.q_proj"]), None);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.matches("fine-tuning llama").count(), 1, "{err}");
    assert!(!err.contains("training llama"), "a second header:\n{err}");
    assert!(err.contains("on 1 module (") && err.contains(", 1 step,"), "{err}");
    assert!(out.join("adapter_model.safetensors").is_file() && !out.join(".vkformers-incomplete").exists());
}

/// On a terminal, `eval` shows a progress bar of the rows (run under `script`, which gives the
/// command a pseudo-terminal; skipped where it is missing). Piped, it prints none.
#[test]
fn eval_shows_progress_on_a_terminal_only() {
    let (model, data) = (path("tests/fixtures/llama"), path("tests/fixtures_train/rows.jsonl"));
    let cmd = format!("{} eval --model {model} --data {data} --batch-size 1", env!("CARGO_BIN_EXE_vkformers"));
    let Ok(o) = Command::new("script").args(["-qec", &cmd, "/dev/null"]).stdin(Stdio::null()).output() else { return };
    let tty = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{tty}");
    assert!(tty.contains("4/4 rows"), "{tty}");
    let piped = run(&["eval", "--model", &model, "--data", &data, "--batch-size", "1"], None);
    assert!(piped.status.success() && !stderr(&piped).contains("rows ["), "{}", stderr(&piped));
}

/// `vkformers eval ... | head -n 3` in the demo: a reader that stops early must end the printer
/// as it ends `ls`, by SIGPIPE, never with a panic (exit 101) and a backtrace. The read end is
/// closed before the child writes, so every run hits the closed pipe.
#[test]
fn a_closed_stdout_ends_a_printing_command_quietly() {
    use std::os::unix::process::ExitStatusExt as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .arg("devices")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.signal(), Some(13), "want SIGPIPE, got {:?}: {err}", out.status);
}
