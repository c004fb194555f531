//! Decode steps recorded once and replayed (`src/replay.rs`): over 40 greedy steps of a batch of
//! two prompts, the replayed generation gives exactly the tokens of the synchronous loop (every
//! step recorded and read back before the next), and most of its steps were replayed: the host
//! recorded none of them. Families cover the step inputs a replay must advance on the device
//! (RoPE positions in attention or apart, learned positions, ALiBi, multi-head latent attention,
//! MoE routing); sliding-window layers (gemma2, mistral) give blocks back as rows grow and
//! LongRoPE (phi3) switches factors on the host, so those are never replayed and keep their
//! tokens. A row finishing early needs its pad fed from the host: the
//! replay stops there and starts again from a fresh capture.

mod common;

use common::{fixtures_root, greedy_prompts, synchronous};
use vkformers_generate::generation::{generate, Finish, GenerateOptions};
use vkformers_generate::SamplingParams;
use vkformers_kernels::attention::decode_lean::{with_kernel, Kernel};
use vkformers_models::model::Model;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> std::path::PathBuf {
    fixtures_root().join(name)
}

/// The first two prompts of a fixture (a batch of two rows).
fn prompts(name: &str) -> Vec<Vec<u32>> {
    greedy_prompts(name).into_iter().take(2).collect()
}

const STEPS: usize = 40;

#[test]
fn replayed_steps_give_the_recorded_loops_tokens() {
    on_every_device("decode_replay", |ctx| {
        let replayed = ["llama", "qwen2", "olmo", "cohere", "gpt_neox", "bloom", "gpt2", "deepseek_v2", "qwen3_moe"];
        let recorded = ["gemma2", "mistral", "phi3"];
        for name in replayed.into_iter().chain(recorded) {
            let g = Graph::new(ctx);
            let model = Model::load(&g, &fixture(name)).unwrap();
            let prompts = prompts(name);
            let opts = GenerateOptions::greedy(STEPS);
            let want = synchronous(&g, &model, &prompts, &opts);
            let got = generate(&g, &model, &prompts, &opts, &mut |_, _| false).unwrap();
            assert_eq!(got.rows, want.rows, "{name}: tokens");
            let replayed = got.timings.replayed_steps;
            if recorded.contains(&name) {
                assert_eq!(replayed, 0, "{name}: sliding windows and LongRoPE are not replayed");
            } else {
                // The first decode step, a warm-up, a logged and a captured step are recorded
                // (and a split-count change may cost another three).
                assert!(replayed >= STEPS - 8, "{name}: {replayed} of {STEPS} steps replayed");
            }
        }
        Ok(())
    });
}

#[test]
fn a_row_finishing_early_stops_the_replay_without_changing_tokens() {
    on_every_device("decode_replay_eos", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("llama")).unwrap();
        let prompts = prompts("llama");
        let free = synchronous(&g, &model, &prompts, &GenerateOptions::greedy(STEPS));
        // Row 0 stops at its 20th token (one row 1 never produces), well inside a replay.
        let eos = *free.rows[0][19..].iter().find(|t| !free.rows[1].contains(t)).expect("a token only row 0 makes");
        let opts = GenerateOptions { eos: vec![eos], ..GenerateOptions::greedy(STEPS) };
        let want = synchronous(&g, &model, &prompts, &opts);
        let got = generate(&g, &model, &prompts, &opts, &mut |_, _| false).unwrap();
        assert_eq!(got.rows, want.rows);
        assert_eq!(got.finish, vec![Finish::Eos, Finish::Length]);
        assert!(got.timings.replayed_steps > 0, "replayed before the row finished");
        Ok(())
    });
}

#[test]
fn seeded_sampling_replays_each_step_its_own_draw() {
    on_every_device("decode_replay_sampling", |ctx| {
        for name in ["qwen2", "llama"] {
            let g = Graph::new(ctx);
            let model = Model::load(&g, &fixture(name)).unwrap();
            let prompts = prompts(name);
            let params = SamplingParams {
                temperature: 1.3,
                top_k: 20,
                top_p: 0.95,
                min_p: Some(0.01),
                repetition_penalty: 1.1,
                ..SamplingParams::sampling()
            };
            let opts = GenerateOptions { params, seed: 11, ..GenerateOptions::greedy(STEPS) };
            let want = synchronous(&g, &model, &prompts, &opts);
            let got = generate(&g, &model, &prompts, &opts, &mut |_, _| false).unwrap();
            assert_eq!(got.rows, want.rows, "{name}: sampled tokens");
            let replayed = got.timings.replayed_steps;
            assert!(replayed >= STEPS - 8, "{name}: {replayed} of {STEPS} steps replayed");
            // Not the same token every step (a draw that kept its first step would repeat).
            assert_ne!(
                got.rows,
                generate(&g, &model, &prompts, &GenerateOptions::greedy(STEPS), &mut |_, _| false).unwrap().rows
            );
        }
        Ok(())
    });
}

/// The path an H200 runs: bf16 weights, a bf16 cache, autocast (16-bit twins, the tensor-core
/// or GEMV products), the decode attention's tiled kernel and the lean one: replayed tokens
/// equal the synchronous loop's.
#[test]
fn bf16_generation_replays_with_either_decode_kernel() {
    on_every_device("decode_replay_bf16", |ctx| {
        for name in ["llama", "qwen2"] {
            for kernel in [Kernel::Tiled, Kernel::Lean] {
                let g = Graph::new(ctx);
                let model = Model::load_for_inference(&g, &fixture(name), DType::BF16).unwrap();
                g.set_autocast(Some(DType::BF16));
                let prompts = prompts(name);
                let opts = GenerateOptions::greedy(STEPS);
                let (want, got) = with_kernel(kernel, || {
                    let want = synchronous(&g, &model, &prompts, &opts);
                    (want, generate(&g, &model, &prompts, &opts, &mut |_, _| false).unwrap())
                });
                assert_eq!(got.rows, want.rows, "{name} {kernel:?}: tokens");
                let replayed = got.timings.replayed_steps;
                assert!(replayed >= STEPS - 8, "{name} {kernel:?}: {replayed} of {STEPS} steps replayed");
            }
        }
        Ok(())
    });
}
