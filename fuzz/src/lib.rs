//! Mutation fuzzing of the parsers a user's files reach, on the stable toolchain (cargo-fuzz
//! needs nightly): seeds from the repository's fixtures, mutated byte-wise and JSON-aware, each
//! input run under `catch_unwind` and timed. A panic or an input slower than [`STALL`] is a
//! finding, written to `target/fuzz-findings/<target>/` to become a regression input under
//! `fuzz/regressions/<target>/`, which every run replays first.
//!
//! `cargo test -p vkformers-fuzz` runs each target for `VKFORMERS_FUZZ_SECONDS` (default 10)
//! from `VKFORMERS_FUZZ_SEED` (default 1, so CI repeats itself), only the targets named in
//! `VKFORMERS_FUZZ_TARGETS=a,b` when it is set; `scripts/fuzz` runs longer with a fresh seed.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub mod adapter;
pub mod mutate;
pub mod parquet_seeds;
pub mod requests;
pub mod targets;

use mutate::Rng;
use targets::{Ctx, Shape, Target};

/// The message of the last panic a target raised (the hook is silent while fuzzing).
static LAST_PANIC: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// One input slower than this is reported as a stall (hang).
pub const STALL: Duration = Duration::from_secs(5);

/// What a target's run did.
#[derive(Debug, Default)]
pub struct Report {
    pub target: &'static str,
    pub execs: u64,
    pub regressions: usize,
    /// Inputs that panicked, with the panic's message and place.
    pub crashes: Vec<(PathBuf, String)>,
    pub stalls: Vec<PathBuf>,
    pub slowest: Duration,
}

/// The repository root (this crate lives in `fuzz/`).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn findings_dir(target: &str) -> PathBuf {
    root().join("target/fuzz-findings").join(target)
}

fn regressions(target: &str) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(root().join("fuzz/regressions").join(target)) else { return Vec::new() };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    paths.into_iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// A mutation of `seed` as the target's inputs are shaped.
fn mutant(rng: &mut Rng, shape: Shape, seed: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    match shape {
        Shape::Bytes => mutate::bytes(rng, seed, seeds),
        Shape::Json => mutate::json(rng, seed, seeds),
        Shape::Safetensors => safetensors_mutant(rng, seed, seeds),
    }
}

/// The header of a safetensors file mutated as JSON and framed again: sometimes with a wrong
/// length prefix or cut short, else consistent so the checks past the framing are reached.
fn safetensors_mutant(rng: &mut Rng, seed: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    let len = seed.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize);
    let Some(header) = len.and_then(|n| seed.get(8..8 + n)) else { return mutate::bytes(rng, seed, seeds) };
    let data = &seed[8 + header.len()..];
    let header = mutate::json(rng, header, &[]);
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    match rng.below(8) {
        0 => out = (rng.next_u64() >> rng.below(64)).to_le_bytes().to_vec(),
        1 => out = ((header.len() as u64).wrapping_add(rng.below(16) as u64).wrapping_sub(8)).to_le_bytes().to_vec(),
        _ => {}
    }
    out.extend_from_slice(&header);
    out.extend_from_slice(data);
    if rng.below(8) == 0 {
        out.truncate(rng.below(out.len() + 1));
    }
    out
}

/// Runs one input; returns how long it took, or `None` when it panicked. The input is first
/// written to `last-input` in the findings folder: an abort (a failed allocation) cannot be
/// caught, and that file then holds the input that caused it.
fn exec(t: &Target, ctx: &Ctx, input: &[u8], last: &Path) -> Option<Duration> {
    std::fs::write(last, input).expect("last-input write");
    let start = Instant::now();
    catch_unwind(AssertUnwindSafe(|| (t.run)(ctx, input))).ok().map(|_| start.elapsed())
}

fn keep(dir: &Path, input: &[u8], n: usize) -> PathBuf {
    let path = dir.join(format!("finding-{n}"));
    std::fs::write(&path, input).expect("finding write");
    path
}

/// Replays `t`'s regression inputs, then mutates its seeds for `budget`.
pub fn fuzz(t: &Target, budget: Duration, seed: u64) -> Report {
    let ctx = Ctx::new(&root());
    let seeds = (t.seeds)(&root());
    assert!(!seeds.is_empty(), "fuzz target {} found no seed inputs", t.name);
    let mut report = Report { target: t.name, ..Report::default() };
    let record = |report: &mut Report, input: &[u8], took: Option<Duration>| {
        report.execs += 1;
        let n = report.crashes.len() + report.stalls.len();
        match took {
            None => {
                let why = LAST_PANIC.lock().map(|m| m.clone()).unwrap_or_default();
                report.crashes.push((keep(&findings_dir(t.name), input, n), why));
            }
            Some(d) if d > STALL => report.stalls.push(keep(&findings_dir(t.name), input, n)),
            Some(d) => report.slowest = report.slowest.max(d),
        }
    };
    std::fs::create_dir_all(findings_dir(t.name)).expect("findings folder");
    let last = findings_dir(t.name).join("last-input");
    let old_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        if let Ok(mut m) = LAST_PANIC.lock() {
            *m = info.to_string();
        }
    }));
    let fixed = regressions(t.name);
    report.regressions = fixed.len();
    for input in fixed.iter().chain(&seeds) {
        let took = exec(t, &ctx, input, &last);
        record(&mut report, input, took);
    }
    let mut rng = Rng::new(seed);
    let deadline = Instant::now() + budget;
    while Instant::now() < deadline {
        let seed_input = &seeds[rng.below(seeds.len())];
        let input = mutant(&mut rng, t.shape, seed_input, &seeds);
        let took = exec(t, &ctx, &input, &last);
        record(&mut report, &input, took);
    }
    std::panic::set_hook(old_hook);
    report
}
