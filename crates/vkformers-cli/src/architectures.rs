//! `vkformers architectures`: every registered `model_type` with its family and the status of
//! each parity check, computed by running the parity fixtures on the device now.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use vkformers_models::parity::{self, ParityReport};
use vkformers_models::ARCHS;
use vkformers_vk::{Context, DeviceSelector};

#[derive(clap::Args)]
pub struct Args {
    /// Folder of parity fixtures (default: $VKFORMERS_FIXTURES, ./tests/fixtures, or the
    /// source tree's tests/fixtures).
    #[arg(long)]
    fixtures: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn fixtures_root(arg: Option<&Path>) -> PathBuf {
    if let Some(p) = arg {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("VKFORMERS_FIXTURES") {
        return PathBuf::from(p);
    }
    let local = PathBuf::from("tests/fixtures");
    if local.is_dir() {
        return local;
    }
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))
}

fn status(ok: bool) -> &'static str {
    if ok {
        "pass"
    } else {
        "FAIL"
    }
}

pub fn run(selector: &DeviceSelector, args: &Args) -> anyhow::Result<ExitCode> {
    let ctx = Context::new(selector)?;
    let root = fixtures_root(args.fixtures.as_deref());
    let mut reports: Vec<(String, Result<ParityReport, String>)> = Vec::new();
    for dir in parity::fixtures(&root) {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        reports.push((name, parity::check(&ctx, &dir).map_err(|e| e.to_string())));
    }
    let rows: Vec<serde_json::Value> = ARCHS
        .iter()
        .map(|a| {
            let mine: Vec<_> = reports
                .iter()
                .filter(|(_, r)| r.as_ref().map(|r| r.model_type == a.model_type).unwrap_or(false))
                .collect();
            let checks: Vec<serde_json::Value> = mine
                .iter()
                .filter_map(|(name, r)| r.as_ref().ok().map(|r| (name, r)))
                .map(|(name, r)| {
                    serde_json::json!({"fixture": name, "forward": status(r.forward_ok()), "gradients": status(r.grads_ok()),
                        "adamw_2_steps": status(r.adamw_ok()), "report": r})
                })
                .collect();
            serde_json::json!({"model_type": a.model_type, "family": a.family, "fixtures": checks})
        })
        .collect();
    let errors: Vec<_> = reports.iter().filter_map(|(n, r)| r.as_ref().err().map(|e| (n, e))).collect();
    if args.json {
        let errs: Vec<_> = errors.iter().map(|(n, e)| serde_json::json!({"fixture": n, "error": e})).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"device": ctx.caps().name, "architectures": rows, "errors": errs})
            )?
        );
    } else {
        print_table(&rows, &ctx.caps().name, &root);
        for (n, e) in &errors {
            println!("fixture {n}: error: {e}");
        }
    }
    let failed = !errors.is_empty()
        || rows
            .iter()
            .flat_map(|r| r["fixtures"].as_array().cloned().unwrap_or_default())
            .any(|c| ["forward", "gradients", "adamw_2_steps"].iter().any(|k| c[*k] != "pass"));
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn print_table(rows: &[serde_json::Value], device: &str, root: &Path) {
    println!("parity with transformers on {device} (fixtures: {})", root.display());
    println!(
        "{:<12} {:<26} {:<18} {:<8} {:<10} {:<8}",
        "model_type", "family", "fixture", "forward", "gradients", "adamw"
    );
    for r in rows {
        let fixtures = r["fixtures"].as_array().cloned().unwrap_or_default();
        if fixtures.is_empty() {
            println!(
                "{:<12} {:<26} {:<18}",
                r["model_type"].as_str().unwrap_or(""),
                r["family"].as_str().unwrap_or(""),
                "(none)"
            );
        }
        for c in fixtures {
            println!(
                "{:<12} {:<26} {:<18} {:<8} {:<10} {:<8}",
                r["model_type"].as_str().unwrap_or(""),
                r["family"].as_str().unwrap_or(""),
                c["fixture"].as_str().unwrap_or(""),
                c["forward"].as_str().unwrap_or(""),
                c["gradients"].as_str().unwrap_or(""),
                c["adamw_2_steps"].as_str().unwrap_or("")
            );
        }
    }
}
