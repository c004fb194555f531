//! Every fuzz target for a fixed budget (see the crate docs): no input may panic or stall.
//! `VKFORMERS_FUZZ_TARGETS=a,b` runs only the targets named (all when unset), e.g.
//! `VKFORMERS_FUZZ_SECONDS=60 VKFORMERS_FUZZ_SEED=3 VKFORMERS_FUZZ_TARGETS=serve_request`.

use std::time::Duration;

use vkformers_fuzz::{fuzz, targets::TARGETS};

#[test]
fn no_input_crashes_or_stalls_a_parser() {
    let seconds: u64 = std::env::var("VKFORMERS_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    let seed: u64 = std::env::var("VKFORMERS_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let only: Option<Vec<String>> =
        std::env::var("VKFORMERS_FUZZ_TARGETS").ok().map(|s| s.split(',').map(|t| t.trim().to_string()).collect());
    if let Some(names) = &only {
        let unknown: Vec<&String> = names.iter().filter(|n| !TARGETS.iter().any(|t| t.name == n.as_str())).collect();
        assert!(unknown.is_empty(), "VKFORMERS_FUZZ_TARGETS names no target {unknown:?}");
    }
    let mut failures = Vec::new();
    for t in TARGETS.iter().filter(|t| only.as_ref().is_none_or(|n| n.iter().any(|x| x == t.name))) {
        let r = fuzz(t, Duration::from_secs(seconds), seed);
        eprintln!(
            "fuzz {:<16} {:>8} execs ({} regression inputs), {} crashes, {} stalls, slowest {:?} (seed {seed})",
            r.target,
            r.execs,
            r.regressions,
            r.crashes.len(),
            r.stalls.len(),
            r.slowest
        );
        for (p, why) in &r.crashes {
            failures.push(format!("{}: {} panicked: {why}", r.target, p.display()));
        }
        for p in &r.stalls {
            failures.push(format!("{}: {} took over {:?}", r.target, p.display(), vkformers_fuzz::STALL));
        }
    }
    assert!(
        failures.is_empty(),
        "inputs that crash or stall (copy them to fuzz/regressions/<target>/):\n{}",
        failures.join("\n")
    );
}
