//! `vkformers train --resume`: a run stopped after its step-3 checkpoint (its later outputs
//! gone, as after a kill) and resumed gives the straight 6-step run's weights and loss log.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The arguments every `vkformers train` run here starts with: the llama fixture on the
/// training rows, into `out`.
fn llama_train_args(out: &Path) -> Vec<String> {
    let model = repo().join("tests/fixtures/llama");
    let data = repo().join("tests/fixtures_train/rows.jsonl");
    let [model, data, out] = [model.as_path(), data.as_path(), out].map(|p| p.to_str().unwrap().to_string());
    ["train", "--model", &model, "--data", &data, "--out", &out].map(String::from).to_vec()
}

/// Runs `vkformers train` on the llama fixture; `extra` adds options or replaces the value of
/// one already given.
fn run_train(out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = llama_train_args(out);
    let schedule = [
        "--max-steps",
        "6",
        "--batch-size",
        "1",
        "--grad-accum",
        "2",
        "--lr",
        "2e-3",
        "--schedule",
        "cosine",
        "--warmup-steps",
        "2",
        "--weight-decay",
        "0.1",
        "--max-grad-norm",
        "0.5",
        "--seed",
        "3",
    ];
    args.extend(schedule.map(String::from));
    let mut i = 0;
    while i < extra.len() {
        let has_value = extra.get(i + 1).is_some_and(|v| !v.starts_with("--"));
        match args.iter().position(|a| a == extra[i]) {
            Some(at) if has_value => args[at + 1] = extra[i + 1].to_string(),
            _ => args.extend(extra[i..i + 1 + usize::from(has_value)].iter().map(|a| a.to_string())),
        }
        i += 1 + usize::from(has_value);
    }
    Command::new(env!("CARGO_BIN_EXE_vkformers")).args(&args).output().unwrap()
}

/// Trains and returns stderr; the run must succeed.
fn train(out: &Path, extra: &[&str]) -> String {
    let r = run_train(out, extra);
    let err = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(r.status.success(), "{err}");
    err
}

/// metrics.jsonl without the timing and memory fields (measurements of the run, not its state).
fn losses(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("tokens_per_s");
            v.as_object_mut().unwrap().remove("device_memory_peak_bytes");
            v
        })
        .collect()
}

#[test]
fn resumed_training_equals_straight_training() {
    let straight = tempfile::tempdir().unwrap();
    train(straight.path(), &[]);
    let resumed = tempfile::tempdir().unwrap();
    train(resumed.path(), &["--save-every", "3"]);
    // Keep only what existed right after the step-3 checkpoint (the log keeps later lines,
    // which the resume must drop).
    for f in ["checkpoint-6", "model.safetensors", "config.json"] {
        let p = resumed.path().join(f);
        if p.is_dir() {
            std::fs::remove_dir_all(p).unwrap()
        } else {
            std::fs::remove_file(p).unwrap()
        }
    }
    train(resumed.path(), &["--save-every", "3", "--resume", resumed.path().to_str().unwrap()]);
    assert_eq!(losses(resumed.path()), losses(straight.path()), "the same metrics, step for step");
    let a = vkformers_io::ModelWeights::open(straight.path()).unwrap();
    let b = vkformers_io::ModelWeights::open(resumed.path()).unwrap();
    let mut worst = 0.0f32;
    for n in a.names() {
        let (x, y) = (a.tensor_f32(n).unwrap(), b.tensor_f32(n).unwrap());
        worst = x.iter().zip(&y).map(|(p, q)| (p - q).abs()).fold(worst, f32::max);
    }
    assert!(worst <= 1e-6, "weights differ by {worst}");
}

/// A run killed (SIGKILL) at some point after its first checkpoints, checkpointing every step,
/// resumes from whatever it left: never a checkpoint it cannot read, and one log line per step.
#[test]
fn a_killed_run_resumes_from_what_it_left() {
    let out = tempfile::tempdir().unwrap();
    let args = |resume: bool| {
        let mut a = llama_train_args(out.path());
        let every_step = ["--max-steps", "40", "--batch-size", "2", "--save-every", "1", "--keep-checkpoints", "2"];
        a.extend(every_step.map(String::from));
        if resume {
            a.extend(["--resume".to_string(), out.path().display().to_string()]);
        }
        a
    };
    let newest = || vkformers_train::checkpoint::list_checkpoints(out.path()).last().map_or(0, |c| c.0);
    let mut killed = 0;
    for delay_ms in [0u64, 7, 23] {
        let before = newest();
        let mut child = Command::new(env!("CARGO_BIN_EXE_vkformers"))
            .args(args(delay_ms > 0))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait until this run has written a checkpoint, then kill it somewhere in the next
        // steps and checkpoint writes.
        let start = std::time::Instant::now();
        while newest() <= before {
            assert!(start.elapsed().as_secs() < 120, "no checkpoint written");
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        if !child.wait().unwrap().success() {
            killed += 1;
        }
        for (_, cp) in vkformers_train::checkpoint::list_checkpoints(out.path()) {
            vkformers_train::checkpoint::read_state(&cp).unwrap();
        }
    }
    assert!(killed >= 2, "only {killed} run(s) were killed before finishing");
    let r = Command::new(env!("CARGO_BIN_EXE_vkformers")).args(args(true)).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let steps: Vec<u64> = losses(out.path()).iter().map(|v| v["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, (1..=40).collect::<Vec<_>>(), "one metrics line per step");
    assert!(out.path().join("model.safetensors").exists());
}

/// Overwrites the last `n` bytes of a file with NaN bit patterns (the size is unchanged).
fn corrupt_tail(path: &Path, n: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    let len = bytes.len();
    bytes[len - n..].fill(0xFF);
    std::fs::write(path, bytes).unwrap();
}

/// A checkpoint damaged after it was written (garbage of the right size, or truncated) is
/// detected by its checksums: the resume falls back to the previous intact one, naming the bad
/// one, and continues to the same result; with none intact it fails with a clear error.
#[test]
fn damaged_checkpoints_fall_back_to_the_previous_one() {
    let out = tempfile::tempdir().unwrap();
    train(out.path(), &["--save-every", "3"]);
    let straight = losses(out.path());
    let optimizer = out.path().join("checkpoint-6/optimizer/model.safetensors");
    corrupt_tail(&optimizer, 64);
    let resume = ["--save-every", "3", "--resume", out.path().to_str().unwrap()];
    let err = train(out.path(), &resume);
    assert!(err.contains("checkpoint-6") && err.contains("SHA-256"), "no warning naming checkpoint-6: {err}");
    assert!(err.contains("resumed from") && err.contains("checkpoint-3"), "{err}");
    assert_eq!(losses(out.path()), straight, "steps 4-6 trained again from checkpoint-3, finite and equal");

    corrupt_tail(&out.path().join("checkpoint-6/optimizer/model.safetensors"), 64);
    let trainable = out.path().join("checkpoint-3/trainable/model.safetensors");
    let f = std::fs::OpenOptions::new().write(true).open(&trainable).unwrap();
    f.set_len(f.metadata().unwrap().len() - 100).unwrap();
    let r = run_train(out.path(), &resume);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "resumed from damaged checkpoints: {err}");
    assert!(err.contains("no complete, intact checkpoint") && err.contains("truncated"), "{err}");
}

/// Resuming with a larger --max-steps continues the schedule over the new total (not at lr 0),
/// a new --lr is followed, each change is said once, and a changed data order is refused.
#[test]
fn resume_follows_a_new_max_steps_and_lr() {
    let out = tempfile::tempdir().unwrap();
    train(out.path(), &["--save-every", "3"]);
    let cp6 = out.path().join("checkpoint-6");
    let more = ["--max-steps", "10", "--lr", "1e-3", "--resume", cp6.to_str().unwrap()];
    let err = train(out.path(), &more);
    assert!(err.contains("resume: max_steps 6 -> 10, the schedule follows the new total"), "{err}");
    assert!(err.contains("resume: lr 0.002 -> 0.001"), "{err}");
    let log = losses(out.path());
    assert_eq!(log.len(), 10);
    // Cosine after 2 warm-up steps over 10: step s (0-based) has lr 1e-3 · ½(1 + cos(π (s−2)/8)).
    for (s, line) in log.iter().enumerate().skip(6) {
        let want = 1e-3 * 0.5 * (1.0 + (std::f64::consts::PI * (s as f64 - 2.0) / 8.0).cos());
        let lr = line["lr"].as_f64().unwrap();
        assert!((lr - want).abs() < 1e-9 && lr > 0.0, "step {}: lr {lr}, want {want}", s + 1);
    }
    let r = run_train(out.path(), &["--max-steps", "12", "--seed", "4", "--resume", cp6.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("--seed 3"), "a changed seed must be refused: {err}");
}

/// Rows longer than --seq-len are counted in one warning with the longest length; a row left
/// with no token to predict (its trained part past the cut) is named by file:line and skipped,
/// so a batch of it alone no longer stops the run with "no token to predict".
#[test]
fn truncation_is_reported_and_rows_without_targets_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("rows.jsonl");
    let rows = [
        r#"{"input_ids": [5, 6, 7, 8, 9, 10], "labels": [-100, -100, -100, -100, 9, 10]}"#,
        r#"{"input_ids": [5, 6, 7, 8, 9, 10, 11, 12]}"#,
        r#"{"input_ids": [3, 4, 5]}"#,
    ];
    std::fs::write(&data, rows.join("\n")).unwrap();
    let out = dir.path().join("out");
    let extra = ["--data", data.to_str().unwrap(), "--seq-len", "4", "--no-shuffle", "--grad-accum", "1"];
    let err = train(&out, &extra);
    assert!(err.contains("2 rows are longer than --seq-len 4 cut to it (the longest has 8 tokens)"), "{err}");
    let named = format!("1 row has no token to predict within --seq-len 4 (skipped): {}:1", data.display());
    assert!(err.contains(&named), "{err}");
    assert_eq!(losses(&out).len(), 6);
}

/// `eval` appends no EOS unless asked (transformers' `model(input_ids, labels=input_ids)` loss),
/// says which in its header, and `--add-eos` adds one predicted token per text row.
#[test]
fn eval_appends_eos_only_when_asked() {
    let model = repo().join("tests/fixtures_generate/cli_model");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("text.jsonl");
    std::fs::write(&data, "{\"text\": \"hello world\"}\n{\"text\": \"abc\"}\n").unwrap();
    let eval = |extra: &[&str]| {
        let mut args = vec!["eval", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "--json"];
        args.extend_from_slice(extra);
        let r = Command::new(env!("CARGO_BIN_EXE_vkformers")).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&r.stderr).into_owned();
        assert!(r.status.success(), "{err}");
        let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        (v["tokens"].as_u64().unwrap(), err)
    };
    let (plain, err) = eval(&[]);
    assert!(err.contains("no EOS appended"), "{err}");
    let (with_eos, err) = eval(&["--add-eos"]);
    assert!(err.contains("EOS appended") && !err.contains("no EOS"), "{err}");
    assert_eq!(with_eos, plain + 2, "one more target (the EOS) per row");
    let (off, _) = eval(&["--no-add-eos"]);
    assert_eq!(off, plain);
    let help = Command::new(env!("CARGO_BIN_EXE_vkformers")).args(["eval", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--add-eos") && help.contains("--no-add-eos"), "{help}");
}
