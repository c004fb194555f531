//! `vkformers train --resume`: a run stopped after its step-3 checkpoint (its later outputs
//! gone, as after a kill) and resumed gives the straight 6-step run's weights and loss log.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn train(out: &Path, extra: &[&str]) {
    let model = repo().join("tests/fixtures/llama");
    let data = repo().join("tests/fixtures_train/rows.jsonl");
    let mut args = vec![
        "train",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
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
    args.extend_from_slice(extra);
    let r = Command::new(env!("CARGO_BIN_EXE_vkformers")).args(&args).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
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
    let model = repo().join("tests/fixtures/llama");
    let data = repo().join("tests/fixtures_train/rows.jsonl");
    let out = tempfile::tempdir().unwrap();
    let args = |resume: bool| {
        let mut a: Vec<String> = [
            "train",
            "--model",
            model.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--out",
            out.path().to_str().unwrap(),
            "--max-steps",
            "40",
            "--batch-size",
            "2",
            "--save-every",
            "1",
            "--keep-checkpoints",
            "2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
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
