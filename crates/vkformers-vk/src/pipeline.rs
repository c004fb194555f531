//! Compute pipelines, created lazily on first use and kept in an on-disk `VkPipelineCache`.
//!
//! Kernels take no descriptor sets: every buffer is a device address in the push-constant
//! block, followed by the kernel's scalar parameters. Build-time reflection tells how many
//! pointers and how many bytes the block has, and the recorder checks every dispatch against it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use ash::vk;

use crate::caps::Caps;
use crate::error::{Result, VkError, VkResultExt};

/// A kernel compiled at build time, with what reflection found in its push-constant block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelCode {
    /// `family/file` (plus `:variant`), e.g. `elementwise/add`.
    pub name: &'static str,
    /// SPIR-V words as bytes (little endian).
    pub spirv: &'static [u8],
    /// Size of the push-constant block in bytes (0 if none).
    pub push_size: u32,
    /// Number of leading buffer-reference members in the push-constant block.
    pub pointers: u32,
}

/// A pipeline and its layout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PipelineHandle {
    pub pipeline: vk::Pipeline,
    pub layout: vk::PipelineLayout,
}

/// A kernel's pipelines by specialization constants (a kernel has a few variants at most: a
/// lookup scans them, with no key to allocate and hash on every dispatch).
type Variants = Vec<(Vec<u32>, (PipelineHandle, vk::ShaderModule))>;

pub(crate) struct Pipelines {
    cache: vk::PipelineCache,
    path: Option<PathBuf>,
    max_push: u32,
    map: Mutex<HashMap<&'static str, Variants>>,
}

/// Where pipeline caches live: `$VKFORMERS_CACHE_DIR`, else `$XDG_CACHE_HOME/vkformers`,
/// else `~/.cache/vkformers`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("VKFORMERS_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("vkformers"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("vkformers"))
}

/// The cache file of one device and driver build.
pub fn cache_path(caps: &Caps) -> Option<PathBuf> {
    cache_dir().map(|d| {
        d.join(format!("pipelines-{:04x}-{:04x}-{}.bin", caps.vendor_id, caps.device_id, caps.pipeline_cache_uuid))
    })
}

impl Pipelines {
    pub(crate) fn new(device: &ash::Device, caps: &Caps) -> Result<Self> {
        let path = cache_path(caps);
        let data = path.as_ref().and_then(|p| std::fs::read(p).ok()).unwrap_or_default();
        let cache = create_cache(device, &data).or_else(|_| create_cache(device, &[]))?;
        Ok(Pipelines { cache, path, max_push: caps.max_push_constants, map: Mutex::new(HashMap::new()) })
    }

    pub(crate) fn len(&self) -> usize {
        self.map.lock().map(|m| m.values().map(Vec::len).sum()).unwrap_or(0)
    }

    /// The pipeline of `code` with specialization constants `spec` (ids 0, 1, ...).
    pub(crate) fn get(&self, device: &ash::Device, code: &KernelCode, spec: &[u32]) -> Result<PipelineHandle> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let variants = map.entry(code.name).or_default();
        if let Some((_, (h, _))) = variants.iter().find(|(s, _)| s.as_slice() == spec) {
            return Ok(*h);
        }
        if code.push_size > self.max_push {
            return Err(VkError::Kernel {
                kernel: code.name.into(),
                message: format!("push constants of {} bytes exceed the device's {}", code.push_size, self.max_push),
            });
        }
        let start = std::time::Instant::now();
        let entry = create_pipeline(device, self.cache, code, spec)?;
        if log_creations() {
            eprintln!(
                "vkformers: pipeline {} {spec:?} created in {:.0} ms",
                code.name,
                start.elapsed().as_secs_f64() * 1e3
            );
        }
        variants.push((spec.to_vec(), entry));
        Ok(entry.0)
    }

    /// Writes the cache to disk atomically (temporary name, then rename).
    pub(crate) fn save(&self, device: &ash::Device) -> Result<()> {
        let Some(path) = &self.path else { return Ok(()) };
        // SAFETY: valid cache of this device.
        let data = unsafe { device.get_pipeline_cache_data(self.cache) }.vk("vkGetPipelineCacheData")?;
        let io = |source| VkError::CacheIo { path: path.display().to_string(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &data).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// # Safety
    /// No pipeline may be in use on the device.
    pub(crate) unsafe fn destroy(&self, device: &ash::Device) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        for (_, (h, module)) in map.drain().flat_map(|(_, v)| v) {
            // SAFETY: guaranteed idle by the caller.
            unsafe {
                device.destroy_pipeline(h.pipeline, None);
                device.destroy_pipeline_layout(h.layout, None);
                device.destroy_shader_module(module, None);
            }
        }
        // SAFETY: as above.
        unsafe { device.destroy_pipeline_cache(self.cache, None) };
    }
}

/// `VKFORMERS_LOG_PIPELINES=1` (read once): each pipeline's creation time on stderr, where GPU
/// drivers compile (a cm2 GEMM pipeline not in the cache: about a second on NVIDIA's). llvmpipe
/// creates them in 0.1-0.3 s and defers its LLVM compile to the first dispatch (seconds, tens of
/// seconds cold for 128-invocation kernels with barriers, mostly LLVM's coroutine frame
/// building), which this does not time.
fn log_creations() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VKFORMERS_LOG_PIPELINES").is_ok_and(|v| v == "1"))
}

fn create_cache(device: &ash::Device, data: &[u8]) -> Result<vk::PipelineCache> {
    let info = vk::PipelineCacheCreateInfo::default().initial_data(data);
    // SAFETY: the driver checks the header of `data` and ignores a cache of another device.
    unsafe { device.create_pipeline_cache(&info, None) }.vk("vkCreatePipelineCache")
}

fn create_pipeline(
    device: &ash::Device,
    cache: vk::PipelineCache,
    code: &KernelCode,
    spec: &[u32],
) -> Result<(PipelineHandle, vk::ShaderModule)> {
    let kernel_err =
        |call: &str, r: vk::Result| VkError::Kernel { kernel: code.name.into(), message: format!("{call}: {r}") };
    let words = ash::util::read_spv(&mut std::io::Cursor::new(code.spirv))
        .map_err(|e| VkError::Kernel { kernel: code.name.into(), message: format!("bad SPIR-V: {e}") })?;
    let module_info = vk::ShaderModuleCreateInfo::default().code(&words);
    // SAFETY: SPIR-V compiled by glslang at build time.
    let module = unsafe { device.create_shader_module(&module_info, None) }
        .map_err(|r| kernel_err("vkCreateShaderModule", r))?;
    let ranges =
        [vk::PushConstantRange::default().stage_flags(vk::ShaderStageFlags::COMPUTE).offset(0).size(code.push_size)];
    let mut layout_info = vk::PipelineLayoutCreateInfo::default();
    if code.push_size > 0 {
        layout_info = layout_info.push_constant_ranges(&ranges);
    }
    // SAFETY: valid device.
    let layout = unsafe { device.create_pipeline_layout(&layout_info, None) }
        .map_err(|r| kernel_err("vkCreatePipelineLayout", r))?;
    let entries: Vec<vk::SpecializationMapEntry> =
        (0..spec.len() as u32).map(|i| vk::SpecializationMapEntry { constant_id: i, offset: i * 4, size: 4 }).collect();
    let spec_bytes: &[u8] = bytemuck::cast_slice(spec);
    let spec_info = vk::SpecializationInfo::default().map_entries(&entries).data(spec_bytes);
    let stage = vk::PipelineShaderStageCreateInfo::default()
        .stage(vk::ShaderStageFlags::COMPUTE)
        .module(module)
        .name(c"main")
        .specialization_info(&spec_info);
    let info = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(layout)];
    // SAFETY: module, layout and cache are valid; `info` outlives the call.
    let pipeline = unsafe { device.create_compute_pipelines(cache, &info, None) }
        .map_err(|(_, r)| kernel_err("vkCreateComputePipelines", r))?[0];
    Ok((PipelineHandle { pipeline, layout }, module))
}
