//! `vkformers bench attention`: times the fused attention forward and backward on one shape
//! (the kernels a training step runs: cooperative matrix 2 for f16/bf16 where the device has
//! it, the FMA kernels otherwise) and reports milliseconds and TFLOP/s per kernel. Presets
//! give the attention of the two `tools/bench/train.py` shapes.
//!
//! FLOPs counted as the usual convention: forward 2 B Hq Tq Tk (D + Dv) (Q Kᵀ and P V), halved
//! when causal (Tq = Tk); backward 2.5x the forward. The kernels are chosen as the attention op
//! chooses them: cooperative matrix 2 needs Dv = D, and `VKFORMERS_ATTENTION=fma` keeps the FMA
//! kernels (to compare both on one shape). The kernels recompute more than that (the dq
//! and dk/dv kernels each recompute Q Kᵀ), so these are useful, not executed, FLOP/s.

use std::process::ExitCode;

use anyhow::{bail, Context as _};
use vkformers_kernels::attention::{self, coopmat2, Grads, Qkv, Saved, Shape};
use vkformers_kernels::dtype::DType;
use vkformers_vk::{Buffer, Context, DeviceSelector, Recorder};

#[derive(clap::Args)]
pub struct AttentionArgs {
    /// A preset shape: 134m (B 8, T 1024, 12 heads, MHA, D 64) or 1.1b (B 4, T 1024, 32 heads,
    /// 4 KV heads, D 64); the flags below override its fields.
    #[arg(long)]
    preset: Option<String>,
    #[arg(long)]
    batch: Option<u32>,
    /// Query and key length.
    #[arg(long)]
    seq: Option<u32>,
    #[arg(long)]
    heads: Option<u32>,
    #[arg(long)]
    kv_heads: Option<u32>,
    #[arg(long)]
    head_dim: Option<u32>,
    /// Value head dim (default: the head dim): multi-head latent attention's prefill over the
    /// latent cache attends with Dv = kv_lora_rank under D = kv_lora_rank + qk_rope_head_dim.
    #[arg(long)]
    v_head_dim: Option<u32>,
    /// Full (bidirectional) attention instead of causal.
    #[arg(long)]
    full: bool,
    /// Storage type: bf16, f16 or f32 (f32 runs the FMA kernels).
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Learned attention sinks (one logit per query head, gpt-oss / granite_swa): the forward
    /// folds them in and the backward adds `attention/sink_grad`.
    #[arg(long)]
    sinks: bool,
    /// Timed runs (after 2 warm-up runs); the median is reported.
    #[arg(long, default_value_t = 10)]
    iters: usize,
}

fn shape_of(args: &AttentionArgs) -> anyhow::Result<Shape> {
    let base = match args.preset.as_deref() {
        None | Some("1.1b") => Shape { batch: 4, tq: 1024, tk: 1024, hq: 32, hkv: 4, d: 64, dv: 64 },
        Some("134m") => Shape { batch: 8, tq: 1024, tk: 1024, hq: 12, hkv: 12, d: 64, dv: 64 },
        Some(other) => bail!("--preset {other}: expected 134m or 1.1b"),
    };
    let seq = args.seq.unwrap_or(base.tq);
    Ok(Shape {
        batch: args.batch.unwrap_or(base.batch),
        tq: seq,
        tk: seq,
        hq: args.heads.unwrap_or(base.hq),
        hkv: args.kv_heads.unwrap_or(base.hkv),
        d: args.head_dim.unwrap_or(base.d),
        dv: args.v_head_dim.or(args.head_dim).unwrap_or(base.dv),
    })
}

/// A device buffer of `n` random values in `dt` storage (16-bit as bit patterns).
fn random(ctx: &Context, n: u64, dt: DType, seed: u64) -> anyhow::Result<Buffer> {
    crate::bench::random_buffer(ctx, n, dt, seed, "bench attention")
}

pub fn attention(selector: &DeviceSelector, args: &AttentionArgs) -> anyhow::Result<ExitCode> {
    let dt = crate::bench::dtype_arg(&args.dtype)?;
    let s = shape_of(args)?;
    if s.hkv == 0 || s.hq % s.hkv != 0 {
        bail!("--heads {} must be a multiple of --kv-heads {}", s.hq, s.hkv);
    }
    let ctx = Context::new(selector)?;
    let fma = std::env::var("VKFORMERS_ATTENTION").is_ok_and(|v| v == "fma");
    let cm2 = !fma && s.dv == s.d && coopmat2::supported(ctx.caps(), dt, s.d);
    let (nq, nkv) = (u64::from(s.batch * s.tq * s.hq * s.d), u64::from(s.batch * s.tk * s.hkv * s.d));
    // v and dv [B, Tk, Hkv, Dv]; o and dO [B, Tq, Hq, Dv].
    let (nv, no) = (u64::from(s.batch * s.tk * s.hkv * s.dv), u64::from(s.batch * s.tq * s.hq * s.dv));
    let nlse = u64::from(s.batch * s.hq * s.tq);
    let (q, k, v, d_o) =
        (random(&ctx, nq, dt, 1)?, random(&ctx, nkv, dt, 2)?, random(&ctx, nv, dt, 3)?, random(&ctx, no, dt, 4)?);
    let bytes = |n: u64| (n * dt.bytes()).next_multiple_of(4);
    let o = ctx.buffer(bytes(no), "o")?;
    let lse = ctx.buffer(nlse * 4, "lse")?;
    let delta = ctx.buffer(nlse * 4, "delta")?;
    let (dq, dk, dv) = (ctx.buffer(bytes(nq), "dq")?, ctx.buffer(bytes(nkv), "dk")?, ctx.buffer(bytes(nv), "dv")?);
    let scratch_len = if cm2 { coopmat2::backward_scratch_len(&s, dt)? } else { 0 };
    let scratch = ctx.buffer(scratch_len.max(1) * 4, "dkdv parts")?;
    let sink_logits: Vec<f32> = (0..s.hq).map(|h| h as f32 * 0.25 - 1.0).collect();
    let sinks = ctx.buffer_from(&sink_logits, "sinks")?;
    let dsinks = ctx.buffer(u64::from(s.hq) * 4, "dsinks")?;
    let mut opt = attention::Options { causal: !args.full, dtype: dt, ..attention::Options::new(s.d) };
    opt.sinks = args.sinks.then(|| sinks.view());
    let x = Qkv { q: q.view(), k: k.view(), v: v.view() };
    let saved = Saved { o: o.view(), lse: lse.view() };
    let g = Grads { dq: dq.view(), dk: dk.view(), dv: dv.view(), delta: delta.view() };
    let step = |rec: &mut Recorder| -> vkformers_vk::Result<()> {
        if cm2 {
            coopmat2::forward_cm2(rec, &x, &saved, &s, &opt)?;
            let sv = (scratch_len > 0).then(|| scratch.view());
            coopmat2::backward_cm2(rec, &x, &saved, d_o.view(), &g, sv, &s, &opt)?;
        } else {
            attention::forward(rec, &x, &saved, &s, &opt)?;
            attention::backward(rec, &x, &saved, d_o.view(), &g, &s, &opt)?;
        }
        match opt.sinks {
            Some(sk) => attention::sinks::backward(rec, (lse.view(), delta.view()), sk, dsinks.view(), &s),
            None => Ok(()),
        }
    };
    let mut warm = ctx.recorder(false)?;
    step(&mut warm)?;
    step(&mut warm)?;
    warm.submit()?;
    // Per kernel name: each run's time (a run's dispatches of one kernel summed).
    let mut runs: Vec<Vec<(&'static str, f64)>> = Vec::new();
    for _ in 0..args.iters.max(1) {
        let mut rec = ctx.recorder(true)?;
        step(&mut rec)?;
        let report = rec.submit()?;
        runs.push(report.timings.iter().map(|(n, ns)| (*n, *ns)).collect());
    }
    print_table(&ctx, &s, !args.full, dt, cm2, &runs)
}

/// Median of each kernel over the runs, and forward / backward totals with TFLOP/s.
fn print_table(
    ctx: &Context,
    s: &Shape,
    causal: bool,
    dt: DType,
    cm2: bool,
    runs: &[Vec<(&'static str, f64)>],
) -> anyhow::Result<ExitCode> {
    let names: Vec<&'static str> =
        runs.first().context("no timings (device lacks timestamps)")?.iter().map(|t| t.0).collect();
    let median = |i: usize| {
        let mut v: Vec<f64> = runs.iter().filter_map(|r| r.get(i).map(|t| t.1)).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut fwd_flops = 2.0 * f64::from(s.batch * s.hq) * f64::from(s.tq) * f64::from(s.tk) * f64::from(s.d + s.dv);
    if causal {
        fwd_flops /= 2.0;
    }
    println!(
        "{}: B {} T {} Hq {} Hkv {} D {} Dv {} {} {:?} ({})",
        ctx.caps().name,
        s.batch,
        s.tq,
        s.hq,
        s.hkv,
        s.d,
        s.dv,
        if causal { "causal" } else { "full" },
        dt,
        if cm2 { "cooperative matrix 2" } else { "FMA kernels" }
    );
    let (mut fwd_ns, mut bwd_ns) = (0.0, 0.0);
    for (i, name) in names.iter().enumerate() {
        let ns = median(i);
        println!("  {name:<40} {:>9.3} ms", ns * 1e-6);
        if name.contains("fwd") {
            fwd_ns += ns;
        } else {
            bwd_ns += ns;
        }
    }
    println!("  forward  {:>9.3} ms  {:>7.1} TFLOP/s", fwd_ns * 1e-6, fwd_flops / fwd_ns * 1e-3);
    println!(
        "  backward {:>9.3} ms  {:>7.1} TFLOP/s (2.5x forward FLOPs)",
        bwd_ns * 1e-6,
        2.5 * fwd_flops / bwd_ns * 1e-3
    );
    Ok(ExitCode::SUCCESS)
}
