//! Device listing, selection and the `Context`: one logical device with a compute queue, the
//! memory allocator, the pipeline store and a staging buffer.

use std::ffi::CStr;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use gpu_allocator::{AllocationSizes, AllocatorDebugSettings};

use crate::caps::{self, Caps, FeatureSet};
use crate::error::{Result, VkError, VkResultExt};
use crate::ext_structs::chain_front;
use crate::instance::{Instance, InstanceOptions};
use crate::pipeline::Pipelines;

/// Which device to use: `--device 1` picks by index, `--device nvidia` by a name substring.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DeviceSelector {
    /// The first discrete GPU, else integrated, else virtual, else CPU.
    #[default]
    Best,
    Index(usize),
    Name(String),
}

impl FromStr for DeviceSelector {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        Ok(match s.trim() {
            "" | "auto" | "best" => DeviceSelector::Best,
            t => t.parse().map_or_else(|_| DeviceSelector::Name(t.to_string()), DeviceSelector::Index),
        })
    }
}

/// One physical device as the loader reports it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceInfo {
    pub index: usize,
    pub caps: Caps,
}

/// Lists every physical device with its caps.
pub fn list_devices(instance: &Instance) -> Result<Vec<DeviceInfo>> {
    instance
        .physical_devices()?
        .into_iter()
        .enumerate()
        .map(|(index, pd)| {
            let (caps, _) = caps::read_caps(&instance.entry, &instance.raw, pd)?;
            Ok(DeviceInfo { index, caps })
        })
        .collect()
}

/// Preference order of device types for `DeviceSelector::Best`.
fn type_rank(device_type: &str) -> u32 {
    match device_type {
        "discrete" => 0,
        "integrated" => 1,
        "virtual" => 2,
        "cpu" => 3,
        _ => 4,
    }
}

/// Picks a device index from a list; a pure function so it can be tested without devices.
pub fn choose_device(devices: &[DeviceInfo], selector: &DeviceSelector) -> Result<usize> {
    let available = || devices.iter().map(|d| format!("{}: {}", d.index, d.caps.name)).collect::<Vec<_>>().join(", ");
    match selector {
        DeviceSelector::Best => devices
            .iter()
            .min_by_key(|d| (type_rank(&d.caps.device_type), d.index))
            .map(|d| d.index)
            .ok_or(VkError::NoDevice),
        DeviceSelector::Index(i) => devices
            .iter()
            .find(|d| d.index == *i)
            .map(|d| d.index)
            .ok_or_else(|| VkError::DeviceNotFound { wanted: i.to_string(), available: available() }),
        DeviceSelector::Name(n) => {
            let n = n.to_lowercase();
            devices
                .iter()
                .find(|d| d.caps.name.to_lowercase().contains(&n))
                .map(|d| d.index)
                .ok_or_else(|| VkError::DeviceNotFound { wanted: n.clone(), available: available() })
        }
    }
}

/// State shared by the context and every buffer made from it.
pub(crate) struct Shared {
    pub(crate) device: ash::Device,
    pub(crate) queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    pub(crate) allocator: Mutex<Option<Allocator>>,
    pub(crate) caps: Caps,
    pub(crate) pipelines: Pipelines,
    /// Bytes of device-local buffers alive now, and the most alive at once (`Context::device_memory`).
    pub(crate) device_bytes: crate::memory::MemoryStats,
    /// Dropped device buffers waiting for reuse (see `pool`).
    pub(crate) pool: Mutex<crate::pool::Pool>,
    /// Command pools and fences of completed batches, kept for the next ones (see `spare`).
    pub(crate) spares: crate::spare::Spares,
    // Dropped last: the device and everything above were made from it.
    pub(crate) instance: Arc<Instance>,
}

impl Shared {
    pub(crate) fn allocator(&self) -> MutexGuard<'_, Option<Allocator>> {
        self.allocator.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn pool(&self) -> MutexGuard<'_, crate::pool::Pool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Destroys pooled buffers and frees their memory (none may be in use on the device).
    pub(crate) fn destroy_pooled(&self, buffers: Vec<crate::pool::Pooled>) {
        let mut alloc = self.allocator();
        for p in buffers {
            // SAFETY: a pooled buffer in the free list (or any, at teardown after the device is
            // idle) is not used by any pending batch.
            unsafe { self.device.destroy_buffer(p.raw, None) };
            if let Some(a) = alloc.as_mut() {
                let _ = a.free(p.allocation);
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: all buffers and recorders hold an `Arc<Shared>`, so none is alive now.
        unsafe {
            let _ = self.device.device_wait_idle();
            let pooled = self.pool().drain_all();
            self.destroy_pooled(pooled);
            self.spares.destroy_all(&self.device);
            self.pipelines.destroy(&self.device);
            self.allocator().take();
            self.device.destroy_device(None);
        }
    }
}

/// A Vulkan device ready to run kernels.
pub struct Context {
    pub(crate) shared: Arc<Shared>,
    pub(crate) staging: Mutex<Option<crate::staging::Staging>>,
}

impl Context {
    /// Creates an instance (validation off) and a context on the selected device.
    pub fn new(selector: &DeviceSelector) -> Result<Self> {
        let instance = Arc::new(Instance::new(&InstanceOptions::default())?);
        Self::with_instance(instance, selector)
    }

    /// Creates a context on the selected device of an existing instance.
    pub fn with_instance(instance: Arc<Instance>, selector: &DeviceSelector) -> Result<Self> {
        let devices = list_devices(&instance)?;
        let index = choose_device(&devices, selector)?;
        let pd = instance.physical_devices()?[index];
        let (mut caps, mut feats) = caps::read_caps(&instance.entry, &instance.raw, pd)?;
        if instance.validation_layer_version().is_some_and(|v| v < BF16_AWARE_LAYER) {
            without_bf16(&mut caps, &mut feats);
        }
        require(&caps, &feats)?;
        let queue_family = compute_queue_family(&instance, pd, &caps.name)?;
        let device = create_device(&instance, pd, queue_family, &caps, &feats)?;
        // SAFETY: the queue family was requested with one queue at device creation.
        let queue = unsafe { device.get_device_queue(queue_family, 0) };
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.raw.clone(),
            device: device.clone(),
            physical_device: pd,
            debug_settings: AllocatorDebugSettings::default(),
            buffer_device_address: true,
            allocation_sizes: AllocationSizes::default(),
        })
        .map_err(|e| VkError::Allocator(e.to_string()))?;
        let pipelines = Pipelines::new(&device, &caps)?;
        let shared = Arc::new(Shared {
            device,
            queue: Mutex::new(queue),
            queue_family,
            allocator: Mutex::new(Some(allocator)),
            caps,
            pipelines,
            device_bytes: Default::default(),
            pool: Mutex::new(Default::default()),
            spares: Default::default(),
            instance,
        });
        Ok(Context { shared, staging: Mutex::new(None) })
    }

    /// The device's capabilities.
    pub fn caps(&self) -> &Caps {
        &self.shared.caps
    }

    /// The instance this context was made from.
    pub fn instance(&self) -> &Arc<Instance> {
        &self.shared.instance
    }

    /// Writes the pipeline cache to disk now (it is also written when the context is dropped).
    pub fn save_pipeline_cache(&self) -> Result<()> {
        self.shared.pipelines.save(&self.shared.device)
    }

    /// Number of compute pipelines created so far.
    pub fn pipeline_count(&self) -> usize {
        self.shared.pipelines.len()
    }

    /// Command pools (with their command buffer and fence) kept for the next batches.
    pub fn spare_batches(&self) -> usize {
        self.shared.spares.len()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if let Ok(mut s) = self.staging.lock() {
            s.take();
        }
        let _ = self.shared.pipelines.save(&self.shared.device);
    }
}

/// The first validation layer (header 1.4.313) that knows `VK_KHR_shader_bfloat16`; older
/// layers report its structures as unknown, so under them the extension is left off.
const BF16_AWARE_LAYER: u32 = vk::make_api_version(0, 1, 4, 313);

/// Turns the bf16 extension off in `caps` (and so at device creation): used when the
/// validation layer is too old to check it.
fn without_bf16(caps: &mut Caps, feats: &mut FeatureSet) {
    let name = crate::ext_structs::KHR_SHADER_BFLOAT16.to_string_lossy();
    caps.extensions.retain(|e| *e != name);
    caps.cooperative_matrix.retain(|s| s.a != "bf16" && s.b != "bf16");
    caps.bf16 = false;
    caps.bf16_cooperative_matrix = false;
    feats.bf16 = false;
    feats.bf16_coopmat = false;
}

/// What every kernel relies on: buffer device address (all kernels take buffer pointers) and
/// 64-bit integers (to carry those pointers).
fn require(caps: &Caps, feats: &FeatureSet) -> Result<()> {
    let missing = [(feats.bda, "bufferDeviceAddress"), (feats.int64, "shaderInt64")];
    for (ok, what) in missing {
        if !ok {
            return Err(VkError::MissingFeature { device: caps.name.clone(), what: what.into() });
        }
    }
    Ok(())
}

fn compute_queue_family(instance: &Instance, pd: vk::PhysicalDevice, name: &str) -> Result<u32> {
    // SAFETY: valid physical device.
    let families = unsafe { instance.raw.get_physical_device_queue_family_properties(pd) };
    // Prefer a compute-only family (async compute on discrete GPUs), else any with compute.
    let pick = families
        .iter()
        .position(|f| {
            f.queue_flags.contains(vk::QueueFlags::COMPUTE) && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS)
        })
        .or_else(|| families.iter().position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE)));
    pick.map(|i| i as u32)
        .ok_or_else(|| VkError::MissingFeature { device: name.into(), what: "a compute queue".into() })
}

fn create_device(
    instance: &Instance,
    pd: vk::PhysicalDevice,
    family: u32,
    caps: &Caps,
    feats: &FeatureSet,
) -> Result<ash::Device> {
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&priorities)];
    let ext_names: Vec<&CStr> = caps::WANTED_EXTENSIONS
        .iter()
        .copied()
        .filter(|w| caps.extensions.iter().any(|e| *e == w.to_string_lossy()))
        .collect();
    let ext_ptrs: Vec<*const std::ffi::c_char> = ext_names.iter().map(|e| e.as_ptr()).collect();
    let mut v11 = vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(feats.storage16);
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default()
        .shader_float16(feats.fp16)
        .shader_int8(feats.int8)
        .storage_buffer8_bit_access(feats.storage8)
        .buffer_device_address(true)
        .timeline_semaphore(feats.timeline)
        .vulkan_memory_model(feats.memory_model)
        .vulkan_memory_model_device_scope(feats.memory_model);
    let mut v13 = vk::PhysicalDeviceVulkan13Features::default()
        .subgroup_size_control(feats.subgroup_size_control)
        .compute_full_subgroups(feats.subgroup_size_control)
        .synchronization2(feats.sync2);
    let mut cm = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
    let mut bf = crate::ext_structs::Bfloat16Features {
        shader_bfloat16_type: vk::Bool32::from(feats.bf16),
        shader_bfloat16_cooperative_matrix: vk::Bool32::from(feats.bf16_coopmat),
        ..Default::default()
    };
    let mut cm2 = feats.coopmat2.unwrap_or_default();
    let base = vk::PhysicalDeviceFeatures::default().shader_int64(true).shader_int16(feats.int16);
    let mut f2 = vk::PhysicalDeviceFeatures2::default()
        .features(base)
        .push_next(&mut v11)
        .push_next(&mut v12)
        .push_next(&mut v13);
    if feats.coopmat {
        f2 = f2.push_next(&mut cm);
    }
    // SAFETY: chain nodes live on this frame until after vkCreateDevice.
    unsafe {
        if feats.bf16 {
            let next = &mut bf.p_next as *mut _;
            chain_front(&mut f2.p_next, &mut bf, next);
        }
        if feats.coopmat2.is_some() {
            let next = &mut cm2.p_next as *mut _;
            chain_front(&mut f2.p_next, &mut cm2, next);
        }
    }
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&ext_ptrs)
        .push_next(&mut f2);
    // SAFETY: `info` and its chain outlive the call.
    unsafe { instance.raw.create_device(pd, &info, None) }.vk("vkCreateDevice")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(index: usize, name: &str, device_type: &str) -> DeviceInfo {
        DeviceInfo { index, caps: Caps { name: name.into(), device_type: device_type.into(), ..Caps::default() } }
    }

    #[test]
    fn best_prefers_discrete_then_integrated_then_cpu() {
        let all = [dev(0, "llvmpipe", "cpu"), dev(1, "Intel UHD", "integrated"), dev(2, "NVIDIA H200", "discrete")];
        assert_eq!(choose_device(&all, &DeviceSelector::Best).unwrap(), 2);
        assert_eq!(choose_device(&all[..2], &DeviceSelector::Best).unwrap(), 1);
        assert_eq!(choose_device(&all[..1], &DeviceSelector::Best).unwrap(), 0);
        assert!(matches!(choose_device(&[], &DeviceSelector::Best), Err(VkError::NoDevice)));
    }

    #[test]
    fn selectors_parse_and_match_by_index_or_name() {
        let all = [dev(0, "llvmpipe (LLVM 15)", "cpu"), dev(1, "NVIDIA H200", "discrete")];
        assert_eq!("1".parse::<DeviceSelector>().unwrap(), DeviceSelector::Index(1));
        assert_eq!("auto".parse::<DeviceSelector>().unwrap(), DeviceSelector::Best);
        assert_eq!(choose_device(&all, &"h200".parse().unwrap()).unwrap(), 1);
        assert_eq!(choose_device(&all, &"LLVMpipe".parse().unwrap()).unwrap(), 0);
        let err = choose_device(&all, &"7".parse().unwrap()).unwrap_err().to_string();
        assert!(err.contains("0: llvmpipe") && err.contains("1: NVIDIA H200"), "{err}");
        assert!(choose_device(&all, &"radeon".parse().unwrap()).is_err());
    }
}
