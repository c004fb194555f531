//! `vkformers bench train-gemms`: every matrix product of one Llama training step (forward,
//! and backward's dX and dW in the layouts the tape uses, no transposed copies) timed through
//! `gemm_auto`, the entry point training uses, with TFLOP/s per shape and the step's total.
//!
//! Per layer, with T tokens, H hidden, I intermediate, Dkv = kv_heads · head_dim:
//!   forward  y = x · Wᵀ     [T, K] x [N, K]ᵀ   q, o (N = K = H), k, v (N = Dkv), gate, up (N = I),
//!                                               down (N = H, K = I); once: the LM head (N = V)
//!   dX       dX = dY · W    [T, N] x [N, K]
//!   dW       dW = dYᵀ · X   [T, N]ᵀ x [T, K]    (A read transposed)

use std::process::ExitCode;

use vkformers_kernels::gemm_coopmat::{gemm_coopmat, CoopGemm, Engine};
use vkformers_kernels::matmul::auto::{coop_plan, gemm_auto, gemm_split_k, split_k_plan};
use vkformers_kernels::matmul::{DType, GemmDesc};
use vkformers_vk::{Buffer, Context, DeviceSelector};

#[derive(clap::Args)]
pub struct TrainGemmArgs {
    #[arg(long, default_value_t = 2048)]
    hidden: u32,
    #[arg(long, default_value_t = 5632)]
    intermediate: u32,
    #[arg(long, default_value_t = 32)]
    heads: u32,
    #[arg(long, default_value_t = 4)]
    kv_heads: u32,
    #[arg(long, default_value_t = 22)]
    layers: u32,
    #[arg(long, default_value_t = 32000)]
    vocab: u32,
    /// Tokens per step (batch × sequence).
    #[arg(long, default_value_t = 4096)]
    tokens: u32,
    /// Operand type: bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    dtype: String,
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Time every tensor-core engine on every shape (TFLOP/s per engine, and split-K where the
    /// plan allows it) instead of the one `gemm_auto` picks: the measurements behind
    /// `choose_engine`.
    #[arg(long)]
    sweep: bool,
}

/// One product of the step: its name, (m, n, k), A read transposed, B read transposed, and
/// how many times a step runs it.
struct Shape {
    name: String,
    mnk: (u32, u32, u32),
    trans_a: bool,
    trans_b: bool,
    per_step: u32,
}

/// The products of one step: forward, dX and dW of every projection.
fn step_shapes(a: &TrainGemmArgs) -> Vec<Shape> {
    let (t, h, i) = (a.tokens, a.hidden, a.intermediate);
    let dkv = a.kv_heads * (h / a.heads.max(1));
    let linears = [("q/o", h, h, 2), ("k/v", dkv, h, 2), ("gate/up", i, h, 2), ("down", h, i, 1)];
    let mut out = Vec::new();
    let mut add = |name: &str, (n, k, count): (u32, u32, u32)| {
        out.push(Shape { name: format!("{name} fwd"), mnk: (t, n, k), trans_a: false, trans_b: true, per_step: count });
        out.push(Shape { name: format!("{name} dX"), mnk: (t, k, n), trans_a: false, trans_b: false, per_step: count });
        out.push(Shape { name: format!("{name} dW"), mnk: (n, k, t), trans_a: true, trans_b: false, per_step: count });
    };
    for (name, n, k, per_layer) in linears {
        add(name, (n, k, per_layer * a.layers));
    }
    add("lm head", (a.vocab, h, 1));
    out
}

pub fn train_gemms(selector: &DeviceSelector, args: &TrainGemmArgs) -> anyhow::Result<ExitCode> {
    let ctx = Context::new(selector)?;
    let dtype = crate::bench::dtype_arg(&args.dtype)?;
    if args.sweep {
        return sweep(&ctx, args, dtype);
    }
    println!("{} ({:?}): GEMMs of one training step, {} tokens", ctx.caps().name, dtype, args.tokens);
    println!(
        "{:<14} {:>6} {:>6} {:>6} {:>6} {:>9} {:>9} {:>8}",
        "product", "M", "N", "K", "calls", "µs", "TFLOP/s", "ms/step"
    );
    let (mut total_ms, mut total_flop) = (0.0, 0.0);
    for s in step_shapes(args) {
        let (m, n, k) = s.mnk;
        let mut desc = GemmDesc::packed(m, n, k, s.trans_a, s.trans_b);
        desc.dtype = dtype;
        let (a, b, c) = operands(&ctx, (m, n, k), dtype)?;
        // As the tape records it: split along K when the output is too small to fill the GPU.
        let plan = split_k_plan(&desc);
        let ws = ctx.buffer(plan.map_or(4, |p| p.1), "split-K workspace")?;
        let ns = median_ns(&ctx, args.iters, &mut |rec| match plan {
            Some((s, _)) => Ok(gemm_split_k(rec, &desc, s, a.view(), b.view(), ws.view(), c.view())?),
            None => Ok(gemm_auto(rec, &desc, a.view(), b.view(), None, c.view())?),
        })?;
        let flop = 2.0 * f64::from(m) * f64::from(n) * f64::from(k);
        let ms = ns / 1e6 * f64::from(s.per_step);
        total_ms += ms;
        total_flop += flop * f64::from(s.per_step);
        println!(
            "{:<14} {m:>6} {n:>6} {k:>6} {:>6} {:>9.1} {:>9.1} {ms:>8.2}",
            s.name,
            s.per_step,
            ns / 1e3,
            flop / ns / 1e3
        );
    }
    println!(
        "step total: {total_ms:.2} ms of GEMMs, {:.1} TFLOP/s over the step's products",
        total_flop / total_ms / 1e9
    );
    Ok(ExitCode::SUCCESS)
}

/// Zeroed A [m, k] and B [k, n] in `dtype` (zero bits are zero in every type) and an f32 C.
fn operands(ctx: &Context, (m, n, k): (u32, u32, u32), dtype: DType) -> anyhow::Result<(Buffer, Buffer, Buffer)> {
    let a = ctx.buffer(u64::from(m) * u64::from(k) * dtype.bytes(), "A")?;
    let b = ctx.buffer(u64::from(k) * u64::from(n) * dtype.bytes(), "B")?;
    let c = ctx.buffer(u64::from(m) * u64::from(n) * 4, "C")?;
    let mut rec = ctx.recorder(false)?;
    vkformers_kernels::elementwise::fill(&mut rec, a.view(), 0.0)?;
    vkformers_kernels::elementwise::fill(&mut rec, b.view(), 0.0)?;
    rec.submit()?;
    Ok((a, b, c))
}

/// `--sweep`: TFLOP/s of every engine the device has on every product of the step.
fn sweep(ctx: &Context, args: &TrainGemmArgs, dtype: DType) -> anyhow::Result<ExitCode> {
    println!("{} ({:?}): TFLOP/s per engine, {} tokens (- : not on this device)", ctx.caps().name, dtype, args.tokens);
    let names: Vec<String> =
        Engine::ALL.iter().map(|e| format!("{e:?}").replace("Coopmat2", "cm2").to_lowercase()).collect();
    println!(
        "{:<14} {:>6} {:>6} {:>6} {} {:>8}",
        "product",
        "M",
        "N",
        "K",
        names.iter().map(|n| format!("{n:>9}")).collect::<String>(),
        "split-k"
    );
    for s in step_shapes(args) {
        let (m, n, k) = s.mnk;
        let mut desc = GemmDesc::packed(m, n, k, s.trans_a, s.trans_b);
        desc.dtype = dtype;
        let (a, b, c) = operands(ctx, (m, n, k), dtype)?;
        let flop = 2.0 * f64::from(m) * f64::from(n) * f64::from(k);
        let Some(plan) = coop_plan(ctx.caps(), &desc) else {
            anyhow::bail!("{}: no tensor-core plan for {:?} on this device", s.name, dtype);
        };
        let mut row = format!("{:<14} {m:>6} {n:>6} {k:>6} ", s.name);
        for engine in Engine::ALL {
            let best = plan.engine;
            let runs = engine == best || (engine.is_coopmat2() && best.is_coopmat2()) || engine.is_khr();
            if !runs {
                row.push_str(&format!("{:>9}", "-"));
                continue;
            }
            let p = CoopGemm { engine, ..plan };
            let ns =
                median_ns(ctx, args.iters, &mut |rec| Ok(gemm_coopmat(rec, &p, a.view(), b.view(), None, c.view())?))?;
            row.push_str(&format!("{:>9.1}", flop / ns / 1e3));
        }
        match split_k_plan(&desc) {
            Some((splits, bytes)) => {
                let ws = ctx.buffer(bytes, "split-K workspace")?;
                let ns = median_ns(ctx, args.iters, &mut |rec| {
                    Ok(gemm_split_k(rec, &desc, splits, a.view(), b.view(), ws.view(), c.view())?)
                })?;
                row.push_str(&format!(" {:>8.1}", flop / ns / 1e3));
            }
            None => row.push_str(&format!(" {:>8}", "-")),
        }
        println!("{row}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Median GPU time of `iters` back-to-back dispatches (after 2 warm-up runs).
fn median_ns(
    ctx: &Context,
    iters: usize,
    dispatch: &mut dyn FnMut(&mut vkformers_vk::Recorder) -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let mut warm = ctx.recorder(false)?;
    for _ in 0..2 {
        dispatch(&mut warm)?;
    }
    warm.submit()?;
    let mut rec = ctx.recorder(true)?;
    for _ in 0..iters.max(1) {
        dispatch(&mut rec)?;
    }
    let mut t: Vec<f64> = rec.submit()?.timings.iter().map(|t| t.1).collect();
    t.sort_by(f64::total_cmp);
    t.get(t.len() / 2).copied().ok_or_else(|| anyhow::anyhow!("no timings (the device lacks timestamps)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_has_forward_dx_and_dw_of_every_projection() {
        let a = TrainGemmArgs {
            hidden: 64,
            intermediate: 128,
            heads: 4,
            kv_heads: 2,
            layers: 3,
            vocab: 100,
            tokens: 32,
            dtype: "bf16".into(),
            iters: 1,
            sweep: false,
        };
        let s = step_shapes(&a);
        assert_eq!(s.len(), 15);
        let kv = s.iter().find(|s| s.name == "k/v dW").unwrap();
        assert_eq!((kv.mnk, kv.trans_a, kv.per_step), ((32, 64, 32), true, 6));
        let head = s.iter().find(|s| s.name == "lm head fwd").unwrap();
        assert_eq!((head.mnk, head.per_step), ((32, 100, 64), 1));
    }
}
