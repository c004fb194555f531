//! `mpirun -n N vkformers train`: data parallelism gives the single-process step (bit for bit
//! where MPI sums in the device's order, else within 1e-5), a failing or killed rank ends the
//! job, and ranks started differently refuse to train. Skipped, with a message, where `mpirun`
//! is absent or the binary was built without the `mpi` feature.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn mpi_available() -> bool {
    let found =
        cfg!(feature = "mpi") && Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        eprintln!(
            "skipped: mpirun not found or vkformers built without the `mpi` feature (.ci/install-mpi installs it)"
        );
    }
    found
}

/// `vkformers train` on the llama fixture for two AdamW steps with clipping and weight decay
/// (`extra`: flag and value pairs, replacing the value of a flag already given; an empty
/// value adds a switch).
fn train_args(out: &Path, batch: usize, accum: usize, extra: &[&str]) -> Vec<String> {
    let (model, data) = (repo().join("tests/fixtures/llama"), repo().join("tests/fixtures_train/rows.jsonl"));
    let mut a: Vec<String> = ["train", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap()]
        .into_iter()
        .map(String::from)
        .collect();
    let (b, ga) = (batch.to_string(), accum.to_string());
    let rest = ["--out", out.to_str().unwrap(), "--batch-size", &b, "--grad-accum", &ga];
    let hp = ["--max-steps", "2", "--lr", "2e-3", "--weight-decay", "0.1", "--max-grad-norm", "0.5", "--seed", "3"];
    a.extend(rest.iter().chain(&hp).map(|s| s.to_string()));
    for pair in extra.chunks(2) {
        if pair[1].is_empty() {
            // A switch: the flag alone.
            a.push(pair[0].to_string());
            continue;
        }
        match a.iter().position(|x| x == pair[0]) {
            Some(at) => a[at + 1] = pair[1].to_string(),
            None => a.extend(pair.iter().map(|s| s.to_string())),
        }
    }
    a
}

/// The launcher with the options a CI container needs (root, more ranks than cores), one
/// lavapipe thread per rank.
/// `env` (NAME=value) is passed to every rank.
fn mpirun(ranks: usize, env: &[&str]) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-x", "LP_NUM_THREADS=1"]);
    for e in env {
        c.args(["-x", e]);
    }
    c.args(["-n", &ranks.to_string(), env!("CARGO_BIN_EXE_vkformers")]);
    c
}

fn ok(o: Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{err}");
    err
}

/// `vkformers ARGS` in one process (one lavapipe thread); its output.
fn alone(args: Vec<String>) -> String {
    ok(Command::new(env!("CARGO_BIN_EXE_vkformers")).env("LP_NUM_THREADS", "1").args(args).output().unwrap())
}

fn single(out: &Path, batch: usize, accum: usize) {
    alone(train_args(out, batch, accum, &[]));
}

fn ranks(n: usize, out: &Path, batch: usize, extra: &[&str]) -> String {
    // Small buckets: the fixture's 27k parameters go in several all-reduces.
    let mut c = mpirun(n, &["VKFORMERS_DIST_BUCKET_ELEMS=3000"]);
    ok(c.args(train_args(out, batch, 1, extra)).output().unwrap())
}

/// A fine-tuning run (`args`) on 2 ranks; its output. Small buckets: the adapter's few
/// parameters go in several all-reduces.
fn finetune_ranks(args: Vec<String>) -> String {
    ok(mpirun(2, &["VKFORMERS_DIST_BUCKET_ELEMS=300"]).args(args).output().unwrap())
}

fn metrics(out: &Path) -> Vec<(f64, f64)> {
    let text = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let row = |l: &str| {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        (v["loss"].as_f64().unwrap(), v["grad_norm"].as_f64().unwrap())
    };
    text.lines().map(row).collect()
}

/// Every step's loss and gradient norm of the runs in `a` and `b` within `rel` of each other
/// (relative), and as many steps logged by each (at least one).
fn metrics_close(a: &Path, b: &Path, rel: f64) {
    let (ma, mb) = (metrics(a), metrics(b));
    assert!(!ma.is_empty() && ma.len() == mb.len(), "steps logged: {} vs {}", ma.len(), mb.len());
    for ((l, n), (l2, n2)) in ma.into_iter().zip(mb) {
        assert!((l - l2).abs() <= rel * l.abs() && (n - n2).abs() <= rel * n.abs(), "{l} {n} vs {l2} {n2}");
    }
}

/// "E of N buckets started during backward" from the communication report (rank 0's).
fn buckets_started_in_backward(log: &str) -> (u64, u64) {
    let line = log.lines().find(|l| l.contains("buckets started during backward")).expect("the report line");
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "buckets").expect("buckets");
    (words[at - 3].parse().unwrap(), words[at - 1].parse().unwrap())
}

/// Whether the two saved models' weight files are the same bytes.
fn same_model_bytes(a: &Path, b: &Path) -> bool {
    let read = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    read(a) == read(b)
}

/// Largest |a - b| over every weight of the two saved models.
fn max_diff(a: &Path, b: &Path) -> f32 {
    let open = |d: &Path| vkformers_io::ModelWeights::open(d).unwrap();
    max_weight_diff(&open(a), &open(b))
}

/// Largest |a - b| over every tensor of `a` (each read from both).
fn max_weight_diff(a: &vkformers_io::ModelWeights, b: &vkformers_io::ModelWeights) -> f32 {
    let mut worst = 0.0f32;
    for n in a.names() {
        let (x, y) = (a.tensor_f32(n).unwrap(), b.tensor_f32(n).unwrap());
        worst = x.iter().zip(&y).map(|(p, q)| (p - q).abs()).fold(worst, f32::max);
    }
    worst
}

#[test]
fn two_ranks_equal_one_rank_with_two_micro_batches() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (two, micro, wide) = (t.path().join("two"), t.path().join("micro"), t.path().join("wide"));
    let log = ranks(2, &two, 1, &[]);
    assert!(log.contains("communication over 2 ranks"), "{log}");
    let (early, all) = buckets_started_in_backward(&log);
    assert!(all > 1 && early == all, "every bucket's all-reduce starts during backward: {log}");
    single(&micro, 1, 2);
    single(&wide, 2, 1);
    // MPI's 2-rank sum is g0 + g1, as the device accumulates the second micro-batch.
    assert!(
        same_model_bytes(&two, &micro),
        "2 ranks x 1 != 1 rank x 2 micro-batches of 1, bit for bit (max diff {})",
        max_diff(&two, &micro)
    );
    assert_eq!(metrics(&two), metrics(&micro), "same losses and gradient norms, bit for bit");
    let d = max_diff(&two, &wide);
    assert!(d <= 1e-5, "2 ranks x 1 vs 1 rank x 2: {d}");
}

/// The overlap around its edges: with accumulation only the last micro-batch's backward
/// starts buckets (2 ranks x 2 micro-batches = 1 rank x 4 within 1e-5: the sums group
/// differently); under gradient checkpointing no gradient is reported final during backward
/// (a block's recompute reads parameters its node does not list), so every bucket starts
/// after it, and 2 ranks still equal 1 rank's 2 micro-batches bit for bit.
#[test]
fn accumulation_and_gradient_checkpointing_on_two_ranks() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (two, four) = (t.path().join("two"), t.path().join("four"));
    let log = ranks(2, &two, 1, &["--grad-accum", "2"]);
    let (early, all) = buckets_started_in_backward(&log);
    assert!(all > 1 && early == all, "{log}");
    single(&four, 1, 4);
    let d = max_diff(&two, &four);
    assert!(d <= 1e-5, "2 ranks x 2 micro-batches vs 1 rank x 4: {d}");

    let (ckpt, micro) = (t.path().join("ckpt"), t.path().join("micro"));
    let log = ranks(2, &ckpt, 1, &["--gradient-checkpointing", ""]);
    assert_eq!(buckets_started_in_backward(&log).0, 0, "{log}");
    alone(train_args(&micro, 1, 2, &["--gradient-checkpointing", ""]));
    assert!(
        same_model_bytes(&ckpt, &micro),
        "checkpointed: 2 ranks != 1 rank x 2 micro-batches (max diff {})",
        max_diff(&ckpt, &micro)
    );
}

#[test]
fn four_ranks_equal_one_rank_with_four_micro_batches_within_1e_5() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (four, micro, wide) = (t.path().join("four"), t.path().join("micro"), t.path().join("wide"));
    ranks(4, &four, 1, &[]);
    single(&micro, 1, 4);
    single(&wide, 4, 1);
    // Open MPI sums 4 ranks as (g0 + g1) + (g2 + g3), the device ((g0 + g1) + g2) + g3: the
    // same up to rounding.
    let d = max_diff(&four, &micro);
    assert!(d <= 1e-5, "4 ranks x 1 vs 1 rank x 4 micro-batches of 1: {d}");
    metrics_close(&four, &micro, 1e-5);
    // One process already differs between 4 micro-batches of 1 and one batch of 4 (other
    // padding and product shapes; 2.5e-5 on this fixture after two steps): data parallelism
    // may add at most 1e-5 to that.
    let own = max_diff(&micro, &wide);
    let d = max_diff(&four, &wide);
    assert!(d <= own + 1e-5, "4 ranks x 1 vs 1 rank x 4: {d} (1 rank, 4 micro-batches vs one batch: {own})");
}

/// A 2-rank checkpoint (written by rank 0, its data position global) continues on 1 rank with
/// 2 micro-batches as the 2-rank run went on.
#[test]
fn a_two_rank_checkpoint_resumes_on_one_rank() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (straight, resumed) = (t.path().join("straight"), t.path().join("resumed"));
    ranks(2, &straight, 1, &["--max-steps", "4"]);
    ranks(2, &resumed, 1, &["--max-steps", "4", "--save-every", "2"]);
    let cp = resumed.join("checkpoint-2");
    let next = t.path().join("next");
    alone(train_args(&next, 1, 2, &["--max-steps", "4", "--resume", cp.to_str().unwrap()]));
    let d = max_diff(&straight, &next);
    assert!(d == 0.0, "resumed on 1 rank differs from the 2-rank run by {d}");
}

/// Waits for `child` at most `limit`; kills it past that.
fn wait_within(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    None
}

#[test]
fn a_failing_rank_ends_the_job_with_its_error() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let mut c = mpirun(2, &["VKFORMERS_DIST_FAIL=1:2"]);
    let args = train_args(&t.path().join("out"), 1, 1, &["--max-steps", "100000"]);
    let mut child = c.args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || BufReader::new(stderr).lines().map_while(Result::ok).collect::<Vec<_>>());
    let status = wait_within(&mut child, Duration::from_secs(120)).expect("the job did not end");
    let log = reader.join().unwrap().join("\n");
    assert!(!status.success(), "{log}");
    assert!(log.contains("error on rank 1 of 2: MPI: simulated failure of rank 1 at step 2"), "{log}");
}

#[test]
fn a_killed_rank_ends_the_job_within_30_s() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let args = train_args(&t.path().join("out"), 1, 1, &["--max-steps", "100000"]);
    let mut child = mpirun(2, &[]).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // Rank 0 prints every step: once one is done, both ranks are deep in training.
    assert!(lines.by_ref().map_while(Result::ok).any(|l| l.starts_with("step 1/")), "no step was printed");
    let reader = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let rank1 = rank_pid(child.id(), 1).expect("rank 1's process");
    let killed = Instant::now();
    Command::new("kill").args(["-9", &rank1.to_string()]).status().unwrap();
    let status = wait_within(&mut child, Duration::from_secs(30));
    let log = reader.join().unwrap().join("\n");
    let status = status.unwrap_or_else(|| panic!("still running 30 s after rank 1 was killed:\n{log}"));
    assert!(!status.success(), "{log}");
    // The launcher names the rank that died and how.
    assert!(log.contains("rank 1") && log.contains("signal 9"), "{log}");
    eprintln!("the job ended {:.1} s after rank 1 was killed", killed.elapsed().as_secs_f64());
}

/// The pid of rank `rank` among the children of the launcher `launcher`.
fn rank_pid(launcher: u32, rank: usize) -> Option<u32> {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Field 4 (after the parenthesised name) is the parent pid.
        let ppid = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)).and_then(|p| p.parse().ok());
        if ppid != Some(launcher) {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

#[test]
fn ranks_started_with_other_arguments_refuse_to_train() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let mut c = mpirun(1, &[]);
    c.args(train_args(&out, 1, 1, &[])).args([":", "-n", "1", env!("CARGO_BIN_EXE_vkformers")]);
    let o = c.args(train_args(&out, 1, 1, &["--lr", "1e-3"])).output().unwrap();
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{log}");
    assert!(log.contains("rank 1 was started with other arguments than rank 0"), "{log}");
}

/// `--zero 1` (AdamW state sharded by parameter, the norm clipped on the host in f64) trains
/// as plain data parallelism to 1e-6.
#[test]
fn zero1_equals_plain_data_parallel_within_1e_6() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (zero, plain) = (t.path().join("zero"), t.path().join("plain"));
    let log = ranks(2, &zero, 1, &["--zero", "1"]);
    let (early, all) = buckets_started_in_backward(&log);
    assert!(all > 1 && early == all, "the reduce-scatters start during backward: {log}");
    ranks(2, &plain, 1, &[]);
    let d = max_diff(&zero, &plain);
    assert!(d <= 1e-6, "--zero 1 vs plain: {d}");
    metrics_close(&zero, &plain, 1e-6);
}

/// A 2-rank `--zero 1` checkpoint (rank 0 gathers every moment) resumes on 1 rank and on 4
/// with the same global batch (4 sequences a step) and continues as the straight run.
#[test]
fn a_zero1_checkpoint_resumes_on_one_rank_and_on_four() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (straight, saved) = (t.path().join("straight"), t.path().join("saved"));
    let steps = ["--max-steps", "4", "--zero", "1"];
    ranks(2, &straight, 2, &steps);
    ranks(2, &saved, 2, &["--max-steps", "4", "--zero", "1", "--save-every", "2"]);
    let cp = saved.join("checkpoint-2");
    let cp = cp.to_str().unwrap();
    let (one, four) = (t.path().join("one"), t.path().join("four"));
    alone(train_args(&one, 2, 2, &["--max-steps", "4", "--resume", cp]));
    ranks(4, &four, 1, &["--max-steps", "4", "--zero", "1", "--resume", cp]);
    for other in [&one, &four] {
        let d = max_diff(&straight, other);
        assert!(d <= 1e-5, "resumed in {} vs the straight 2-rank run: {d}", other.display());
    }
}

/// Each rank's "rank R: optimizer state B bytes" line, by rank.
fn optimizer_bytes(log: &str, ranks: usize) -> Vec<u64> {
    (0..ranks)
        .map(|r| {
            let tag = format!("rank {r}: optimizer state ");
            // Found anywhere: the launcher may interleave two ranks' lines.
            let at = log.find(&tag).unwrap_or_else(|| panic!("no {tag:?} in {log}")) + tag.len();
            log[at..].split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect()
}

/// `--zero 1` keeps about 1/N of AdamW's moments on each rank (its slice of the flat
/// buckets), also after rank 0 gathered all of them to write a checkpoint, and after resuming
/// one (each rank loads only its slice).
#[test]
fn zero1_ranks_hold_their_share_of_the_optimizer_state_after_save_and_resume() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (saved, resumed) = (t.path().join("saved"), t.path().join("resumed"));
    let log = ranks(2, &saved, 1, &["--max-steps", "2", "--zero", "1", "--save-every", "2"]);
    let params: u64 = {
        let at = log.find("training llama (").expect("the plan line") + "training llama (".len();
        log[at..].split_whitespace().next().unwrap().parse().unwrap()
    };
    // exp_avg and exp_avg_sq in f32 for every parameter, over both ranks.
    let total = 8 * params;
    let cp = saved.join("checkpoint-2");
    let log2 = ranks(2, &resumed, 1, &["--max-steps", "3", "--zero", "1", "--resume", cp.to_str().unwrap()]);
    for (what, log) in [("after a save", &log), ("after a resume", &log2)] {
        let b = optimizer_bytes(log, 2);
        // Each flat bucket is padded to a multiple of the ranks: a few elements more than once.
        let sum = b.iter().sum::<u64>();
        assert!(
            sum >= total && (sum as f64) <= 1.01 * total as f64,
            "{what}: the ranks' shares make the state once: {b:?}"
        );
        for x in &b {
            assert!((*x as f64) < 0.6 * total as f64, "{what}: a rank holds {x} of {total} bytes");
        }
    }
}

/// Pre-training from a config with a tokenizer trained on the data (rank 0 trains it, the
/// others read it) and tied embeddings: 2 ranks give 1 rank's 2 micro-batches to 1e-5 (tied
/// embeddings sum their two gradient contributions in another order), the same losses.
#[test]
fn pretraining_with_a_trained_tokenizer_on_two_ranks() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (config, corpus) = (repo().join("demo/config.json"), repo().join("demo/corpus.jsonl"));
    let args = |out: &Path, accum: &str| -> Vec<String> {
        let a = ["train", "--init-from-config", config.to_str().unwrap(), "--train-tokenizer", "512", "--data"];
        let b = [corpus.to_str().unwrap(), "--out", out.to_str().unwrap(), "--seq-len", "32", "--max-steps", "2"];
        let c = ["--batch-size", "2", "--grad-accum", accum, "--lr", "1e-2", "--weight-decay", "0.1", "--seed", "0"];
        a.iter().chain(&b).chain(&c).map(|s| s.to_string()).collect()
    };
    let (two, one) = (t.path().join("two"), t.path().join("one"));
    let log = ok(mpirun(2, &[]).args(args(&two, "1")).output().unwrap());
    assert_eq!(log.matches("training a BPE tokenizer").count(), 1, "rank 0 alone trains it:\n{log}");
    alone(args(&one, "2"));
    let tok = |d: &Path| std::fs::read(d.join("tokenizer/tokenizer.json")).unwrap();
    assert_eq!(tok(&two), tok(&one), "the same tokenizer");
    let d = max_diff(&two, &one);
    assert!(d <= 1e-5, "2 ranks vs 1 rank x 2 micro-batches: {d}");
    metrics_close(&two, &one, 1e-5);
}

/// `vkformers finetune` (LoRA on the llama fixture, every linear layer) with LoRA dropout
/// for two steps: `out`, per-device batch and accumulation, dropout probability.
fn finetune_args(out: &Path, batch: usize, accum: usize, dropout: &str) -> Vec<String> {
    finetune_args_on(("tests/fixtures/llama", "tests/fixtures_train/rows.jsonl"), out, (batch, accum), dropout)
}

/// `finetune_args` on another (model, data) pair of repository paths.
fn finetune_args_on(on: (&str, &str), out: &Path, (batch, accum): (usize, usize), dropout: &str) -> Vec<String> {
    let (model, data) = (repo().join(on.0), repo().join(on.1));
    let (b, ga) = (batch.to_string(), accum.to_string());
    let a = ["finetune", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap()];
    let rest = ["--out", out.to_str().unwrap(), "--batch-size", &b, "--grad-accum", &ga, "--max-steps", "2"];
    let hp = ["--lr", "2e-3", "--seed", "3", "--lora-dropout", dropout, "--target-modules", "all-linear"];
    a.iter().chain(&rest).chain(&hp).map(|s| s.to_string()).collect()
}

/// Dropout keyed by the batch's place in the global order, not by the rank that trains it:
/// LoRA fine-tuning with dropout on 2 ranks x batch 1 gives 1 rank's 2 micro-batches of 1 bit
/// for bit (the same masks, the sum g0 + g1 in the device's order), and the masks matter
/// (without dropout the adapter differs).
#[test]
fn finetune_with_dropout_on_two_ranks_equals_one_rank_with_two_micro_batches() {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (two, micro, plain) = (t.path().join("two"), t.path().join("micro"), t.path().join("plain"));
    let log = finetune_ranks(finetune_args(&two, 1, 1, "0.3"));
    assert!(log.contains("communication over 2 ranks"), "{log}");
    alone(finetune_args(&micro, 1, 2, "0.3"));
    alone(finetune_args(&plain, 1, 2, "0"));
    let adapter = |d: &Path| std::fs::read(d.join("adapter_model.safetensors")).unwrap();
    assert!(adapter(&two) == adapter(&micro), "2 ranks x 1 != 1 rank x 2 micro-batches with dropout, bit for bit");
    assert_eq!(metrics(&two), metrics(&micro), "same losses and gradient norms, bit for bit");
    assert!(adapter(&plain) != adapter(&micro), "--lora-dropout changed nothing: the test proves nothing");
}

/// Largest |a - b| over every tensor of the two saved adapters.
fn adapter_diff(a: &Path, b: &Path) -> f32 {
    let open = |d: &Path| vkformers_io::ModelWeights::open_file(d.join("adapter_model.safetensors")).unwrap();
    max_weight_diff(&open(a), &open(b))
}

/// Dropout keyed by each row's global sample index and token position (issue 22): LoRA
/// fine-tuning with dropout on 2 ranks x batch 1 equals 1 rank x batch 2 within 1e-5, though
/// the wide batch pads its shorter row (the sums only group differently; with masks keyed by
/// the place in the batch the two differed by ~6e-3). Without dropout the adapter moves by
/// far more than the tolerance, so the masks are really compared.
#[test]
fn finetune_with_dropout_on_two_ranks_equals_one_rank_with_twice_the_batch() {
    two_ranks_with_dropout_equal_twice_the_batch(("tests/fixtures/llama", "tests/fixtures_train/rows.jsonl"));
}

/// The same for a sequence classifier (BERT, LoRA on every linear layer, the pooler's too):
/// the pooler's input rows are the samples `[B]`, keyed per sample.
#[test]
fn sequence_classification_with_dropout_on_two_ranks_equals_one_rank_with_twice_the_batch() {
    two_ranks_with_dropout_equal_twice_the_batch((
        "tests/fixtures/bert_seqcls",
        "tests/fixtures_train/encoder/cls_rows.jsonl",
    ));
}

/// The same for a sparse masked-LM head (ModernBERT, the head run on the target rows only):
/// each gathered target row keeps its token's masks.
#[test]
fn sparse_masked_lm_with_dropout_on_two_ranks_equals_one_rank_with_twice_the_batch() {
    two_ranks_with_dropout_equal_twice_the_batch((
        "tests/fixtures/modernbert_sparse",
        "tests/fixtures_train/encoder/mlm_rows.jsonl",
    ));
}

/// The same for an encoder-decoder (T5): decoder rows `[B·T_dec]` keyed by sample and position.
#[test]
fn seq2seq_with_dropout_on_two_ranks_equals_one_rank_with_twice_the_batch() {
    two_ranks_with_dropout_equal_twice_the_batch((
        "tests/fixtures/t5",
        "tests/fixtures_train/seq2seq/t5_tokenized.jsonl",
    ));
}

/// `finetune_args_on` in f32 (`--fp32`): a batch of 2B and two ranks of B round 16-bit
/// activations differently (other tilings, a padded row), and AdamW's first step turns such
/// differences in near-zero gradients into whole learning-rate steps (H200, bf16 by default:
/// 4e-3 on the encoders); the masks are what this compares, so both sides compute in f32.
fn f32_finetune_args(on: (&str, &str), out: &Path, shape: (usize, usize), dropout: &str) -> Vec<String> {
    let mut args = finetune_args_on(on, out, shape, dropout);
    args.push("--fp32".into());
    args
}

fn two_ranks_with_dropout_equal_twice_the_batch(on: (&str, &str)) {
    if !mpi_available() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (two, wide, plain) = (t.path().join("two"), t.path().join("wide"), t.path().join("plain"));
    finetune_ranks(f32_finetune_args(on, &two, (1, 1), "0.3"));
    alone(f32_finetune_args(on, &wide, (2, 1), "0.3"));
    alone(f32_finetune_args(on, &plain, (2, 1), "0"));
    let d = adapter_diff(&two, &wide);
    eprintln!("{}: 2 ranks x 1 vs 1 rank x 2 with dropout: max |diff| {d:e}", on.0);
    assert!(d <= 1e-5, "2 ranks x 1 vs 1 rank x 2 with dropout: {d}");
    let moved = adapter_diff(&plain, &wide);
    assert!(moved > 1e-3, "--lora-dropout moved the adapter by {moved} only: the test proves nothing");
    metrics_close(&two, &wide, 1e-5);
}

/// Commands other than `train` do not know their rank: under several ranks they refuse.
#[test]
fn other_commands_refuse_to_run_on_several_ranks() {
    if !mpi_available() {
        return;
    }
    let out = mpirun(2, &[]).args(["devices"]).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("only `vkformers train` and `finetune` run data parallel under mpirun (2 ranks here)"),
        "{log}"
    );
}
