//! The Vulkan loader and instance, with an optional Khronos validation layer whose messages are
//! collected so that tests can fail on any of them.

use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};

use ash::{ext, vk};

use crate::error::{Result, VkError, VkResultExt};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// Messages the validation layer reported (warnings and errors), shared with the callback.
#[derive(Default, Debug)]
pub struct ValidationLog {
    messages: Mutex<Vec<String>>,
}

impl ValidationLog {
    /// Removes and returns every message collected so far.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.messages.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn push(&self, message: String) {
        self.messages.lock().unwrap_or_else(|e| e.into_inner()).push(message);
    }
}

/// Options for creating an [`Instance`].
#[derive(Clone, Debug, Default)]
pub struct InstanceOptions {
    /// Enable `VK_LAYER_KHRONOS_validation` and collect its warnings and errors.
    pub validation: bool,
}

/// The loaded Vulkan library and one instance.
pub struct Instance {
    pub(crate) entry: ash::Entry,
    pub(crate) raw: ash::Instance,
    debug: Option<(ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// Also what the callback's user pointer points at: kept alive as long as the messenger.
    validation: Option<Arc<ValidationLog>>,
    /// Header version the validation layer was built against, when it is on.
    layer_version: Option<u32>,
}

impl Instance {
    /// Loads `libvulkan` at run time and creates an instance (Vulkan 1.3).
    pub fn new(options: &InstanceOptions) -> Result<Self> {
        // SAFETY: loading the system Vulkan loader; its symbols follow the Vulkan ABI.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| VkError::NoLoader { reason: e.to_string() })?;
        let layer_version = if options.validation { layer_spec_version(&entry, VALIDATION_LAYER)? } else { None };
        if options.validation && layer_version.is_none() {
            return Err(VkError::MissingFeature {
                device: "the Vulkan loader".into(),
                what: "the Khronos validation layer (apt-get install vulkan-validationlayers)".into(),
            });
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"vkformers")
            .engine_name(c"vkformers")
            .api_version(vk::API_VERSION_1_3);
        let layers = [VALIDATION_LAYER.as_ptr()];
        let exts = [ext::debug_utils::NAME.as_ptr()];
        let mut info = vk::InstanceCreateInfo::default().application_info(&app);
        if options.validation {
            info = info.enabled_layer_names(&layers).enabled_extension_names(&exts);
        }
        // SAFETY: `info` and everything it points to outlive the call.
        let raw = unsafe { entry.create_instance(&info, None) }.map_err(|r| match r {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => VkError::NoDevice,
            r => VkError::from_vk("vkCreateInstance", r),
        })?;
        let mut instance = Instance { entry, raw, debug: None, validation: None, layer_version };
        if options.validation {
            instance.install_messenger()?;
        }
        Ok(instance)
    }

    fn install_messenger(&mut self) -> Result<()> {
        let log = Arc::new(ValidationLog::default());
        let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(
                vk::DebugUtilsMessageSeverityFlagsEXT::WARNING | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
            )
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE
                    | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL,
            )
            .pfn_user_callback(Some(on_validation_message))
            .user_data(Arc::as_ptr(&log) as *mut c_void);
        let loader = ext::debug_utils::Instance::new(&self.entry, &self.raw);
        // SAFETY: `log` is kept in `self` until the messenger is destroyed.
        let messenger =
            unsafe { loader.create_debug_utils_messenger(&info, None) }.vk("vkCreateDebugUtilsMessengerEXT")?;
        self.debug = Some((loader, messenger));
        self.validation = Some(log);
        Ok(())
    }

    /// The validation log, when the instance was created with validation on.
    pub fn validation_log(&self) -> Option<&Arc<ValidationLog>> {
        self.validation.as_ref()
    }

    /// The Vulkan header version the validation layer knows, when validation is on.
    pub fn validation_layer_version(&self) -> Option<u32> {
        self.layer_version
    }

    /// The raw `ash` instance.
    pub fn raw(&self) -> &ash::Instance {
        &self.raw
    }

    /// The physical devices the loader reports, in its order.
    pub fn physical_devices(&self) -> Result<Vec<vk::PhysicalDevice>> {
        // SAFETY: valid instance.
        let devices = unsafe { self.raw.enumerate_physical_devices() }.vk("vkEnumeratePhysicalDevices")?;
        if devices.is_empty() {
            return Err(VkError::NoDevice);
        }
        Ok(devices)
    }

    /// The loader's instance version as `major.minor.patch`.
    pub fn loader_version(&self) -> String {
        // SAFETY: valid entry.
        let v = unsafe { self.entry.try_enumerate_instance_version() }.ok().flatten().unwrap_or(vk::API_VERSION_1_0);
        crate::caps::version_string(v)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: every device made from this instance has been dropped (they hold an `Arc`).
        unsafe {
            if let Some((loader, messenger)) = self.debug.take() {
                loader.destroy_debug_utils_messenger(messenger, None);
            }
            self.raw.destroy_instance(None);
        }
    }
}

fn layer_spec_version(entry: &ash::Entry, name: &CStr) -> Result<Option<u32>> {
    // SAFETY: valid entry.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }.vk("vkEnumerateInstanceLayerProperties")?;
    Ok(layers.iter().find(|l| l.layer_name_as_c_str().is_ok_and(|n| n == name)).map(|l| l.spec_version))
}

unsafe extern "system" fn on_validation_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _kind: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes valid callback data; `user` points at the instance's `ValidationLog`.
    unsafe {
        if data.is_null() || user.is_null() {
            return vk::FALSE;
        }
        let message = (*data).message_as_c_str().map(|m| m.to_string_lossy().into_owned()).unwrap_or_default();
        let log = &*(user as *const ValidationLog);
        log.push(format!("[{severity:?}] {message}"));
    }
    vk::FALSE
}
