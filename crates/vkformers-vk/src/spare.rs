//! Command pools, their command buffer and fence, kept for the next batch: a decode step submits
//! one or two batches, and creating and destroying a pool (whose command memory the driver
//! allocates afresh) and a fence for each is driver work on the host's critical path on every
//! step. A completed batch's set is reset (the pool keeps its memory) and waits here.

use std::sync::Mutex;

use ash::vk;

use crate::error::{Result, VkResultExt};

/// Sets kept at most: a graph has up to `MAX_IN_FLIGHT` (3) batches in flight and one open.
const KEEP: usize = 8;

/// A command pool with its one primary command buffer (initial state) and an unsignaled fence.
#[derive(Clone, Copy)]
pub(crate) struct BatchSet {
    pub pool: vk::CommandPool,
    pub cmd: vk::CommandBuffer,
    pub fence: vk::Fence,
}

/// The spare sets of one device.
#[derive(Default)]
pub(crate) struct Spares(Mutex<Vec<BatchSet>>);

impl Spares {
    /// A spare set, or a new one.
    pub(crate) fn take(&self, device: &ash::Device, queue_family: u32) -> Result<BatchSet> {
        if let Some(set) = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(set);
        }
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(queue_family)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: valid device; the pool belongs to one recorder at a time.
        let pool = unsafe { device.create_command_pool(&info, None) }.vk("vkCreateCommandPool")?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool was just created.
        let cmd = match unsafe { device.allocate_command_buffers(&alloc) }.vk("vkAllocateCommandBuffers") {
            Ok(c) => c[0],
            Err(e) => {
                // SAFETY: nothing was allocated from the pool.
                unsafe { device.destroy_command_pool(pool, None) };
                return Err(e);
            }
        };
        // SAFETY: valid device.
        let fence = match unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }.vk("vkCreateFence") {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: the command buffer was never used.
                unsafe { device.destroy_command_pool(pool, None) };
                return Err(e);
            }
        };
        Ok(BatchSet { pool, cmd, fence })
    }

    /// Sets kept now.
    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Takes back a set whose command buffer is not pending on the device, its fence signaled
    /// (`signaled`: the batch was submitted and waited for) or never submitted: reset for the next
    /// batch, or destroyed when enough are kept (or a reset fails).
    pub(crate) fn give(&self, device: &ash::Device, set: BatchSet, signaled: bool) {
        // SAFETY: the caller guarantees the command buffer is not pending and the fence is not
        // in use by a pending submission.
        let reset = unsafe {
            let fence_ok = !signaled || device.reset_fences(&[set.fence]).is_ok();
            fence_ok && device.reset_command_pool(set.pool, vk::CommandPoolResetFlags::empty()).is_ok()
        };
        let mut spares = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if reset && spares.len() < KEEP {
            spares.push(set);
            return;
        }
        drop(spares);
        // SAFETY: as above; the set is no longer referenced.
        unsafe { destroy(device, set) };
    }

    /// Destroys every spare set.
    ///
    /// # Safety
    /// The device must be idle.
    pub(crate) unsafe fn destroy_all(&self, device: &ash::Device) {
        for set in self.0.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            // SAFETY: the caller guarantees the device is idle.
            unsafe { destroy(device, set) };
        }
    }
}

/// Destroys a set's pool (and its command buffer) and fence.
///
/// # Safety
/// Neither may be in use on the device.
pub(crate) unsafe fn destroy(device: &ash::Device, set: BatchSet) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        device.destroy_fence(set.fence, None);
        device.destroy_command_pool(set.pool, None);
    }
}
