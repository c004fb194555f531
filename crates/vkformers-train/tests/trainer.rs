//! The trainer on the llama fixture: gradient accumulation equals one large batch, a resumed
//! run (after a kill and a failed checkpoint write) equals a straight one, an exported model
//! reloads with equal logits, and weight decay follows the HF Trainer's names.

use std::path::{Path, PathBuf};

use vkformers_data::Example;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_train::checkpoint::StepRecord;
use vkformers_train::{
    full_model_params, sequences, LanguageModel, Loader, OptimOptions, Schedule, ScheduleKind, Silent, TrainOptions,
    Trainer,
};
use vkformers_vk::testing::on_every_device;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures").join(name)
}

/// Rows of lengths 3..=9 with a masked prompt on every third row.
fn rows(n: usize) -> Vec<Example> {
    (0..n)
        .map(|i| {
            let len = 3 + (i * 5) % 7;
            let ids: Vec<u32> = (0..len).map(|j| 3 + ((i * 31 + j * 17) % 120) as u32).collect();
            let labels =
                ids.iter().enumerate().map(|(j, &t)| if i % 3 == 0 && j < 2 { -100 } else { t as i32 }).collect();
            Example::new(ids, labels)
        })
        .collect()
}

fn options(out: &Path, grad_accum: usize, max_steps: u64) -> TrainOptions {
    TrainOptions {
        grad_accum,
        schedule: Schedule::new(ScheduleKind::Cosine, 1e-3, 1e-4, 2, max_steps).unwrap(),
        optim: OptimOptions { beta1: 0.9, beta2: 0.999, eps: 1e-6, weight_decay: 0.1, max_grad_norm: 1.0 },
        max_steps,
        save_every: 0,
        keep_checkpoints: 0,
        eval_every: 0,
        eval_batch_size: 4,
        out_dir: out.to_path_buf(),
        seed: 5,
        shuffle: true,
    }
}

fn weights(g: &Graph<'_>, m: &Model) -> Vec<(String, Vec<f32>)> {
    m.hf_params(g).unwrap().into_iter().map(|t| (t.name, t.data)).collect()
}

fn max_abs_diff(a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)]) -> f64 {
    a.iter()
        .zip(b)
        .flat_map(|((na, x), (nb, y))| {
            assert_eq!(na, nb);
            x.iter().zip(y).map(|(p, q)| (f64::from(*p) - f64::from(*q)).abs())
        })
        .fold(0.0, f64::max)
}

#[test]
fn four_micro_batches_equal_one_batch_four_times_as_large() {
    on_every_device("grad accumulation", |ctx| {
        let tmp = tempfile::tempdir().unwrap();
        let seqs = sequences(&rows(8), 16, false).unwrap();
        let run = |batch: usize, accum: usize| {
            let g = Graph::new(ctx);
            let m = Model::load(&g, &fixture("llama")).unwrap();
            let loader = Loader::new(seqs.clone(), batch, false, 0, 0).unwrap();
            // Constant lr, no clipping: the update depends on the gradient alone.
            let mut o = options(tmp.path(), accum, 1);
            o.schedule = Schedule::new(ScheduleKind::Constant, 1e-3, 0.0, 0, 1).unwrap();
            o.optim.max_grad_norm = 0.0;
            let mut t = Trainer::new(&g, full_model_params(&m), loader, o).unwrap();
            let s = t.step(&m).unwrap();
            (weights(&g, &m), s.record.loss, s.targets)
        };
        let (w_big, loss_big, n_big) = run(8, 1);
        let (w_acc, loss_acc, n_acc) = run(2, 4);
        assert_eq!(n_big, n_acc, "same tokens counted");
        assert!((loss_big - loss_acc).abs() <= 1e-6 * loss_big, "loss {loss_big} vs {loss_acc}");
        let d = max_abs_diff(&w_big, &w_acc);
        eprintln!("accumulation: max |Δw| = {d:.3e}");
        assert!(d <= 1e-5, "weights after one step differ by {d}");
        // The micro-batches really differ from an unweighted mean of micro-batch means.
        let (w_one, _, _) = run(2, 1);
        assert!(max_abs_diff(&w_big, &w_one) > 1e-4, "a single micro-batch must give another update");
        Ok(())
    });
}

/// Steps `n` times (or until done); returns the log of those steps.
fn steps(t: &mut Trainer<'_, '_>, m: &dyn LanguageModel, n: usize) -> Vec<StepRecord> {
    (0..n).map(|_| t.step(m).unwrap().record).collect()
}

#[test]
fn resume_after_a_kill_equals_a_straight_run() {
    on_every_device("resume", |ctx| {
        let seqs = sequences(&rows(5), 8, false).unwrap();
        let straight_dir = tempfile::tempdir().unwrap();
        // Straight: 6 steps of 2 micro-batches of 2 rows (epochs of 3 batches end mid-step).
        let g = Graph::new(ctx);
        let m = Model::load(&g, &fixture("llama")).unwrap();
        let loader = || Loader::new(seqs.clone(), 2, true, 5, 0).unwrap();
        let mut t = Trainer::new(&g, full_model_params(&m), loader(), options(straight_dir.path(), 2, 6)).unwrap();
        let log_straight = steps(&mut t, &m, 6);
        let w_straight = weights(&g, &m);

        // Interrupted: 3 steps and a checkpoint; then one more step whose checkpoint write fails
        // half-way (as a kill would leave it); then the process is gone.
        let out = tempfile::tempdir().unwrap();
        {
            let g = Graph::new(ctx);
            let m = Model::load(&g, &fixture("llama")).unwrap();
            let mut t = Trainer::new(&g, full_model_params(&m), loader(), options(out.path(), 2, 6)).unwrap();
            steps(&mut t, &m, 3);
            t.save_checkpoint(&mut Silent).unwrap();
            steps(&mut t, &m, 1);
            t.fail_checkpoint_after = Some(1);
            assert!(t.save_checkpoint(&mut Silent).is_err());
        }
        assert!(out.path().join(".checkpoint-4.tmp").exists(), "the failed write left its temporary folder");
        assert!(!out.path().join("checkpoint-4").exists(), "and no checkpoint-4");
        // A checkpoint folder without its state (e.g. copied by hand, half-way) is skipped.
        std::fs::create_dir_all(out.path().join("checkpoint-5/trainable")).unwrap();

        let g = Graph::new(ctx);
        let m = Model::load(&g, &fixture("llama")).unwrap();
        let mut t = Trainer::new(&g, full_model_params(&m), loader(), options(out.path(), 2, 6)).unwrap();
        let cp = t.resume(out.path()).unwrap();
        assert_eq!(cp, out.path().join("checkpoint-3"));
        assert_eq!(t.steps_done(), 3);
        steps(&mut t, &m, 3);
        assert!(t.finished());
        assert_eq!(t.log(), &log_straight[..], "the same loss log");
        let d = max_abs_diff(&w_straight, &weights(&g, &m));
        eprintln!("resume: max |Δw| = {d:.3e}");
        assert!(d <= 1e-6, "weights differ by {d} from the straight run");
        Ok(())
    });
}

#[test]
fn keep_checkpoints_prunes_the_oldest() {
    on_every_device("keep checkpoints", |ctx| {
        let out = tempfile::tempdir().unwrap();
        let g = Graph::new(ctx);
        let m = Model::load(&g, &fixture("llama")).unwrap();
        let loader = Loader::new(sequences(&rows(4), 8, false).unwrap(), 2, true, 1, 0).unwrap();
        let mut o = options(out.path(), 1, 4);
        o.save_every = 1;
        o.keep_checkpoints = 2;
        let mut t = Trainer::new(&g, full_model_params(&m), loader, o).unwrap();
        t.run(&m, &mut Silent).unwrap();
        let names: Vec<u64> = vkformers_train::checkpoint::list_checkpoints(out.path()).iter().map(|c| c.0).collect();
        assert_eq!(names, vec![3, 4]);
        Ok(())
    });
}

#[test]
fn an_exported_model_reloads_with_equal_logits() {
    on_every_device("export", |ctx| {
        let out = tempfile::tempdir().unwrap();
        let g = Graph::new(ctx);
        let m = Model::load(&g, &fixture("llama")).unwrap();
        let seqs = sequences(&rows(4), 8, false).unwrap();
        let loader = Loader::new(seqs.clone(), 2, false, 1, 0).unwrap();
        let mut t = Trainer::new(&g, full_model_params(&m), loader, options(out.path(), 1, 2)).unwrap();
        t.run(&m, &mut Silent).unwrap();
        let batch = vkformers_train::TokenBatch::pad(&seqs.iter().collect::<Vec<_>>(), 0);
        let before = g.no_grad(|| m.logits(&g, &batch).and_then(|l| Ok(g.read(&l)?))).unwrap();
        let dir = out.path().join("final");
        m.save(&g, &dir, Some(&fixture("llama")), vkformers_io::DEFAULT_MAX_SHARD_BYTES).unwrap();
        let again = Model::load(&g, &dir).unwrap();
        let after = g.no_grad(|| again.logits(&g, &batch).and_then(|l| Ok(g.read(&l)?))).unwrap();
        assert_eq!(before, after, "reloaded logits are identical");
        let trained = weights(&g, &m);
        let original = weights(&g, &Model::load(&g, &fixture("llama")).unwrap());
        assert!(max_abs_diff(&trained, &original) > 1e-4, "training changed the model");
        Ok(())
    });
}

#[test]
fn weight_decay_follows_the_hf_trainer() {
    let want: serde_json::Value =
        vkformers_io::read_json(repo().join("tests/fixtures_train/decay_names.json")).unwrap();
    let want = want.as_object().unwrap();
    assert!(want.len() >= 20);
    let mut checked = 0;
    for (name, names) in want {
        let decayed = &names["decay"];
        let all: Vec<&str> = names["all"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let config = vkformers_io::read_json(fixture(name).join("config.json")).unwrap();
        let spec = vkformers_models::spec_from_config(&config).unwrap();
        let decayed: Vec<&str> = decayed.as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let file = vkformers_io::ModelWeights::open(fixture(name)).unwrap();
        for hf in file.names() {
            if !all.contains(&hf) {
                // A legacy stored name that transformers renames on load (gpt_neox's
                // `embed_out` is its `lm_head` now): no HF parameter to compare with.
                continue;
            }
            checked += 1;
            // Stored name -> the internal parameter(s) made from it.
            let internal: Vec<String> = spec
                .weight_map
                .iter()
                .find(|e| e.hf == hf)
                .map(|e| e.parts.iter().map(|p| p.0.clone()).collect())
                .or_else(|| {
                    spec.joins.iter().find(|j| j.parts.iter().any(|p| p == hf)).map(|j| vec![j.internal.clone()])
                })
                .unwrap_or_else(|| vec![hf.to_string()]);
            for i in internal {
                let ours = vkformers_train::decay::decays(&spec, &i);
                assert_eq!(ours, decayed.contains(&hf), "{name}: `{hf}` (internal `{i}`)");
            }
        }
    }
    assert!(checked > 400, "only {checked} parameters compared");
}
