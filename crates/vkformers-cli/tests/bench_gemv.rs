//! `vkformers bench gemv` on tiny odd shapes: plain and normed products in every storage type
//! run their timed chains, and their sampled entries match the f64 reference (the bench fails
//! otherwise), so a GEMV timed fast because it computes nothing cannot pass for a fast one.

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    let base = ["bench", "gemv", "--shapes", "37x19,8x72", "--rows", "1,3,16", "--calls", "3", "--warm-ms", "0"];
    Command::new(env!("CARGO_BIN_EXE_vkformers")).args(base).args(args).output().unwrap()
}

#[test]
fn gemv_bench_times_checked_products() {
    for args in [
        &["--dtype", "f32"][..],
        &["--dtype", "bf16"],
        &["--dtype", "f16", "--normed"],
        &["--dtype", "bf16", "--normed"],
    ] {
        let o = bench(args);
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "{args:?}: {err}");
        // One line per shape and row count, each with its sampled error.
        let lines: Vec<&str> = out.lines().filter(|l| l.contains("µs a call")).collect();
        assert_eq!(lines.len(), 6, "{args:?}: {out}");
        assert!(lines.iter().all(|l| l.contains("max rel err")), "{out}");
    }
    // Bad arguments are refused with the flag's name.
    let o = bench(&["--rows", "17"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--rows"));
}
