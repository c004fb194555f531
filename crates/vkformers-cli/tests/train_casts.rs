//! The cast dispatches of a mixed-precision training step, from `vkformers train --profile`'s
//! per-kernel table: the tiny Llama (2 layers) under `--bf16` / `--fp16`, its products on the
//! GEMM (`VKFORMERS_GEMV_MAX_ROWS=0`, as every product of a real batch runs; the GEMV of a
//! few rows reads f32 activations). Attention hands 16-bit tensors to its neighbours (o to
//! o_proj, dq / dk to RoPE's backward, dv to v's product): no widening cast is left in a step,
//! and the trained weights are bit for bit those of `VKFORMERS_ATTN_CASTS=1` (the casts as
//! before: 4 widenings a layer). The norms, RoPE, the GLU and the loss hand the products 16-bit
//! outputs and gradients where nothing reads the f32 ones (no cast of dlogits, no row copies
//! and casts in the chunked loss), the residual add after the MLP runs in the next norm's
//! kernel, and o_proj's backward product writes attention's dO in 16 bits itself (the GEMM's
//! 16-bit C: no f32 dA and cast): bit for bit the weights of `VKFORMERS_WIDE_OUTPUTS=1`.

mod common;

use std::path::Path;

use common::profiled_train::{profile_rows, train_two_profiled_steps};
use common::trainer_parity::repo;

/// Runs two steps of `vkformers train --profile` in `dtype` with the extra environment `env`;
/// returns the profile's `cast/` rows (kernel, calls a step) and the saved weights' bytes.
fn train(dtype: &str, env: &[(&str, &str)], out: &Path) -> (Vec<(String, f64)>, Vec<u8>) {
    train_rows(dtype, env, out, &["cast/"])
}

/// [`train`] returning the profile rows whose kernel starts with one of `prefixes`.
fn train_rows(dtype: &str, env: &[(&str, &str)], out: &Path, prefixes: &[&str]) -> (Vec<(String, f64)>, Vec<u8>) {
    train_with(&[&format!("--{dtype}")], env, out, prefixes)
}

/// [`train_rows`] with the extra arguments `args` (the precision flag among them).
fn train_with(args: &[&str], env: &[(&str, &str)], out: &Path, prefixes: &[&str]) -> (Vec<(String, f64)>, Vec<u8>) {
    train_model("llama", args, env, out, prefixes)
}

/// [`train_with`] of the fixture `tests/fixtures/<fixture>`.
fn train_model(
    fixture: &str,
    args: &[&str],
    env: &[(&str, &str)],
    out: &Path,
    prefixes: &[&str],
) -> (Vec<(String, f64)>, Vec<u8>) {
    let dtype = format!("{fixture} {}", args.join(" "));
    let model = repo().join("tests/fixtures").join(fixture).display().to_string();
    let text = train_two_profiled_steps(&["--model", &model], args, env, out, &dtype);
    let mut casts = profile_rows(&text, prefixes);
    casts.sort_by(|a, b| a.0.cmp(&b.0)); // the table is ordered by time
    (casts, std::fs::read(out.join("model.safetensors")).unwrap())
}

#[test]
fn a_mixed_precision_step_widens_nothing_around_attention() {
    for (dtype, short) in [("bf16", "bf16"), ("fp16", "f16")] {
        let (direct, before) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (casts, weights) = train(dtype, &[], direct.path());
        let (casts_before, weights_before) = train(dtype, &[("VKFORMERS_ATTN_CASTS", "1")], before.path());
        assert!(weights == weights_before, "--{dtype}: trained weights differ from VKFORMERS_ATTN_CASTS=1's");
        // To 16 bits, a step on average (the first casts the weights: q/k/v and gate/up as one
        // packed weight each, 3 casts a layer fewer than apart). None a layer otherwise: o_proj's
        // dA product writes dO in 16 bits, the loss dlogits, and v is rounded from the packed
        // q/k/v product's columns by `elementwise/cast_cols`, as RoPE reads q and k there.
        let to = format!("cast/cast4:to_{short}");
        assert_eq!(casts, vec![(to.clone(), 4.5)], "--{dtype}: the cast dispatches of a step");
        // Before: o widened after attention, dq, dk and dv after its backward, in each layer;
        // dO narrowed for it (o_proj's A is the f32 o then); and the f32 dlogits narrowed for
        // the LM head's backward.
        let from = format!("cast/cast4:from_{short}");
        // (And the f32 packed gradient of q/k/v narrowed once a layer for its product: dq, dk
        // and dv's 16-bit twins are not in its layout.)
        assert_eq!(
            casts_before,
            vec![(from, 8.0), (to.clone(), 11.5)],
            "--{dtype}: the casts with VKFORMERS_ATTN_CASTS=1"
        );
        // o_proj's dA in f32 and cast to dO, as before the GEMM's 16-bit C: the same weights.
        let cast_da = tempfile::tempdir().unwrap();
        let (casts_da, weights_da) = train(dtype, &[("VKFORMERS_GEMM_CASTS", "1")], cast_da.path());
        assert!(weights == weights_da, "--{dtype}: trained weights differ from VKFORMERS_GEMM_CASTS=1's");
        assert_eq!(casts_da, vec![(to, 6.5)], "--{dtype}: the casts with VKFORMERS_GEMM_CASTS=1");
    }
}

#[test]
fn a_mixed_precision_step_writes_no_f32_tensor_only_products_read() {
    let rows = ["broadcast/binary", "cast/", "elementwise/copy"];
    for (dtype, short) in [("bf16", "bf16"), ("fp16", "f16")] {
        // The whole logits (one chunk), and the loss in chunks of 8 of the 16 tokens.
        for chunk in ["0", "8"] {
            let (now, wide) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let env = [("VKFORMERS_LOSS_CHUNK_ROWS", chunk)];
            let (kernels, weights) = train_rows(dtype, &env, now.path(), &rows);
            let env_wide = [env[0], ("VKFORMERS_WIDE_OUTPUTS", "1")];
            let (kernels_wide, weights_wide) = train_rows(dtype, &env_wide, wide.path(), &rows);
            let what = format!("--{dtype}, VKFORMERS_LOSS_CHUNK_ROWS={chunk}");
            assert!(weights == weights_wide, "{what}: trained weights differ from VKFORMERS_WIDE_OUTPUTS=1's");
            let to = format!("cast/cast4:to_{short}");
            // Per step: the weights once (q/k/v and gate/up packed). dX of each chunk is copied
            // into its rows of the head's input gradient; dv into its columns of the packed q/k/v
            // product's 16-bit gradient (RoPE's backward writes dq and dk there itself).
            let dv = ("elementwise/copy_cols:w16".to_string(), 2.0);
            let expect = match chunk {
                "0" => vec![(to.clone(), 4.5), dv.clone()],
                _ => vec![(to.clone(), 4.5), ("elementwise/copy".to_string(), 2.0), dv],
            };
            assert_eq!(kernels, expect, "{what}: the casts and copies of a step");
            // Before: the residual add after each layer's MLP a dispatch of its own (now in the
            // next norm's kernel), o_proj's f32 dA narrowed to dO in each layer, dlogits
            // narrowed for the head's backward (in each chunk), and each chunk's rows copied out
            // of the final norm's f32 output and cast, in forward and backward.
            let add = ("broadcast/binary:add".to_string(), 2.0);
            // (RoPE's f32 outputs there: q, k, v split, and dq, dk, dv copied into the packed
            // gradient, 3 a layer.)
            let joins = ("elementwise/copy_cols:w16".to_string(), 6.0);
            let before = match chunk {
                "0" => vec![add, (to, 9.5), joins],
                _ => vec![add, (to, 14.5), ("elementwise/copy".to_string(), 6.0), joins],
            };
            assert_eq!(kernels_wide, before, "{what}: the casts and copies with VKFORMERS_WIDE_OUTPUTS=1");
        }
    }
}

#[test]
fn a_checkpointed_mixed_precision_step_trains_the_same_weights() {
    // Checkpointed layers run their forward on the f32 outputs (nodes dropped) and their
    // recompute on the 16-bit ones: the weights are those of the plain step, bit for bit.
    let (ckpt, plain) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_, weights) = train_with(&["--bf16", "--gradient-checkpointing"], &[], ckpt.path(), &[]);
    let (_, weights_plain) = train_with(&["--bf16"], &[], plain.path(), &[]);
    assert!(weights == weights_plain, "--gradient-checkpointing: trained weights differ from the plain step's");
}

/// The twins (16-bit copies the producing kernels write) and the A/B switches that turn parts of
/// them off train the same weights, bit for bit, on families with other norms, clips and MLPs:
/// OLMo (clip_qkv, LayerNorm without affine weights, biases), Cohere (LayerNorm, parallel
/// attention and MLP), Phi-3 (fused gate_up), Gemma 2 (GeGLU, softcaps, sandwich norms), Qwen2
/// (q/k/v biases), DeepSeek-V2 (MLA, experts) and the tiny Llama. `VKFORMERS_NO_TWINS=1` once
/// made every GLU's backward read f32 gate and up where the twins saved 16-bit copies of them
/// (2e-3 apart after two steps); the casts now save the copies the twins write.
#[test]
fn the_twins_and_their_switches_train_the_same_weights_across_families() {
    let switches = ["VKFORMERS_NO_TWINS", "VKFORMERS_WIDE_OUTPUTS", "VKFORMERS_ATTN_CASTS", "VKFORMERS_GEMM_CASTS"];
    for fixture in ["olmo", "llama", "cohere", "phi3", "gemma2", "qwen2", "deepseek_v2"] {
        let base = tempfile::tempdir().unwrap();
        let (_, weights) = train_model(fixture, &["--bf16"], &[], base.path(), &[]);
        for switch in switches {
            let other = tempfile::tempdir().unwrap();
            let (_, weights_off) = train_model(fixture, &["--bf16"], &[(switch, "1")], other.path(), &[]);
            assert!(weights == weights_off, "{fixture} --bf16: trained weights differ from {switch}=1's");
        }
    }
    // Under --fp16 and with the layers recomputed in backward too (the GLU's saved copies).
    for args in [&["--fp16"][..], &["--bf16", "--gradient-checkpointing"]] {
        let (twins, casts) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (_, weights) = train_model("olmo", args, &[], twins.path(), &[]);
        let (_, weights_casts) = train_model("olmo", args, &[("VKFORMERS_NO_TWINS", "1")], casts.path(), &[]);
        assert!(weights == weights_casts, "olmo {args:?}: trained weights differ from VKFORMERS_NO_TWINS=1's");
    }
}
