//! `vkformers devices`: every Vulkan device with its capabilities.

use std::process::ExitCode;

use vkformers_vk::{choose_device, list_devices, Caps, DeviceSelector, Instance, InstanceOptions};

pub fn run(json: bool) -> anyhow::Result<ExitCode> {
    let instance = Instance::new(&InstanceOptions::default())?;
    let devices = list_devices(&instance)?;
    let best = choose_device(&devices, &DeviceSelector::Best).ok();
    if json {
        let out: Vec<_> = devices
            .iter()
            .map(|d| serde_json::json!({ "index": d.index, "default": Some(d.index) == best, "caps": d.caps }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    for d in &devices {
        let mark = if Some(d.index) == best { " (default)" } else { "" };
        println!("[{}] {}{mark}", d.index, d.caps.name);
        print_caps(&d.caps);
    }
    Ok(ExitCode::SUCCESS)
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn gib(b: u64) -> String {
    if b < 1 << 30 {
        format!("{} MiB", b >> 20)
    } else {
        format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30))
    }
}

pub fn print_caps(c: &Caps) {
    println!(
        "    type {}, Vulkan {}, driver {} {} ({})",
        c.device_type, c.api_version, c.driver_name, c.driver_version, c.driver_info
    );
    println!("    fp16 {}  bf16 {}  int8 {}  int64 {}", yes(c.fp16), yes(c.bf16), yes(c.int8), yes(c.int64));
    println!(
        "    subgroup {} (min {}, max {}, size control {}), ops: {}",
        c.subgroup_size,
        c.subgroup_size_min,
        c.subgroup_size_max,
        yes(c.subgroup_size_control),
        c.subgroup_ops.join(" ")
    );
    println!("    cooperative matrix: {}", coopmat_summary(c));
    println!(
        "    NV cooperative matrix 2: {}",
        c.cooperative_matrix2.as_ref().map_or("no".to_string(), |m| format!(
            "yes (flexible dims {}, tensor addressing {}, max dim {})",
            yes(m.flexible_dimensions),
            yes(m.tensor_addressing),
            m.flexible_dimensions_max_dimension
        ))
    );
    println!(
        "    shared memory {} KiB, workgroup ≤ {} invocations, push constants {} B",
        c.max_shared_memory / 1024,
        c.max_workgroup_invocations,
        c.max_push_constants
    );
    println!(
        "    max storage binding {}, max allocation {}, max buffer {}",
        gib(c.max_storage_buffer_range),
        gib(c.max_allocation_size),
        gib(c.max_buffer_size)
    );
    let heaps: Vec<String> = c
        .memory_heaps
        .iter()
        .map(|h| {
            format!(
                "{}{}{}",
                gib(h.size),
                if h.device_local { " device-local" } else { "" },
                h.budget.map_or(String::new(), |b| format!(" (budget {})", gib(b)))
            )
        })
        .collect();
    println!("    memory heaps: {}", heaps.join(", "));
    println!("    timestamps {} ({} ns/tick)", yes(c.timestamps), c.timestamp_period_ns);
}

/// `f16xf16->f32 16x16x16, ...`, one entry per distinct type combination with its shapes.
pub fn coopmat_summary(c: &Caps) -> String {
    if c.cooperative_matrix.is_empty() {
        return "no".into();
    }
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for s in &c.cooperative_matrix {
        let key = format!(
            "{}x{}->{}{}",
            s.a,
            s.b,
            s.result,
            if s.scope == "subgroup" { String::new() } else { format!(" ({})", s.scope) }
        );
        let shape = format!("{}x{}x{}", s.m, s.n, s.k);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => {
                if !v.contains(&shape) {
                    v.push(shape)
                }
            }
            None => groups.push((key, vec![shape])),
        }
    }
    groups.iter().map(|(k, v)| format!("{k} [{}]", v.join(" "))).collect::<Vec<_>>().join("; ")
}
