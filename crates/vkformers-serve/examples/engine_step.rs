//! The serving engine's host cost per decode step, without HTTP: `B` requests (random prompts of
//! `P` ± `P/2` tokens, greedy or seeded sampling, `N` new tokens each) submitted at once to an
//! engine of `B` slots on the served model's folder, run to the end. Reports, over the decode
//! steps after the first few (every row running, the device one step ahead), per step: wall
//! time, the engine's own split (recording, submission, device wait: `Engine::step_times`), the
//! engine thread's CPU time (from the kernel's schedstat: on lavapipe the device's work runs on
//! other threads, so this is the host's share: our recording plus the driver's), and the batches
//! submitted, and the Rust heap allocations (a counting allocator: exact whatever else runs); then the dispatches, barriers and batches of a few profiled steps; and a checksum of
//! every request's tokens (equal before and after a host-side change: same tokens).
//!
//! `cargo run --release -p vkformers-serve --example engine_step -- MODEL_DIR [B] [P] [N] [sample]`
//! (default B = 32, P = 16, N = 48). `perf record -g -t TID` on the printed thread id splits the
//! host time by function.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use vkformers_generate::engine::{Engine, Finished, Request, RequestOptions, Sink};
use vkformers_generate::generation::GenerateOptions;
use vkformers_generate::{SamplingParams, TokenLogprob};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::{Context, DeviceSelector};

/// Steps left out of the measured window: the prefill and the first decode steps (pipelines
/// created, buffers pooled).
const WARMUP: usize = 4;
/// Steps profiled (per-dispatch counts) after the measured window.
const PROFILED: usize = 2;

/// The system allocator, counting the Rust heap allocations (ours: the driver's own C
/// allocations are not seen) so that a window's count per step is exact, whatever else runs.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as `GlobalAlloc::realloc` requires.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Default)]
struct Gather {
    done: HashMap<u64, Finished>,
}

impl Sink for Gather {
    fn token(&mut self, _: u64, _: &[u32], _: Option<&TokenLogprob>) -> bool {
        false
    }

    fn finished(&mut self, id: u64, done: Finished) {
        self.done.insert(id, done);
    }
}

/// This thread's time on a CPU so far, in seconds (Linux schedstat; 0 elsewhere).
fn thread_cpu_secs() -> f64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    text.split_whitespace().next().and_then(|n| n.parse::<f64>().ok()).unwrap_or(0.0) * 1e-9
}

/// Request `i`: a prompt of `p / 2 + (i·7919 mod p)` ids below `vocab`, `n` new tokens.
fn request(i: usize, (p, n, vocab): (usize, usize, usize), sample: bool) -> Request {
    let len = (p / 2 + (i * 7919) % p.max(1)).max(1);
    let prompt = (0..len).map(|j| (3 + (i * 131 + j * 17) % (vocab - 3)) as u32).collect();
    let mut opts = RequestOptions::from_generate(&GenerateOptions::greedy(n));
    if sample {
        opts.params = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.9, ..SamplingParams::sampling() };
        opts.seed = i as u64;
    }
    Request { id: i as u64, prompt, opts }
}

/// FNV-1a over every request's tokens, in id order.
fn checksum(done: &HashMap<u64, Finished>) -> u64 {
    let mut ids: Vec<&u64> = done.keys().collect();
    ids.sort();
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for id in ids {
        for &t in done[id].tokens.iter().chain([&u32::MAX]) {
            h = (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().ok_or("give a model folder")?);
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (b, p, n) = (num(1, 32), num(2, 16), num(3, 48));
    let sample = args.get(4).is_some_and(|a| a == "sample");
    let ctx = Context::new(&DeviceSelector::Best)?;
    let g = Graph::new(&ctx);
    let dtype = vkformers_io::read_json(dir.join("config.json"))
        .ok()
        .and_then(|c| c.get("torch_dtype").and_then(|d| d.as_str()).map(str::to_string));
    let dtype = match dtype.as_deref() {
        Some("bfloat16") => vkformers_tensor::DType::BF16,
        Some("float16") => vkformers_tensor::DType::F16,
        _ => vkformers_tensor::DType::F32,
    };
    let model = Model::load_for_inference(&g, &dir, dtype)?;
    g.set_autocast(Some(model.weight_dtype()));
    let vocab = model.spec.vocab;
    let mut engine = Engine::new(&g, &model, b, p * 2 + n + 16)?;
    for i in 0..b {
        engine.submit(request(i, (p, n, vocab), sample))?;
    }
    let tid = std::fs::read_link("/proc/thread-self").map(|l| l.display().to_string()).unwrap_or_default();
    println!("device: {} | B {b} P {p} N {n} sample {sample} | thread {tid}", ctx.caps().name);
    let mut sink = Gather::default();
    let (mut steps, mut window) = (0usize, None);
    let mut profiled = 0;
    while !engine.is_idle() {
        steps += 1;
        // The measured window: from step WARMUP to PROFILED steps before the last decode step.
        if steps == WARMUP + 1 {
            let allocs = ALLOCATIONS.load(Ordering::Relaxed);
            window = Some((Instant::now(), thread_cpu_secs(), engine.step_times(), (g.submissions(), allocs), steps));
            println!("pipelines: {}", ctx.pipeline_count());
        }
        if steps + PROFILED + 1 == n && profiled == 0 {
            report_window(&engine, &g, window.take(), steps);
            println!("pipelines: {}", ctx.pipeline_count());
            g.set_profiling(true);
            profiled = steps;
        }
        engine.step(&g, &mut sink)?;
    }
    if let Some(p) = g.take_profile()? {
        let steps = (steps - profiled + 1).max(1) as f64;
        println!(
            "profiled {steps} steps: {:.1} dispatches, {:.1} barriers, {:.2} batches per step",
            p.dispatches as f64 / steps,
            p.barriers as f64 / steps,
            p.batches as f64 / steps
        );
        if std::env::var("ENGINE_STEP_TABLE").is_ok_and(|v| v == "1") {
            print!("{}", p.table(steps as u64, "step"));
        }
    }
    let tokens: usize = sink.done.values().map(|d| d.tokens.len()).sum();
    println!("requests {} tokens {tokens} checksum {:016x}", sink.done.len(), checksum(&sink.done));
    Ok(())
}

/// (start, thread CPU seconds, step times, (batches submitted, allocations), first step).
type Window = (Instant, f64, vkformers_generate::engine::StepTimes, (usize, u64), usize);

/// Prints the per-step means of the window that started at `start` and ends before step `now`.
fn report_window(engine: &Engine<'_>, g: &Graph<'_>, window: Option<Window>, now: usize) {
    let Some((wall, cpu, times, (subs, allocs), first)) = window else { return };
    let k = (now - first).max(1) as f64;
    let t = engine.step_times();
    let ms = |s: f64| s * 1e3 / k;
    println!(
        "{} decode steps, per step: wall {:.3} ms | record {:.3} submit {:.3} wait {:.3} ms | \
         engine thread CPU {:.3} ms | batches {:.2} | Rust allocations {:.0}",
        now - first,
        ms(wall.elapsed().as_secs_f64()),
        ms(t.record_secs - times.record_secs),
        ms(t.submit_secs - times.submit_secs),
        ms(t.wait_secs - times.wait_secs),
        ms(thread_cpu_secs() - cpu),
        (g.submissions() - subs) as f64 / k,
        (ALLOCATIONS.load(Ordering::Relaxed) - allocs) as f64 / k
    );
}
