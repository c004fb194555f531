//! `vkformers bench gemv` on tiny odd shapes: plain and normed products in every storage type
//! run their timed chains, and their sampled entries match the f64 reference (the bench fails
//! otherwise), so a GEMV timed fast because it computes nothing cannot pass for a fast one; with
//! `--prefetch`, `--max-groups`, `--pipe` and `--stage`, each setting gets its own checked line;
//! `--probe` lines (parts of the kernel left out) are labelled and not checked.

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
    // Each prefetch setting under each grid cap (2: every workgroup runs several blocks): a
    // checked line for each, labelled.
    let o = bench(&["--dtype", "bf16", "--normed", "--prefetch", "0,1", "--max-groups", "0,2"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("µs a call") && l.contains("max rel err")).collect();
    assert_eq!(lines.len(), 24, "{out}");
    for label in ["prefetch 0:", "prefetch 1:", "prefetch 0 groups ≤ 2:", "prefetch 1 groups ≤ 2:"] {
        assert_eq!(lines.iter().filter(|l| l.contains(label)).count(), 6, "{label}: {out}");
    }
    // PIPE off and on over three copies of W (each call reads the next): checked and labelled.
    let o = bench(&["--dtype", "bf16", "--pipe", "0,1", "--copies", "3"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("over 3 copies of W"), "{out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("µs a call") && l.contains("max rel err")).collect();
    assert_eq!(lines.len(), 12, "{out}");
    assert_eq!(lines.iter().filter(|l| l.contains(" pipe:")).count(), 6, "{out}");
    // The input staged in shared memory, off and on, normed, under a grid cap of 2: checked and
    // labelled.
    let o = bench(&["--dtype", "bf16", "--normed", "--stage", "0,1", "--max-groups", "2"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("µs a call") && l.contains("max rel err")).collect();
    assert_eq!(lines.len(), 12, "{out}");
    assert_eq!(lines.iter().filter(|l| l.contains("groups ≤ 2 staged:")).count(), 6, "{out}");
    // A cost probe (everything left out: 7) gets its own labelled line, unchecked (its results
    // are not the product's); the kernel's line beside it is still checked.
    let o = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["bench", "gemv", "--shapes", "37x19", "--rows", "1", "--calls", "3", "--warm-ms", "0"])
        .args(["--dtype", "bf16", "--normed", "--probe", "0,7"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("µs a call")).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(!lines[0].contains("probe") && !lines[0].contains("err NaN"), "{out}");
    assert!(lines[1].contains("probe 7:") && lines[1].contains("err NaN"), "{out}");
    // Bad arguments are refused with the flag's name.
    let o = bench(&["--rows", "17"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--rows"));
}
