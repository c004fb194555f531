//! `vkformers doctor`: checks the setup step by step and says how to fix what fails.

use std::process::ExitCode;
use std::sync::Arc;

use serde::Serialize;
use vkformers_vk::{list_devices, Context, DeviceSelector, Instance, InstanceOptions};

#[derive(Serialize)]
struct Check {
    name: &'static str,
    status: &'static str,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn ok(name: &'static str, detail: String) -> Check {
    Check { name, status: "ok", detail, fix: None }
}

fn warn(name: &'static str, detail: String, fix: &str) -> Check {
    Check { name, status: "warn", detail, fix: Some(fix.into()) }
}

fn fail(name: &'static str, detail: String, fix: &str) -> Check {
    Check { name, status: "fail", detail, fix: Some(fix.into()) }
}

pub fn run(selector: &DeviceSelector, json: bool) -> anyhow::Result<ExitCode> {
    let checks = collect(selector);
    let failed = checks.iter().any(|c| c.status == "fail");
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "ok": !failed, "checks": checks }))?);
    } else {
        for c in &checks {
            println!("[{:>4}] {}: {}", c.status, c.name, c.detail);
            if let Some(fix) = &c.fix {
                println!("       fix: {fix}");
            }
        }
        println!("{}", if failed { "doctor: problems found" } else { "doctor: all good" });
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn collect(selector: &DeviceSelector) -> Vec<Check> {
    let mut checks = Vec::new();
    let instance = match Instance::new(&InstanceOptions::default()) {
        Ok(i) => Arc::new(i),
        Err(e) => {
            checks.push(fail(
                "loader",
                e.to_string(),
                "apt-get install libvulkan1 mesa-vulkan-drivers (or your GPU vendor's driver)",
            ));
            return checks;
        }
    };
    checks.push(ok("loader", format!("Vulkan loader {}", instance.loader_version())));
    let devices = match list_devices(&instance) {
        Ok(d) => d,
        Err(e) => {
            checks.push(fail(
                "devices",
                e.to_string(),
                "install a Vulkan driver; Mesa's lavapipe (mesa-vulkan-drivers) runs on any CPU",
            ));
            return checks;
        }
    };
    let names: Vec<String> = devices
        .iter()
        .map(|d| {
            format!(
                "[{}] {} ({}, {} {})",
                d.index, d.caps.name, d.caps.device_type, d.caps.driver_name, d.caps.driver_version
            )
        })
        .collect();
    checks.push(ok("devices", names.join("; ")));
    if !devices.iter().any(|d| d.caps.device_type != "cpu") {
        checks.push(warn(
            "gpu",
            "only a CPU driver is present: everything works, slowly".into(),
            "install your GPU's Vulkan driver for real speed",
        ));
    }
    let ctx = match Context::with_instance(instance, selector) {
        Ok(c) => c,
        Err(e) => {
            checks.push(fail("device", e.to_string(), "pick another device with --device, or update its driver"));
            return checks;
        }
    };
    checks.extend(fast_paths(&ctx));
    checks.push(smoke_test(&ctx));
    checks.push(cache_check());
    checks
}

fn fast_paths(ctx: &Context) -> Vec<Check> {
    let c = ctx.caps();
    let mut out =
        vec![ok("selected", format!("{} (Vulkan {}, {} {})", c.name, c.api_version, c.driver_name, c.driver_version))];
    let flag = |b: bool| if b { "yes" } else { "no" };
    let detail = format!(
        "fp16 {}, bf16 {}, int8 {}, subgroup {} with {}, cooperative matrix {}, NV cooperative matrix 2 {}",
        flag(c.fp16),
        flag(c.bf16),
        flag(c.int8),
        c.subgroup_size,
        c.subgroup_ops.join("/"),
        crate::devices::coopmat_summary(c),
        flag(c.cooperative_matrix2.is_some())
    );
    out.push(ok("fast paths", detail));
    if c.device_type != "cpu" && c.cooperative_matrix.is_empty() {
        out.push(warn(
            "tensor cores",
            "no VK_KHR_cooperative_matrix: matrix products use the portable kernels".into(),
            "a newer driver may expose cooperative matrices",
        ));
    }
    out
}

/// Runs fill + add on the device and checks the numbers: proves shaders, pipelines, buffers,
/// transfers and submission work end to end.
fn smoke_test(ctx: &Context) -> Check {
    let run = || -> vkformers_vk::Result<bool> {
        let n = 4099usize;
        let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let x = ctx.buffer_from(&xs, "doctor x")?;
        let y = ctx.buffer((n * 4) as u64, "doctor y")?;
        let mut rec = ctx.recorder(false)?;
        vkformers_kernels::elementwise::fill(&mut rec, y.view(), 0.5)?;
        vkformers_kernels::elementwise::add(&mut rec, x.view(), y.view(), y.view())?;
        rec.submit()?;
        let got: Vec<f32> = ctx.read_vec(y.view())?;
        Ok(got.iter().enumerate().all(|(i, v)| *v == i as f32 + 0.5))
    };
    match run() {
        Ok(true) => ok("kernels", "fill + add ran on the device and gave the right numbers".into()),
        Ok(false) => fail(
            "kernels",
            "a kernel ran but gave wrong numbers".into(),
            "report this with `vkformers devices --json`; try another driver version",
        ),
        Err(e) => fail("kernels", e.to_string(), "update the driver or pick another device with --device"),
    }
}

fn cache_check() -> Check {
    match vkformers_vk::pipeline::cache_dir() {
        Some(dir) => match std::fs::create_dir_all(&dir) {
            Ok(()) => ok("pipeline cache", dir.display().to_string()),
            Err(e) => warn(
                "pipeline cache",
                format!("{}: {e}", dir.display()),
                "set VKFORMERS_CACHE_DIR to a writable folder",
            ),
        },
        None => warn("pipeline cache", "no cache folder (HOME unset)".into(), "set VKFORMERS_CACHE_DIR"),
    }
}
