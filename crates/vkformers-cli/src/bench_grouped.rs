//! `vkformers bench grouped-gemm`: the grouped expert GEMMs of one MoE MLP projection
//! (`vkformers_kernels::moe::grouped`) on a random top-k routing: the forward `y = x ·_e W_eᵀ`,
//! the input gradient `dx = dy ·_e W_e` and the weight gradient `dW_e = dy_eᵀ · x_e`, each timed
//! on the device (median after warm-up) and reported in TFLOP/s; sampled forward entries are
//! checked against f64 dot products.

use std::process::ExitCode;

use anyhow::bail;
use vkformers_kernels::dtype::DType;
use vkformers_kernels::moe::{self, GroupTile, Storage};
use vkformers_kernels::testutil::{storage, Rng};
use vkformers_vk::{Context, DeviceSelector, Recorder};

use crate::bench::{rate, time_median};

#[derive(clap::Args)]
pub struct GroupedArgs {
    #[arg(long, default_value_t = 8)]
    experts: usize,
    #[arg(long, default_value_t = 4096)]
    tokens: usize,
    #[arg(long, default_value_t = 1024)]
    hidden: usize,
    /// Expert intermediate size; the timed projection is the fused gate/up `[E, 2·inter, hidden]`.
    #[arg(long, default_value_t = 3584)]
    inter: usize,
    #[arg(long, default_value_t = 2)]
    top_k: usize,
    /// Operand storage: f32, bf16, f16 (both operands), or f32-bf16 / f32-f16 (f32
    /// activations, 16-bit expert weights).
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Kernel: auto (cooperative matrix 2 where the device has it for --dtype, else the portable
    /// tiles), 64 or 128 (portable tiles), or cm2.
    #[arg(long, default_value = "auto")]
    tile: String,
    #[arg(long, default_value_t = 10)]
    iters: usize,
    #[arg(long)]
    json: bool,
}

fn parse_storage(s: &str) -> anyhow::Result<Storage> {
    use DType::*;
    Ok(match s {
        "f32" => Storage::both(F32),
        "bf16" => Storage::both(BF16),
        "f16" => Storage::both(F16),
        "f32-bf16" => Storage { a: F32, b: BF16 },
        "f32-f16" => Storage { a: F32, b: F16 },
        other => bail!("--dtype {other}: expected f32, bf16, f16, f32-bf16 or f32-f16"),
    })
}

/// Slot counts per expert of `tokens` tokens each routed to `k` distinct random experts.
fn route(tokens: usize, experts: usize, k: usize) -> Vec<i32> {
    let mut rng = Rng::new(3);
    let mut counts = vec![0i32; experts];
    for _ in 0..tokens {
        let mut chosen: Vec<usize> = Vec::with_capacity(k);
        while chosen.len() < k {
            let e = rng.below(experts);
            if !chosen.contains(&e) {
                chosen.push(e);
            }
        }
        chosen.iter().for_each(|&e| counts[e] += 1);
    }
    counts
}

pub fn grouped_gemm(selector: &DeviceSelector, args: &GroupedArgs) -> anyhow::Result<ExitCode> {
    let st = parse_storage(&args.dtype)?;
    let tile = match args.tile.as_str() {
        "auto" => GroupTile::Auto,
        "64" => GroupTile::T64,
        "128" => GroupTile::T128,
        "cm2" => GroupTile::Coopmat2,
        other => bail!("--tile {other}: expected auto, 64, 128 or cm2"),
    };
    if args.top_k == 0 || args.top_k > args.experts {
        bail!("--top-k {} of {} experts", args.top_k, args.experts);
    }
    let ctx = Context::new(selector)?;
    let (e, h, o) = (args.experts, args.hidden, 2 * args.inter);
    let counts = route(args.tokens, e, args.top_k);
    let mut offsets = vec![0i32];
    counts.iter().for_each(|c| offsets.push(offsets.last().unwrap() + c));
    let s = args.tokens * args.top_k;
    let mut rng = Rng::new(1);
    let x = storage::round(st.a, &rng.vec(s * h, 1.0));
    let w = storage::round(st.b, &rng.vec(e * o * h, 1.0));
    let dy = storage::round(st.a, &rng.vec(s * o, 1.0));
    let (xb, wb, dyb) = (
        storage::upload(&ctx, st.a, &x, "x")?,
        storage::upload(&ctx, st.b, &w, "w")?,
        storage::upload(&ctx, st.a, &dy, "dy")?,
    );
    let offb = ctx.buffer_from(&offsets, "offsets")?;
    let (yb, dxb, dwb) = (
        ctx.buffer((s * o) as u64 * 4, "y")?,
        ctx.buffer((s * h) as u64 * 4, "dx")?,
        ctx.buffer((e * o * h) as u64 * 4, "dw")?,
    );
    let flops = moe::grouped::flops(s, h, o);
    let wst = Storage::both(st.a);
    let fwd = |rec: &mut Recorder| -> anyhow::Result<()> {
        Ok(moe::grouped_rows(rec, (xb.view(), wb.view(), yb.view()), offb.view(), (s, h, o, e), true, st, tile)?)
    };
    let dx = |rec: &mut Recorder| -> anyhow::Result<()> {
        Ok(moe::grouped_rows(rec, (dyb.view(), wb.view(), dxb.view()), offb.view(), (s, o, h, e), false, st, tile)?)
    };
    let dw = |rec: &mut Recorder| -> anyhow::Result<()> {
        Ok(moe::grouped_wgrad(rec, (dyb.view(), xb.view(), dwb.view()), offb.view(), (s, o, h, e), wst, tile)?)
    };
    let mut rows = Vec::new();
    for (name, f) in [("forward", &fwd as &dyn Fn(&mut Recorder) -> anyhow::Result<()>), ("dx", &dx), ("dw", &dw)] {
        let ns = time_median(&ctx, args.iters, &mut |rec| f(rec))?;
        rows.push((name, ns, flops / ns / 1e3));
    }
    let max_err = check_forward(&ctx, &yb, (&x, &w), &offsets, (h, o))?;
    report(args, &ctx, &rows, max_err)
}

/// Largest relative error of 64 sampled forward entries against f64 dot products.
fn check_forward(
    ctx: &Context,
    yb: &vkformers_vk::Buffer,
    (x, w): (&[f32], &[f32]),
    offsets: &[i32],
    (h, o): (usize, usize),
) -> anyhow::Result<f64> {
    let y: Vec<f32> = ctx.read_vec(yb.view())?;
    let s = offsets[offsets.len() - 1] as usize;
    let mut rng = Rng::new(9);
    Ok((0..64)
        .map(|_| {
            let (r, c) = (rng.below(s), rng.below(o));
            let e = offsets.iter().rposition(|&b| b as usize <= r).unwrap_or(0).min(offsets.len() - 2);
            let wrow = &w[(e * o + c) * h..(e * o + c + 1) * h];
            let terms = x[r * h..(r + 1) * h].iter().zip(wrow).map(|(a, b)| f64::from(*a) * f64::from(*b));
            let (dot, mag) = terms.fold((0.0, 0.0), |(d, m), t| (d + t, m + t.abs()));
            (f64::from(y[r * o + c]) - dot).abs() / f64::max(mag, 1e-30)
        })
        .fold(0.0, f64::max))
}

fn report(args: &GroupedArgs, ctx: &Context, rows: &[(&str, f64, f64)], max_err: f64) -> anyhow::Result<ExitCode> {
    let shape = format!(
        "E {} tokens {} hidden {} inter {} top-{} {}",
        args.experts, args.tokens, args.hidden, args.inter, args.top_k, args.dtype
    );
    if args.json {
        let per: Vec<_> = rows
            .iter()
            .map(|(n, ns, t)| serde_json::json!({"product": n, "median_ms": ns / 1e6, "tflops": t}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"op": "grouped_gemm", "experts": args.experts, "tokens": args.tokens, "hidden": args.hidden,
                "inter": args.inter, "top_k": args.top_k, "dtype": args.dtype, "tile": args.tile, "products": per,
                "max_rel_err": max_err, "device": ctx.caps().name})
        );
    } else {
        println!("grouped gemm {shape} on {} (max rel err of 64 samples {max_err:.1e}):", ctx.caps().name);
        for (n, ns, t) in rows {
            println!("  {n:<8} {:.3} ms, {}", ns / 1e6, rate(*t));
        }
    }
    if max_err > 1e-3 {
        bail!("sampled entries differ from the f64 reference by {max_err:e}: the kernel is wrong here");
    }
    Ok(ExitCode::SUCCESS)
}
