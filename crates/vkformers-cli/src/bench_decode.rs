//! `vkformers bench decode`: times the paged decode attention (`attention/decode`, which merges
//! its splits itself) alone on one shape, for each split count asked, as a chain of dependent calls (each
//! call overwrites the previous one's output, so barriers separate them as in a decode step).
//! Reports the device time per call (submit to done over the chain, and the median between
//! timestamps) and the effective K+V bandwidth. The default shape is TinyLlama-1.1B's attention
//! at batch 1 over a 1,536-key cache (the `generate --profile` shape).

use std::process::ExitCode;
use std::time::Instant;

use anyhow::bail;
use vkformers_kernels::attention::decode::{
    self, DecodeOptions, DecodeOutputs, DecodeShape, PagedInputs, SMALL_TILE, TILE,
};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::testutil::Rng;
use vkformers_vk::{Context, DeviceSelector};

#[derive(clap::Args)]
pub struct DecodeBenchArgs {
    #[arg(long, default_value_t = 1)]
    batch: u32,
    #[arg(long, default_value_t = 32)]
    heads: u32,
    #[arg(long, default_value_t = 4)]
    kv_heads: u32,
    #[arg(long, default_value_t = 64)]
    head_dim: u32,
    /// Keys in every row's cache.
    #[arg(long, default_value_t = 1536)]
    len: u32,
    #[arg(long, default_value_t = 16)]
    block_size: u32,
    /// Pool storage: bf16, f16 or f32 (q and o f32 with 16-bit pools, as the decoder runs).
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Split counts to time, comma-separated; `auto` is the launcher's choice.
    #[arg(long, default_value = "auto,1,4,8,12,16,24,32")]
    splits: String,
    /// Key tile: 128, or 64 (head dims up to 128).
    #[arg(long, default_value_t = TILE)]
    tile: u32,
    /// Dependent calls in the timed chain.
    #[arg(long, default_value_t = 200)]
    calls: usize,
    /// Megabytes copied between calls (0 = none): evicts the cache from L2 as a decode step's
    /// weight reads do, so the calls read K and V from memory.
    #[arg(long, default_value_t = 0)]
    flush_mb: u64,
    /// Milliseconds of untimed chains before each measurement (the clocks ramp under load).
    #[arg(long, default_value_t = 1500)]
    warm_ms: u64,
}

pub fn decode_attention(selector: &DeviceSelector, args: &DecodeBenchArgs) -> anyhow::Result<ExitCode> {
    let dt = crate::bench::dtype_arg(&args.dtype)?;
    if args.tile != TILE && args.tile != SMALL_TILE {
        bail!("--tile {}: 128 or 64", args.tile);
    }
    let ctx = Context::new(selector)?;
    let blocks_per_row = args.len.div_ceil(args.block_size);
    let s = DecodeShape {
        batch: args.batch,
        tq: 1,
        hq: args.heads,
        hkv: args.kv_heads,
        d: args.head_dim,
        dv: args.head_dim,
        v_row: args.head_dim,
        block_size: args.block_size,
        num_blocks: blocks_per_row * args.batch,
        max_blocks: blocks_per_row,
    };
    let pool = u64::from(s.num_blocks * s.block_size * s.hkv * s.d);
    let q_len = u64::from(s.batch * s.hq * s.d);
    let k = crate::bench::random_buffer(&ctx, pool, dt, 1, "k pool")?;
    let v = crate::bench::random_buffer(&ctx, pool, dt, 2, "v pool")?;
    let q = ctx.buffer_from(&Rng::new(3).vec(q_len as usize, 1.0), "q")?;
    // Row b owns blocks b·n .. (b+1)·n in order.
    let table: Vec<i32> = (0..s.num_blocks as i32).collect();
    let table = ctx.buffer_from(&table, "table")?;
    let lens = ctx.buffer_from(&vec![args.len as i32; s.batch as usize], "lens")?;
    let o = ctx.buffer(q_len * 4, "o")?;
    let lse = ctx.buffer(u64::from(s.batch * s.hq) * 4, "lse")?;
    let work = ctx.buffer(decode::work_floats(&s, decode::MAX_SPLITS) * 4, "work")?;
    // Zero once: every call leaves the split counters zero.
    let counters = ctx.buffer_from(&vec![0u32; decode::counter_words(&s) as usize], "counters")?;
    let opt = DecodeOptions { dtype: dt, act: (dt != DType::F32).then_some(DType::F32), ..DecodeOptions::new(s.d) };
    let x = PagedInputs { q: q.view(), k: k.view(), v: v.view(), table: table.view(), lens: lens.view() };
    let flush_bytes = (args.flush_mb << 20).max(4);
    let (fa, fb) = (ctx.buffer(flush_bytes, "flush a")?, ctx.buffer(flush_bytes, "flush b")?);
    let kv_bytes = 2.0 * f64::from(args.len * s.batch * s.hkv * s.d) * dt.bytes() as f64;
    println!(
        "{}: decode attention B {} Hq {} Hkv {} D {} keys {} block {} {:?} pools, tile {}",
        ctx.caps().name,
        s.batch,
        s.hq,
        s.hkv,
        s.d,
        args.len,
        s.block_size,
        dt,
        args.tile
    );
    for item in args.splits.split(',') {
        let splits = match item.trim() {
            "auto" => decode::splits_for(&s, args.len, args.tile),
            n => n.parse::<u32>().map_err(|e| anyhow::anyhow!("--splits {n}: {e}"))?,
        };
        let work_view = work.slice(0, decode::work_floats(&s, splits) * 4);
        let out = DecodeOutputs {
            o: o.view(),
            lse: lse.view(),
            work: (splits > 1).then_some(work_view),
            counters: (splits > 1).then(|| counters.view()),
        };
        let chain = |timed: bool| -> anyhow::Result<(f64, Vec<(&'static str, f64)>)> {
            let mut rec = ctx.recorder(timed)?;
            for _ in 0..args.calls {
                if args.flush_mb > 0 {
                    vkformers_kernels::elementwise::copy(&mut rec, fa.view(), fb.view())?;
                }
                decode::forward_tiled(&mut rec, &x, &out, &s, &opt, (splits, args.tile))?;
            }
            let t = Instant::now();
            let report = rec.submit()?;
            Ok((t.elapsed().as_secs_f64(), report.timings.iter().map(|(n, ns)| (*n, *ns)).collect()))
        };
        // Chains for `--warm-ms` first: the GPU's clocks ramp up only after ~1 s of load.
        let warm = Instant::now();
        while warm.elapsed().as_millis() < u128::from(args.warm_ms) {
            chain(false)?;
        }
        let (wall, _) = chain(false)?;
        let (_, timings) = chain(true)?;
        let per_call_us = wall / args.calls as f64 * 1e6;
        let mut kernels: Vec<(&str, Vec<f64>)> = Vec::new();
        for (name, ns) in timings {
            match kernels.iter_mut().find(|(n, _)| *n == name) {
                Some((_, v)) => v.push(ns),
                None => kernels.push((name, vec![ns])),
            }
        }
        let medians: Vec<String> = kernels
            .iter_mut()
            .map(|(name, v)| {
                v.sort_by(f64::total_cmp);
                format!("{name} {:.2} µs", v[v.len() / 2] / 1e3)
            })
            .collect();
        println!(
            "  splits {splits:>2}: {per_call_us:>7.2} µs a call (chain of {}{}), {:>7.1} GB/s of K+V; medians: {}",
            args.calls,
            if args.flush_mb > 0 { format!(", each after a {} MB copy", args.flush_mb) } else { String::new() },
            kv_bytes / (per_call_us * 1e3),
            medians.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
