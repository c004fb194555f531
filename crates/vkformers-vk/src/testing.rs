//! Test helper: run a closure on every Vulkan device present, with the Khronos validation
//! layer on, and fail on any validation warning or error.

use std::sync::Arc;

use crate::device::{list_devices, Context, DeviceSelector};
use crate::error::Result;
use crate::instance::{Instance, InstanceOptions};

/// Set `VKFORMERS_TEST_NO_VALIDATION=1` only where the layer cannot be installed (it is
/// always installed by `.ci/run`); the helper then says loudly that validation is off.
const NO_VALIDATION_ENV: &str = "VKFORMERS_TEST_NO_VALIDATION";

/// Runs `f` once per device with validation on; panics with the messages if the layer
/// reported anything, or with the error if `f` failed.
pub fn on_every_device(test: &str, f: impl Fn(&Context) -> Result<()>) {
    let validation = std::env::var_os(NO_VALIDATION_ENV).is_none();
    if !validation {
        eprintln!("warning: {test}: validation layer OFF ({NO_VALIDATION_ENV} is set)");
    }
    keep_driver_loaded();
    let instance = Arc::new(Instance::new(&InstanceOptions { validation }).unwrap_or_else(|e| panic!("{test}: {e}")));
    let devices = list_devices(&instance).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert!(!devices.is_empty(), "{test}: no Vulkan device");
    for d in devices {
        let name = d.caps.name.clone();
        {
            let ctx = Context::with_instance(instance.clone(), &DeviceSelector::Index(d.index))
                .unwrap_or_else(|e| panic!("{test} on {name}: {e}"));
            if let Err(e) = f(&ctx) {
                panic!("{test} on {name}: {e}");
            }
        }
        if let Some(log) = instance.validation_log() {
            let messages = log.take();
            assert!(
                messages.is_empty(),
                "{test} on {name}: {} validation message(s):\n{}",
                messages.len(),
                messages.join("\n")
            );
        }
    }
}

/// Keeps one instance (no validation) alive for the rest of the process, so the loader and the
/// driver stay loaded between tests: each test's own instance otherwise loads and unloads them,
/// and on the H200 the NVIDIA driver stopped loading after 30 such cycles in one process
/// (tests run one at a time: "the Vulkan loader found no device" from the 31st on; open file
/// descriptors and device memory did not grow). Each test keeps its own instance and
/// validation log.
fn keep_driver_loaded() {
    static KEEP: std::sync::OnceLock<Option<Instance>> = std::sync::OnceLock::new();
    KEEP.get_or_init(|| Instance::new(&InstanceOptions { validation: false }).ok());
}

#[cfg(test)]
mod tests {
    use ash::vk;

    use super::*;

    /// The helper is only worth something if the layer really reports misuse: a buffer of
    /// size 0 violates VUID-VkBufferCreateInfo-size-00912.
    #[test]
    fn validation_layer_catches_misuse() {
        let instance =
            Arc::new(Instance::new(&InstanceOptions { validation: true }).expect("instance with validation"));
        let ctx = Context::with_instance(instance.clone(), &DeviceSelector::Best).expect("context");
        let info = vk::BufferCreateInfo::default().size(0).usage(vk::BufferUsageFlags::STORAGE_BUFFER);
        // SAFETY: deliberately invalid create info; the layer reports it before the driver.
        if let Ok(b) = unsafe { ctx.shared.device.create_buffer(&info, None) } {
            // SAFETY: the buffer is unused.
            unsafe { ctx.shared.device.destroy_buffer(b, None) };
        }
        let messages = instance.validation_log().expect("log").take();
        assert!(messages.iter().any(|m| m.contains("00912")), "{messages:?}");
    }
}
