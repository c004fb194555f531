//! Typed errors of the Vulkan runtime. Every error a user can cause or meet says what happened
//! and, where there is one, what to do about it.

use ash::vk;

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, VkError>;

#[derive(Debug, thiserror::Error)]
pub enum VkError {
    #[error(
        "no Vulkan loader (libvulkan.so.1) could be loaded: {reason}. \
         Install one, e.g. `apt-get install libvulkan1 mesa-vulkan-drivers` on Debian/Ubuntu \
         (mesa-vulkan-drivers brings lavapipe, a CPU driver that works everywhere)"
    )]
    NoLoader { reason: String },

    #[error(
        "the Vulkan loader found no device. Install a driver: your GPU vendor's, or Mesa's \
         lavapipe for the CPU (`apt-get install mesa-vulkan-drivers`); `vkformers doctor` \
         shows what the loader sees"
    )]
    NoDevice,

    #[error("no Vulkan device matches `{wanted}`; available: {available}")]
    DeviceNotFound { wanted: String, available: String },

    #[error(
        "device `{device}` lacks {what}, which vkformers needs; update the driver or pick \
         another device with --device"
    )]
    MissingFeature { device: String, what: String },

    #[error(
        "out of device memory allocating {bytes} bytes for {what}; use a smaller batch or \
         sequence length, or a device with more memory"
    )]
    OutOfDeviceMemory { what: String, bytes: u64 },

    #[error(
        "the Vulkan device was lost while running {kernels}; this is a driver reset or a \
         kernel fault, the batch's results are lost"
    )]
    DeviceLost { kernels: String },

    #[error("kernel `{kernel}`: {message}")]
    Kernel { kernel: String, message: String },

    #[error("{call} failed: {result}")]
    Vulkan { call: &'static str, result: vk::Result },

    #[error("memory allocator: {0}")]
    Allocator(String),

    #[error("pipeline cache `{path}`: {source}")]
    CacheIo {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl VkError {
    /// Wraps a raw Vulkan result from `call`, turning memory exhaustion and device loss into
    /// their own variants so that callers can match on them.
    pub fn from_vk(call: &'static str, result: vk::Result) -> Self {
        match result {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                VkError::OutOfDeviceMemory { what: call.to_string(), bytes: 0 }
            }
            vk::Result::ERROR_DEVICE_LOST => VkError::DeviceLost { kernels: call.to_string() },
            _ => VkError::Vulkan { call, result },
        }
    }
}

/// Extension to turn `ash` results into typed errors naming the call.
pub(crate) trait VkResultExt<T> {
    fn vk(self, call: &'static str) -> Result<T>;
}

impl<T> VkResultExt<T> for std::result::Result<T, vk::Result> {
    fn vk(self, call: &'static str) -> Result<T> {
        self.map_err(|r| VkError::from_vk(call, r))
    }
}
