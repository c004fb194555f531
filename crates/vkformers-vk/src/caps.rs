//! `Caps`: everything kernels and planners need to know about a device, read once.
//! Kernel variants are chosen by pure functions of `Caps`, so they can be tested with fake ones.

use std::ffi::CStr;

use ash::{khr, vk};
use serde::Serialize;

use crate::error::{Result, VkResultExt};
use crate::ext_structs::{self as xs, chain_front};

/// One cooperative-matrix configuration the driver advertises (`VkCooperativeMatrixPropertiesKHR`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CoopMatShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub a: String,
    pub b: String,
    pub c: String,
    pub result: String,
    pub saturating: bool,
    pub scope: String,
}

/// NV cooperative matrix 2 features (tensor addressing, flexible dimensions, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CoopMat2 {
    pub workgroup_scope: bool,
    pub flexible_dimensions: bool,
    pub reductions: bool,
    pub conversions: bool,
    pub per_element_operations: bool,
    pub tensor_addressing: bool,
    pub block_loads: bool,
    pub workgroup_scope_max_workgroup_size: u32,
    pub flexible_dimensions_max_dimension: u32,
}

/// One memory heap, with the budget the driver grants this process when it reports one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryHeap {
    pub size: u64,
    pub device_local: bool,
    pub budget: Option<u64>,
    pub usage: Option<u64>,
}

/// The capabilities of one physical device.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Caps {
    pub name: String,
    pub device_type: String,
    pub vendor_id: u32,
    pub device_id: u32,
    pub api_version: String,
    pub driver_name: String,
    pub driver_info: String,
    pub driver_version: String,
    pub fp16: bool,
    pub int8: bool,
    pub int64: bool,
    pub bf16: bool,
    pub bf16_cooperative_matrix: bool,
    pub buffer_device_address: bool,
    pub subgroup_size: u32,
    pub subgroup_size_min: u32,
    pub subgroup_size_max: u32,
    pub subgroup_size_control: bool,
    pub subgroup_ops: Vec<String>,
    pub cooperative_matrix: Vec<CoopMatShape>,
    pub cooperative_matrix2: Option<CoopMat2>,
    pub max_shared_memory: u32,
    pub max_workgroup_invocations: u32,
    pub max_workgroup_size: [u32; 3],
    pub max_workgroup_count: [u32; 3],
    pub max_push_constants: u32,
    pub max_storage_buffer_range: u64,
    pub max_allocation_size: u64,
    pub max_buffer_size: u64,
    pub memory_heaps: Vec<MemoryHeap>,
    pub timestamps: bool,
    pub timestamp_period_ns: f32,
    pub extensions: Vec<String>,
    /// `pipelineCacheUUID` in hex: pipeline caches are only valid for this value.
    pub pipeline_cache_uuid: String,
}

impl Caps {
    /// Whether the device is a CPU (lavapipe, llvmpipe, SwiftShader): kernels pick their CPU
    /// variants and policies by it.
    pub fn is_cpu(&self) -> bool {
        self.device_type == "cpu"
    }

    /// True when a cooperative-matrix shape with these component types exists.
    pub fn has_coopmat(&self, ab: &str, acc: &str) -> bool {
        self.cooperative_matrix.iter().any(|s| s.a == ab && s.b == ab && s.c == acc && s.scope == "subgroup")
    }

    /// Total size of the device-local heaps, in bytes.
    pub fn device_local_bytes(&self) -> u64 {
        self.memory_heaps.iter().filter(|h| h.device_local).map(|h| h.size).sum()
    }
}

/// Device extensions vkformers turns on when present (and reports in `Caps::extensions`).
pub(crate) const WANTED_EXTENSIONS: [&CStr; 5] = [
    khr::cooperative_matrix::NAME,
    xs::NV_COOPERATIVE_MATRIX2,
    xs::KHR_SHADER_BFLOAT16,
    ash::ext::memory_budget::NAME,
    ash::ext::subgroup_size_control::NAME,
];

pub(crate) fn version_string(v: u32) -> String {
    format!("{}.{}.{}", vk::api_version_major(v), vk::api_version_minor(v), vk::api_version_patch(v))
}

/// Features read from the device, kept so device creation enables exactly what exists.
#[derive(Clone, Copy, Default)]
pub(crate) struct FeatureSet {
    pub fp16: bool,
    pub storage16: bool,
    pub int8: bool,
    pub storage8: bool,
    pub int64: bool,
    pub int16: bool,
    pub bda: bool,
    pub subgroup_size_control: bool,
    pub coopmat: bool,
    pub bf16: bool,
    pub bf16_coopmat: bool,
    pub coopmat2: Option<xs::CoopMat2Features>,
    pub timeline: bool,
    pub sync2: bool,
    pub memory_model: bool,
}

pub(crate) fn device_extensions(instance: &ash::Instance, pd: vk::PhysicalDevice) -> Result<Vec<String>> {
    // SAFETY: valid instance and physical device.
    let exts =
        unsafe { instance.enumerate_device_extension_properties(pd) }.vk("vkEnumerateDeviceExtensionProperties")?;
    Ok(exts.iter().filter_map(|e| e.extension_name_as_c_str().ok().map(|n| n.to_string_lossy().into_owned())).collect())
}

pub(crate) fn has_ext(exts: &[String], name: &CStr) -> bool {
    let name = name.to_string_lossy();
    exts.iter().any(|e| *e == name)
}

/// Reads the features this crate cares about.
pub(crate) fn read_features(instance: &ash::Instance, pd: vk::PhysicalDevice, exts: &[String]) -> FeatureSet {
    let mut v11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut v13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut cm = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut bf = xs::Bfloat16Features::default();
    let mut cm2 = xs::CoopMat2Features::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut v11).push_next(&mut v12).push_next(&mut v13);
    let has_cm = has_ext(exts, khr::cooperative_matrix::NAME);
    if has_cm {
        f2 = f2.push_next(&mut cm);
    }
    let has_bf = has_ext(exts, xs::KHR_SHADER_BFLOAT16);
    let has_cm2 = has_ext(exts, xs::NV_COOPERATIVE_MATRIX2);
    // SAFETY: the nodes live on this stack frame until after the query.
    unsafe {
        if has_bf {
            let next = &mut bf.p_next as *mut _;
            chain_front(&mut f2.p_next, &mut bf, next);
        }
        if has_cm2 {
            let next = &mut cm2.p_next as *mut _;
            chain_front(&mut f2.p_next, &mut cm2, next);
        }
        instance.get_physical_device_features2(pd, &mut f2);
    }
    let base = f2.features;
    FeatureSet {
        fp16: v12.shader_float16 == vk::TRUE,
        storage16: v11.storage_buffer16_bit_access == vk::TRUE,
        int8: v12.shader_int8 == vk::TRUE,
        storage8: v12.storage_buffer8_bit_access == vk::TRUE,
        int64: base.shader_int64 == vk::TRUE,
        int16: base.shader_int16 == vk::TRUE,
        bda: v12.buffer_device_address == vk::TRUE,
        subgroup_size_control: v13.subgroup_size_control == vk::TRUE && v13.compute_full_subgroups == vk::TRUE,
        coopmat: has_cm && cm.cooperative_matrix == vk::TRUE,
        bf16: has_bf && bf.shader_bfloat16_type == vk::TRUE,
        bf16_coopmat: has_bf && bf.shader_bfloat16_cooperative_matrix == vk::TRUE,
        coopmat2: has_cm2.then_some(cm2),
        timeline: v12.timeline_semaphore == vk::TRUE,
        sync2: v13.synchronization2 == vk::TRUE,
        memory_model: v12.vulkan_memory_model == vk::TRUE && v12.vulkan_memory_model_device_scope == vk::TRUE,
    }
}

/// Reads `Caps` for a physical device.
pub(crate) fn read_caps(
    entry: &ash::Entry,
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
) -> Result<(Caps, FeatureSet)> {
    let exts = device_extensions(instance, pd)?;
    let feats = read_features(instance, pd, &exts);
    let mut sub = vk::PhysicalDeviceSubgroupProperties::default();
    let mut ssc = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
    let mut drv = vk::PhysicalDeviceDriverProperties::default();
    let mut m3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut m4 = vk::PhysicalDeviceMaintenance4Properties::default();
    let mut cm2p = xs::CoopMat2Properties::default();
    let mut p2 = vk::PhysicalDeviceProperties2::default()
        .push_next(&mut sub)
        .push_next(&mut ssc)
        .push_next(&mut drv)
        .push_next(&mut m3)
        .push_next(&mut m4);
    // SAFETY: chain nodes live on this frame until after the query.
    unsafe {
        if feats.coopmat2.is_some() {
            let next = &mut cm2p.p_next as *mut _;
            chain_front(&mut p2.p_next, &mut cm2p, next);
        }
        instance.get_physical_device_properties2(pd, &mut p2);
    }
    let props = p2.properties;
    let limits = props.limits;
    let queue_ts = compute_queue_timestamp_bits(instance, pd) > 0;
    let cooperative_matrix = if feats.coopmat { coopmat_shapes(entry, instance, pd)? } else { Vec::new() };
    let caps = Caps {
        name: props.device_name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default(),
        device_type: device_type_name(props.device_type).into(),
        vendor_id: props.vendor_id,
        device_id: props.device_id,
        api_version: version_string(props.api_version),
        driver_name: drv.driver_name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default(),
        driver_info: drv.driver_info_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default(),
        driver_version: driver_version_string(props.vendor_id, props.driver_version),
        fp16: feats.fp16 && feats.storage16 && feats.int16,
        int8: feats.int8 && feats.storage8,
        int64: feats.int64,
        bf16: feats.bf16,
        bf16_cooperative_matrix: feats.bf16_coopmat,
        buffer_device_address: feats.bda,
        subgroup_size: sub.subgroup_size,
        subgroup_size_min: ssc.min_subgroup_size,
        subgroup_size_max: ssc.max_subgroup_size,
        subgroup_size_control: feats.subgroup_size_control,
        subgroup_ops: subgroup_op_names(sub.supported_operations),
        cooperative_matrix,
        cooperative_matrix2: feats.coopmat2.map(|f| CoopMat2 {
            workgroup_scope: f.workgroup_scope == vk::TRUE,
            flexible_dimensions: f.flexible_dimensions == vk::TRUE,
            reductions: f.reductions == vk::TRUE,
            conversions: f.conversions == vk::TRUE,
            per_element_operations: f.per_element_operations == vk::TRUE,
            tensor_addressing: f.tensor_addressing == vk::TRUE,
            block_loads: f.block_loads == vk::TRUE,
            workgroup_scope_max_workgroup_size: cm2p.workgroup_scope_max_workgroup_size,
            flexible_dimensions_max_dimension: cm2p.flexible_dimensions_max_dimension,
        }),
        max_shared_memory: limits.max_compute_shared_memory_size,
        max_workgroup_invocations: limits.max_compute_work_group_invocations,
        max_workgroup_size: limits.max_compute_work_group_size,
        max_workgroup_count: limits.max_compute_work_group_count,
        max_push_constants: limits.max_push_constants_size,
        max_storage_buffer_range: u64::from(limits.max_storage_buffer_range),
        max_allocation_size: m3.max_memory_allocation_size,
        max_buffer_size: m4.max_buffer_size,
        memory_heaps: memory_heaps(instance, pd, &exts),
        timestamps: queue_ts && limits.timestamp_period > 0.0,
        timestamp_period_ns: limits.timestamp_period,
        extensions: WANTED_EXTENSIONS
            .iter()
            .filter(|w| has_ext(&exts, w))
            .map(|w| w.to_string_lossy().into_owned())
            .collect(),
        pipeline_cache_uuid: props.pipeline_cache_uuid.iter().map(|b| format!("{b:02x}")).collect(),
    };
    Ok((caps, feats))
}

fn device_type_name(t: vk::PhysicalDeviceType) -> &'static str {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => "discrete",
        vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated",
        vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual",
        vk::PhysicalDeviceType::CPU => "cpu",
        _ => "other",
    }
}

/// NVIDIA packs its driver version as 10.8.8.6 bits; everyone else uses the Vulkan packing.
fn driver_version_string(vendor: u32, v: u32) -> String {
    if vendor == 0x10de {
        format!("{}.{}.{}", v >> 22, (v >> 14) & 0xff, (v >> 6) & 0xff)
    } else {
        version_string(v)
    }
}

fn subgroup_op_names(ops: vk::SubgroupFeatureFlags) -> Vec<String> {
    let all = [
        (vk::SubgroupFeatureFlags::BASIC, "basic"),
        (vk::SubgroupFeatureFlags::VOTE, "vote"),
        (vk::SubgroupFeatureFlags::ARITHMETIC, "arithmetic"),
        (vk::SubgroupFeatureFlags::BALLOT, "ballot"),
        (vk::SubgroupFeatureFlags::SHUFFLE, "shuffle"),
        (vk::SubgroupFeatureFlags::SHUFFLE_RELATIVE, "shuffle_relative"),
        (vk::SubgroupFeatureFlags::CLUSTERED, "clustered"),
        (vk::SubgroupFeatureFlags::QUAD, "quad"),
    ];
    all.iter().filter(|(f, _)| ops.contains(*f)).map(|(_, n)| n.to_string()).collect()
}

fn compute_queue_timestamp_bits(instance: &ash::Instance, pd: vk::PhysicalDevice) -> u32 {
    // SAFETY: valid instance and physical device.
    let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
    families.iter().find(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE)).map_or(0, |f| f.timestamp_valid_bits)
}

fn memory_heaps(instance: &ash::Instance, pd: vk::PhysicalDevice, exts: &[String]) -> Vec<MemoryHeap> {
    let has_budget = has_ext(exts, ash::ext::memory_budget::NAME);
    let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let mut mp = vk::PhysicalDeviceMemoryProperties2::default();
    if has_budget {
        mp = mp.push_next(&mut budget);
    }
    // SAFETY: valid instance and physical device; chain lives on this frame.
    unsafe { instance.get_physical_device_memory_properties2(pd, &mut mp) };
    let props = mp.memory_properties;
    (0..props.memory_heap_count as usize)
        .map(|i| {
            let heap = props.memory_heaps[i];
            MemoryHeap {
                size: heap.size,
                device_local: heap.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
                budget: has_budget.then_some(budget.heap_budget[i]),
                usage: has_budget.then_some(budget.heap_usage[i]),
            }
        })
        .collect()
}

fn component_name(t: vk::ComponentTypeKHR) -> String {
    match t.as_raw() {
        0 => "f16".into(),
        1 => "f32".into(),
        2 => "f64".into(),
        3 => "i8".into(),
        4 => "i16".into(),
        5 => "i32".into(),
        6 => "i64".into(),
        7 => "u8".into(),
        8 => "u16".into(),
        9 => "u32".into(),
        10 => "u64".into(),
        xs::COMPONENT_TYPE_BFLOAT16 => "bf16".into(),
        1_000_491_002 => "e4m3".into(),
        1_000_491_003 => "e5m2".into(),
        other => format!("type{other}"),
    }
}

fn coopmat_shapes(entry: &ash::Entry, instance: &ash::Instance, pd: vk::PhysicalDevice) -> Result<Vec<CoopMatShape>> {
    let loader = khr::cooperative_matrix::Instance::new(entry, instance);
    // SAFETY: the extension is present on this device (checked by the caller).
    let props = unsafe { loader.get_physical_device_cooperative_matrix_properties(pd) }
        .vk("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")?;
    Ok(props
        .iter()
        .map(|p| CoopMatShape {
            m: p.m_size,
            n: p.n_size,
            k: p.k_size,
            a: component_name(p.a_type),
            b: component_name(p.b_type),
            c: component_name(p.c_type),
            result: component_name(p.result_type),
            saturating: p.saturating_accumulation == vk::TRUE,
            scope: match p.scope {
                vk::ScopeKHR::SUBGROUP => "subgroup".into(),
                vk::ScopeKHR::WORKGROUP => "workgroup".into(),
                vk::ScopeKHR::DEVICE => "device".into(),
                vk::ScopeKHR::QUEUE_FAMILY => "queue_family".into(),
                s => format!("scope{}", s.as_raw()),
            },
        })
        .collect())
}
