//! `vkformers bench mma-peak`: the tensor-core multiply-add ceiling of this device through
//! Vulkan (operands loaded once, then only chained multiply-adds), per cooperative-matrix
//! shape the GEMMs use; `bench gemm`'s TFLOP/s read against it say how much of a GEMM's gap to
//! cuBLAS is operand traffic and how much the driver's multiply-add rate.

use std::process::ExitCode;

use anyhow::Context as _;
use vkformers_kernels::mma_peak::{self, PROBES};
use vkformers_vk::{Context, DeviceSelector};

#[derive(clap::Args)]
pub struct PeakArgs {
    /// Workgroups per dispatch (default: 8 per multiprocessor of an H200).
    #[arg(long, default_value_t = 1056)]
    groups: u32,
    /// Chained multiply-adds per workgroup.
    #[arg(long, default_value_t = 2048)]
    iters: u32,
    /// Timed dispatches per probe (after one warm-up).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    #[arg(long)]
    json: bool,
}

pub fn mma_peak(selector: &DeviceSelector, args: &PeakArgs) -> anyhow::Result<ExitCode> {
    let ctx = Context::new(selector)?;
    let mut ran = 0;
    for p in PROBES.iter().filter(|p| mma_peak::runs_on(ctx.caps(), p)) {
        let a = crate::bench::upload(&ctx, &vec![0u8; (p.operand_elems * 2) as usize], "operands")?;
        let c = ctx.buffer(u64::from(args.groups) * p.out_per_group * 4, "accumulators")?;
        let mut warm = ctx.recorder(false)?;
        mma_peak::record(&mut warm, p, args.groups, args.iters, a.view(), c.view())?;
        warm.submit()?;
        let mut rec = ctx.recorder(true)?;
        for _ in 0..args.repeats {
            mma_peak::record(&mut rec, p, args.groups, args.iters, a.view(), c.view())?;
        }
        let mut ns: Vec<f64> = rec.submit()?.timings.iter().map(|t| t.1).collect();
        ns.sort_by(f64::total_cmp);
        let median = *ns.get(ns.len() / 2).context("no timings (device lacks timestamps)")?;
        let tflops = p.flops_per_iter * f64::from(args.groups) * f64::from(args.iters) / median / 1e3;
        if args.json {
            println!(
                "{}",
                serde_json::json!({"op": "mma_peak", "probe": p.name, "median_ms": median / 1e6, "tflops": tflops, "device": ctx.caps().name})
            );
        } else {
            println!("mma peak, {}: {tflops:.1} TFLOP/s ({:.3} ms)", p.name, median / 1e6);
        }
        ran += 1;
    }
    if ran == 0 {
        anyhow::bail!("{} has no bf16 cooperative matrices with subgroups of 32: nothing to measure", ctx.caps().name);
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct DispatchArgs {
    /// Dependent dispatches in the chain.
    #[arg(long, default_value_t = 2000)]
    count: usize,
    /// f32 elements each dispatch copies (2048: one decode-step hidden row of a 1.1B model).
    #[arg(long, default_value_t = 2048)]
    elems: u64,
    #[arg(long)]
    json: bool,
}

/// `vkformers bench dispatch`: the device time of one small dispatch in a chain where each reads
/// what the previous wrote (so a barrier separates them), as a decode step's ~240 dispatches
/// are: the floor a decode step pays per dispatch whatever its kernels do.
pub fn dispatch_latency(selector: &DeviceSelector, args: &DispatchArgs) -> anyhow::Result<ExitCode> {
    use std::time::Instant;
    use vkformers_kernels::elementwise;
    let ctx = Context::new(selector)?;
    let bytes = args.elems * 4;
    let (x, y) = (ctx.buffer(bytes, "x")?, ctx.buffer(bytes, "y")?);
    let chain = |timed: bool| -> anyhow::Result<(f64, f64, Vec<f64>)> {
        let t0 = Instant::now();
        let mut rec = ctx.recorder(timed)?;
        for i in 0..args.count {
            let (from, to) = if i % 2 == 0 { (&x, &y) } else { (&y, &x) };
            elementwise::copy(&mut rec, from.view(), to.view())?;
        }
        let recorded = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let report = rec.submit()?;
        Ok((recorded, t1.elapsed().as_secs_f64(), report.timings.iter().map(|t| t.1).collect()))
    };
    chain(false)?;
    let (recorded, ran, _) = chain(false)?;
    let (_, _, mut ns) = chain(true)?;
    ns.sort_by(f64::total_cmp);
    let median_us = ns.get(ns.len() / 2).copied().unwrap_or(f64::NAN) / 1e3;
    let n = args.count as f64;
    let (rec_us, wall_us) = (recorded / n * 1e6, ran / n * 1e6);
    if args.json {
        println!(
            "{}",
            serde_json::json!({"op": "dispatch_chain", "count": args.count, "elems": args.elems, "record_us": rec_us, "submit_wait_us": wall_us, "timestamped_median_us": median_us, "device": ctx.caps().name})
        );
    } else {
        println!(
            "{} dependent copies of {} floats on {}: {wall_us:.2} µs each on the device (submit to done / count), {rec_us:.2} µs each to record, {median_us:.2} µs median between timestamps",
            args.count,
            args.elems,
            ctx.caps().name
        );
    }
    Ok(ExitCode::SUCCESS)
}
