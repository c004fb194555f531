//! Structures of extensions newer than the headers `ash` 0.38 was generated from
//! (`VK_KHR_shader_bfloat16`, `VK_NV_cooperative_matrix2`), laid out as in `vulkan_core.h`
//! 1.4.3xx. They are chained into `pNext` by hand.

use std::ffi::{c_void, CStr};

use ash::vk;

pub const KHR_SHADER_BFLOAT16: &CStr = c"VK_KHR_shader_bfloat16";
pub const NV_COOPERATIVE_MATRIX2: &CStr = c"VK_NV_cooperative_matrix2";

/// `VK_COMPONENT_TYPE_BFLOAT16_KHR`.
pub const COMPONENT_TYPE_BFLOAT16: i32 = 1_000_141_000;

const STYPE_BFLOAT16_FEATURES: i32 = 1_000_141_000;
const STYPE_COOPMAT2_FEATURES: i32 = 1_000_593_000;
const STYPE_COOPMAT2_PROPERTIES: i32 = 1_000_593_002;

/// `VkPhysicalDeviceShaderBfloat16FeaturesKHR`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Bfloat16Features {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub shader_bfloat16_type: vk::Bool32,
    pub shader_bfloat16_dot_product: vk::Bool32,
    pub shader_bfloat16_cooperative_matrix: vk::Bool32,
}

impl Default for Bfloat16Features {
    fn default() -> Self {
        Self {
            s_type: vk::StructureType::from_raw(STYPE_BFLOAT16_FEATURES),
            p_next: std::ptr::null_mut(),
            shader_bfloat16_type: 0,
            shader_bfloat16_dot_product: 0,
            shader_bfloat16_cooperative_matrix: 0,
        }
    }
}

/// `VkPhysicalDeviceCooperativeMatrix2FeaturesNV`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CoopMat2Features {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub workgroup_scope: vk::Bool32,
    pub flexible_dimensions: vk::Bool32,
    pub reductions: vk::Bool32,
    pub conversions: vk::Bool32,
    pub per_element_operations: vk::Bool32,
    pub tensor_addressing: vk::Bool32,
    pub block_loads: vk::Bool32,
}

impl Default for CoopMat2Features {
    fn default() -> Self {
        Self {
            s_type: vk::StructureType::from_raw(STYPE_COOPMAT2_FEATURES),
            p_next: std::ptr::null_mut(),
            workgroup_scope: 0,
            flexible_dimensions: 0,
            reductions: 0,
            conversions: 0,
            per_element_operations: 0,
            tensor_addressing: 0,
            block_loads: 0,
        }
    }
}

/// `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CoopMat2Properties {
    pub s_type: vk::StructureType,
    pub p_next: *mut c_void,
    pub workgroup_scope_max_workgroup_size: u32,
    pub flexible_dimensions_max_dimension: u32,
    pub workgroup_scope_reserved_shared_memory: u32,
}

impl Default for CoopMat2Properties {
    fn default() -> Self {
        Self {
            s_type: vk::StructureType::from_raw(STYPE_COOPMAT2_PROPERTIES),
            p_next: std::ptr::null_mut(),
            workgroup_scope_max_workgroup_size: 0,
            flexible_dimensions_max_dimension: 0,
            workgroup_scope_reserved_shared_memory: 0,
        }
    }
}

/// Puts `node` at the head of the `pNext` chain that starts at `*head`.
///
/// # Safety
/// `node` must start with `sType`/`pNext` and outlive every use of the chain.
pub unsafe fn chain_front<T>(head: &mut *mut c_void, node: &mut T, node_next: *mut *mut c_void) {
    // SAFETY: the caller guarantees `node_next` points at `node`'s pNext field.
    unsafe { *node_next = *head };
    *head = node as *mut T as *mut c_void;
}
