//! `vkformers bench gemv`: times the decode GEMV (`matmul/gemv`) alone at a decode step's
//! shapes, as a chain of dependent calls (each call rewrites the previous one's y, so a barrier
//! separates them as in a decode step). Per shape and row count it reports the device time per
//! call (submit to done over the chain), the median between timestamps, and the weight bytes
//! streamed per second, beside a plain copy's bandwidth measured in the same process: the
//! step's GEMVs read ~2.2 GB of a 1.1B model's weights a token, so this says how far each
//! product is from the memory's rate and how much of a call is fixed cost.
//!
//! The default shapes are TinyLlama-1.1B's decode products as `N x K` (`[out, in]`): the packed
//! q/k/v (2560 x 2048), o_proj (2048 x 2048), the packed gate/up (11264 x 2048), down_proj
//! (2048 x 5632) and the LM head (32000 x 2048). `--normed` times the products that read an
//! RMSNorm of x plus a residual while they load it (what a decode step's q/k/v and gate/up
//! run on a GPU since the norms moved into the GEMV): every workgroup also sums its rows'
//! squares over all of K.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::bail;
use vkformers_kernels::matmul::gemv::{self, GemvDesc, NormedInput};
use vkformers_kernels::testutil::Rng;
use vkformers_vk::{Buffer, Context, DeviceSelector};

#[derive(clap::Args)]
pub struct GemvBenchArgs {
    /// Products as `NxK` (W `[N, K]`), comma-separated.
    #[arg(long, default_value = "2560x2048,2048x2048,11264x2048,2048x5632,32000x2048")]
    shapes: String,
    /// Rows of x (the batch of a decode step), comma-separated, 1 to 16.
    #[arg(long, default_value = "1,4")]
    rows: String,
    /// Weight storage: bf16, f16 or f32 (x and y are f32).
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// The RMSNorm (with a residual add) of x computed inside the product.
    #[arg(long)]
    normed: bool,
    /// Dependent calls in the timed chain.
    #[arg(long, default_value_t = 200)]
    calls: usize,
    /// Loads issued ahead in the kernel (`PREFETCH`): 0, 1 or both (`0,1`: each shape timed
    /// with each, interleaved, in one process); default: `VKFORMERS_GEMV_PREFETCH` (on).
    #[arg(long, value_delimiter = ',')]
    prefetch: Vec<u8>,
    /// Caps on the workgroups of a call (0: the default, one per block of 4 rows of W, or 528 for
    /// staged products), each timed with each `--prefetch`: a capped workgroup does several
    /// blocks, its norm prologue and staging once; default: `VKFORMERS_GEMV_MAX_GROUPS`.
    #[arg(long, value_delimiter = ',')]
    max_groups: Vec<u32>,
    /// A block's next chunk pair loaded while the current one is multiplied (`PIPE`): 0, 1 or
    /// both, each with each `--prefetch` and `--max-groups`; default: `VKFORMERS_GEMV_PIPE` (off).
    #[arg(long, value_delimiter = ',')]
    pipe: Vec<u8>,
    /// The input rows staged once per workgroup in shared memory (`STAGE`): 0, 1 or both, each
    /// with each of the others; default: `VKFORMERS_GEMV_STAGE` (on GPUs). Lines say `staged`
    /// where the tuning stages (where the rows fit in shared memory).
    #[arg(long, value_delimiter = ',')]
    stage: Vec<u8>,
    /// Cost probes (gemv.comp's `PROBE` bits, each value timed with each of the others): 1 leaves
    /// out the input (no norm prologue, no staging, x taken as 1), 2 the loads of W, 4 the
    /// reduction across subgroups; 7 leaves a launch and the products of constants. Results are
    /// wrong under a probe (not checked); default 0, the kernel.
    #[arg(long, value_delimiter = ',')]
    probe: Vec<u32>,
    /// Copies of each W the chain cycles through (call i reads copy i mod N): 1 times a W that
    /// stays in L2 when it fits (~50 MB on an H100/H200); 22 (a layer's worth each, as a decode
    /// step reads) times the products streaming from memory, as they do inside a step.
    #[arg(long, default_value_t = 1)]
    copies: usize,
    /// Milliseconds of untimed chains before each measurement (the clocks ramp under load).
    #[arg(long, default_value_t = 1500)]
    warm_ms: u64,
}

/// `NxK` items of `--shapes`.
fn parse_shapes(s: &str) -> anyhow::Result<Vec<(u32, u32)>> {
    s.split(',')
        .map(|item| {
            let (n, k) = item.trim().split_once('x').ok_or_else(|| anyhow::anyhow!("--shapes {item}: expected NxK"))?;
            Ok((n.parse()?, k.parse()?))
        })
        .collect()
}

fn parse_rows(s: &str) -> anyhow::Result<Vec<u32>> {
    let rows = s.split(',').map(|r| r.trim().parse::<u32>()).collect::<Result<Vec<_>, _>>()?;
    if let Some(bad) = rows.iter().find(|m| !(1..=gemv::MAX_ROWS).contains(*m)) {
        bail!("--rows {bad}: 1 to {}", gemv::MAX_ROWS);
    }
    Ok(rows)
}

/// The buffers of one product: W (and its stored values), x, y, and the normed input's gain,
/// residual and sum.
struct Operands {
    /// `--copies` buffers holding W's bytes (call i reads copy i mod their count).
    ws: Vec<Buffer>,
    w_vals: Vec<f32>,
    x: Buffer,
    y: Buffer,
    gain: Buffer,
    r: Buffer,
    hs: Buffer,
}

fn operands(ctx: &Context, desc: &GemvDesc, copies: usize) -> anyhow::Result<Operands> {
    let (m, n, k) = (desc.m as usize, desc.n as usize, desc.k as usize);
    let (w_bytes, w_vals) = crate::bench::portable_operand(n * k, desc.dtype, 1);
    Ok(Operands {
        ws: (0..copies.max(1)).map(|_| ctx.buffer_from(&w_bytes, "w")).collect::<Result<_, _>>()?,
        w_vals,
        x: ctx.buffer_from(&Rng::new(2).vec(m * k, 1.0), "x")?,
        y: ctx.buffer((m * n * 4) as u64, "y")?,
        gain: ctx.buffer_from(&Rng::new(3).vec(k, 1.0), "gain")?,
        r: ctx.buffer_from(&Rng::new(4).vec(m * k, 1.0), "residual")?,
        hs: ctx.buffer((m * k * 4) as u64, "x + residual")?,
    })
}

/// Bytes per second of a device copy of 256 MiB (the reference the products are read against).
fn copy_bandwidth(ctx: &Context) -> anyhow::Result<f64> {
    let bytes = 256u64 << 20;
    let (a, b) = (ctx.buffer(bytes, "copy a")?, ctx.buffer(bytes, "copy b")?);
    let run = |n: usize| -> anyhow::Result<f64> {
        let mut rec = ctx.recorder(false)?;
        for i in 0..n {
            let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
            vkformers_kernels::elementwise::copy(&mut rec, from.view(), to.view())?;
        }
        let t = Instant::now();
        rec.submit()?;
        Ok(t.elapsed().as_secs_f64())
    };
    run(4)?;
    let n = 20;
    // A copy reads and writes every byte.
    Ok(2.0 * bytes as f64 * n as f64 / run(n)?)
}

/// Largest relative error of 32 sampled entries of y against f64 dot products of the same
/// inputs (x̂ = RMSNorm(x + r) · g for `normed`), relative to `sum |x̂ w|`.
fn check_samples(ctx: &Context, desc: &GemvDesc, o: &Operands, normed: bool) -> anyhow::Result<f64> {
    let (m, n, k) = (desc.m as usize, desc.n as usize, desc.k as usize);
    let y: Vec<f32> = ctx.read_vec(o.y.view())?;
    let mut x: Vec<f64> = ctx.read_vec::<f32>(o.x.view())?.into_iter().map(f64::from).collect();
    if normed {
        let r: Vec<f32> = ctx.read_vec(o.r.view())?;
        let g: Vec<f32> = ctx.read_vec(o.gain.view())?;
        for (i, row) in x.chunks_mut(k).enumerate() {
            row.iter_mut().zip(&r[i * k..]).for_each(|(h, r)| *h += f64::from(*r));
            let rstd = 1.0 / (row.iter().map(|h| h * h).sum::<f64>() / k as f64 + 1e-5).sqrt();
            row.iter_mut().zip(&g).for_each(|(h, g)| *h *= rstd * f64::from(*g));
        }
    }
    let mut rng = Rng::new(7);
    let mut worst = 0.0f64;
    for _ in 0..32 {
        let (i, j) = (rng.below(m), rng.below(n));
        let (mut dot, mut mag) = (0.0f64, 0.0f64);
        for (xv, wv) in x[i * k..(i + 1) * k].iter().zip(&o.w_vals[j * k..(j + 1) * k]) {
            dot += xv * f64::from(*wv);
            mag += (xv * f64::from(*wv)).abs();
        }
        worst = worst.max((f64::from(y[i * n + j]) - dot).abs() / mag.max(1e-30));
    }
    Ok(worst)
}

/// Call `i`: the plain product, or the normed one (residual added, gain w), on copy i of W.
fn record_call(
    rec: &mut vkformers_vk::Recorder,
    desc: &GemvDesc,
    o: &Operands,
    (normed, i): (bool, usize),
) -> anyhow::Result<()> {
    let w = &o.ws[i % o.ws.len()];
    if normed {
        let norm = NormedInput {
            gain: Some(o.gain.view()),
            unit_offset: false,
            eps: 1e-5,
            residual: Some((o.r.view(), o.hs.view())),
            normed: None,
        };
        gemv::gemv_group_normed(rec, desc, o.x.view(), &norm, &[(desc.n, w.view(), o.y.view())])?;
    } else {
        gemv::gemv(rec, desc, o.x.view(), w.view(), None, o.y.view())?;
    }
    Ok(())
}

pub fn gemv_bench(selector: &DeviceSelector, args: &GemvBenchArgs) -> anyhow::Result<ExitCode> {
    let dt = crate::bench::dtype_arg(&args.dtype)?;
    let (shapes, rows) = (parse_shapes(&args.shapes)?, parse_rows(&args.rows)?);
    let ctx = Context::new(selector)?;
    let copy = copy_bandwidth(&ctx)?;
    println!(
        "{}: decode GEMV, {:?} weights{}, chains of {} dependent calls over {} copies of W; a 256 MiB copy moves {:.0} GB/s",
        ctx.caps().name,
        dt,
        if args.normed { ", RMSNorm + residual inside" } else { "" },
        args.calls,
        args.copies.max(1),
        copy / 1e9
    );
    let tunings = tunings_of(args);
    for &(n, k) in &shapes {
        for &m in &rows {
            for tuning in &tunings {
                time_one(&ctx, args, (GemvDesc::packed(m, n, k, dt), *tuning), copy)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Every combination of `--max-groups`, `--stage`, `--pipe`, `--probe` and `--prefetch` (each
/// defaulting to the environment's; `--probe` to none).
fn tunings_of(args: &GemvBenchArgs) -> Vec<gemv::Tuning> {
    let env = gemv::Tuning::from_env();
    let switch = |given: &[u8], default: bool| -> Vec<bool> {
        if given.is_empty() {
            vec![default]
        } else {
            given.iter().map(|&v| v != 0).collect()
        }
    };
    let (prefetch, pipe) = (switch(&args.prefetch, env.prefetch), switch(&args.pipe, env.pipe));
    let stage: Vec<Option<bool>> =
        if args.stage.is_empty() { vec![env.stage] } else { args.stage.iter().map(|&v| Some(v != 0)).collect() };
    let caps: Vec<Option<u32>> = if args.max_groups.is_empty() {
        vec![env.max_groups]
    } else {
        args.max_groups.iter().map(|&g| (g > 0).then_some(g)).collect()
    };
    let probes = if args.probe.is_empty() { vec![0] } else { args.probe.clone() };
    let mut all = Vec::new();
    for &max_groups in &caps {
        for &stage in &stage {
            for &pipe in &pipe {
                for &probe in &probes {
                    all.extend(prefetch.iter().map(|&prefetch| gemv::Tuning {
                        prefetch,
                        max_groups,
                        pipe,
                        stage,
                        probe,
                    }));
                }
            }
        }
    }
    all
}

/// Times one product under `tuning` and prints its line.
fn time_one(
    ctx: &Context,
    args: &GemvBenchArgs,
    (desc, tuning): (GemvDesc, gemv::Tuning),
    copy: f64,
) -> anyhow::Result<()> {
    let (m, n, k) = (desc.m, desc.n, desc.k);
    let o = operands(ctx, &desc, args.copies)?;
    let mut i = 0;
    let (per_call, medians) = gemv::with_tuning(tuning, || {
        crate::bench::time_chain(ctx, (args.calls, args.warm_ms), |rec| {
            i += 1;
            record_call(rec, &desc, &o, (args.normed, i))
        })
    })?;
    // A probe leaves parts of the kernel out: its results are not the product's.
    let err = if tuning.probe == 0 { check_samples(ctx, &desc, &o, args.normed)? } else { f64::NAN };
    if err > 1e-4 {
        bail!("{n} x {k} m {m}: sampled entries differ from the f64 reference by {err:e}: the kernel is wrong here");
    }
    let per_call_us = per_call * 1e6;
    let median_us = medians.first().map_or(f64::NAN, |k| k.1 / 1e3);
    let bytes = desc.weight_bytes() as f64;
    let rate = bytes / (per_call_us * 1e-6);
    let pf = u8::from(tuning.prefetch);
    let cap = tuning.max_groups.map_or(String::new(), |g| format!(" groups ≤ {g}"))
        + if tuning.pipe { " pipe" } else { "" }
        + if tuning.stages_on(ctx.caps()) { " staged" } else { "" }
        + &if tuning.probe != 0 { format!(" probe {}", tuning.probe) } else { String::new() };
    println!(
        "  {n:>6} x {k:<6} m {m:>2} prefetch {pf}{cap}: {per_call_us:>8.2} µs a call, {median_us:>8.2} µs median between timestamps, \
         {:>7.0} GB/s of W ({:>3.0}% of the copy), {:>6.2} µs at the copy's rate (max rel err {err:.1e})",
        rate / 1e9,
        100.0 * rate / copy,
        bytes / copy * 1e6
    );
    Ok(())
}
