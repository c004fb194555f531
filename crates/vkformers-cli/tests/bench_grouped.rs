//! `vkformers bench grouped-gemm` on a tiny odd shape: it runs every storage type and tile the
//! device has, checks its sampled entries, and reports the three products as JSON.

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    let base = ["bench", "grouped-gemm", "--experts", "3", "--tokens", "17", "--hidden", "19", "--inter", "11"];
    Command::new(env!("CARGO_BIN_EXE_vkformers")).args(base).args(args).output().unwrap()
}

#[test]
fn grouped_gemm_bench_reports_three_products() {
    for args in [
        ["--dtype", "f32", "--tile", "64"],
        ["--dtype", "f32", "--tile", "128"],
        ["--dtype", "bf16", "--tile", "auto"],
        ["--dtype", "f32-bf16", "--tile", "64"],
    ] {
        let o = bench(&[&args[..], &["--top-k", "2", "--iters", "1", "--json"]].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let products: Vec<&str> =
            v["products"].as_array().unwrap().iter().map(|p| p["product"].as_str().unwrap()).collect();
        assert_eq!(products, ["forward", "dx", "dw"], "{args:?}");
        assert!(v["max_rel_err"].as_f64().unwrap() <= 1e-3, "{args:?}: {v}");
    }
    // Bad arguments are refused with the flag's name.
    let o = bench(&["--top-k", "4"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--top-k"));
}
