//! Device buffers. Memory comes from `gpu-allocator`, which sub-allocates it from large blocks;
//! every buffer is addressed by its device address, so kernels see no binding-size limit
//! (`maxStorageBufferRange` is 128 MiB on lavapipe, tensors may be larger).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ash::vk;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};
use gpu_allocator::MemoryLocation;

use crate::device::{Context, Shared};
use crate::error::{Result, VkError, VkResultExt};
use crate::pool::{size_class, Pooled};

static NEXT_BUFFER_ID: AtomicU64 = AtomicU64::new(1);

/// Bytes held by device-local buffers: now, and the peak since creation or the last reset.
#[derive(Default)]
pub(crate) struct MemoryStats {
    current: AtomicU64,
    peak: AtomicU64,
}

impl MemoryStats {
    fn add(&self, bytes: u64) {
        let now = self.current.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    fn sub(&self, bytes: u64) {
        self.current.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// Device-local memory held by a context's buffers (their allocation sizes), in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    pub current: u64,
    pub peak: u64,
}

/// Where a buffer lives: on the device, or host-visible for staging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferKind {
    Device,
    Upload,
    Download,
}

/// A device buffer with a stable device address. Cloning is cheap (shared handle); the memory
/// is freed when the last clone is dropped, and a recorder holds a clone of every buffer it
/// uses until its batch has completed.
#[derive(Clone)]
pub struct Buffer(Arc<BufferInner>);

pub(crate) struct BufferInner {
    shared: Arc<Shared>,
    pub(crate) raw: vk::Buffer,
    allocation: std::sync::Mutex<Option<Allocation>>,
    /// Bytes counted in `Shared::device_bytes` (device-local buffers only).
    counted: u64,
    size: u64,
    /// Bytes of the VkBuffer (its size class): pooled device buffers return to the pool.
    capacity: u64,
    pooled: bool,
    address: u64,
    id: u64,
}

impl Buffer {
    pub(crate) fn raw(&self) -> vk::Buffer {
        self.0.raw
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.0.size
    }

    /// Device address of the first byte.
    pub fn address(&self) -> u64 {
        self.0.address
    }

    /// True for pooled device buffers: dropping one returns it to the context's pool instead of
    /// destroying it, so recorders need not keep it alive.
    pub(crate) fn is_pooled(&self) -> bool {
        self.0.pooled
    }

    /// Process-unique id, used to track hazards between dispatches.
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// The whole buffer as a view.
    pub fn view(&self) -> BufferView<'_> {
        BufferView { buffer: self, offset: 0, len: self.size() }
    }

    /// A byte range of the buffer.
    pub fn slice(&self, offset: u64, len: u64) -> BufferView<'_> {
        assert!(offset + len <= self.size(), "slice {offset}+{len} past buffer of {} bytes", self.size());
        BufferView { buffer: self, offset, len }
    }

    /// Copies `data` into the mapped memory of a host-visible buffer.
    pub fn write_mapped(&self, data: &[u8]) -> bool {
        let mut guard = self.0.allocation.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut().and_then(|a| a.mapped_slice_mut()) {
            Some(m) => {
                m[..data.len()].copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    /// Copies the start of a host-visible buffer's mapped memory into `out`.
    pub fn read_mapped(&self, out: &mut [u8]) -> bool {
        let guard = self.0.allocation.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref().and_then(|a| a.mapped_slice()) {
            Some(m) => {
                out.copy_from_slice(&m[..out.len()]);
                true
            }
            None => false,
        }
    }
}

/// A handle that does not keep a buffer alive (a batch recorded for replay watches the pooled
/// buffers it uses this way, so those dropped while it is recorded return to the pool and serve
/// its later commands, as in any batch).
pub(crate) struct WeakBuffer {
    inner: std::sync::Weak<BufferInner>,
    id: u64,
}

impl Buffer {
    pub(crate) fn downgrade(&self) -> WeakBuffer {
        WeakBuffer { inner: Arc::downgrade(&self.0), id: self.0.id }
    }
}

impl WeakBuffer {
    /// The buffer again: a live handle's, or the pool's (dropped since; the pool gives it up).
    /// None only if it was destroyed, which a pooled buffer is not until a batch after the one
    /// that dropped it completed.
    pub(crate) fn revive(&self, shared: &Arc<Shared>) -> Option<Buffer> {
        if let Some(inner) = self.inner.upgrade() {
            return Some(Buffer(inner));
        }
        let p = shared.pool().claim(self.id)?;
        let size = p.capacity;
        Some(Buffer::from_pool(shared, p, size))
    }
}

impl Buffer {
    /// A pooled buffer back in use as a buffer of `size` bytes (counted as device memory again).
    fn from_pool(shared: &Arc<Shared>, p: Pooled, size: u64) -> Buffer {
        shared.device_bytes.add(p.capacity);
        Buffer(Arc::new(BufferInner {
            shared: shared.clone(),
            raw: p.raw,
            allocation: std::sync::Mutex::new(Some(p.allocation)),
            counted: p.capacity,
            size,
            capacity: p.capacity,
            pooled: true,
            address: p.address,
            id: p.id,
        }))
    }
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        self.shared.device_bytes.sub(self.counted);
        if self.pooled {
            if let Some(allocation) = self.allocation.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
                let p =
                    Pooled { raw: self.raw, allocation, capacity: self.capacity, address: self.address, id: self.id };
                self.shared.pool().recycle(p);
                return;
            }
        }
        // SAFETY: the last handle is gone, and recorders hold a handle to every unpooled buffer
        // they use until their batch has completed, so the GPU no longer uses it.
        unsafe { self.shared.device.destroy_buffer(self.raw, None) };
        if let Some(a) = self.allocation.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            if let Some(alloc) = self.shared.allocator().as_mut() {
                let _ = alloc.free(a);
            }
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer(id {}, {} bytes)", self.id(), self.size())
    }
}

/// A byte range of a buffer, the unit kernels read and write.
#[derive(Clone, Copy, Debug)]
pub struct BufferView<'a> {
    pub buffer: &'a Buffer,
    pub offset: u64,
    pub len: u64,
}

impl BufferView<'_> {
    /// Device address of the first byte of the view.
    pub fn address(&self) -> u64 {
        self.buffer.address() + self.offset
    }
}

impl Context {
    /// Device-local memory held by this context's buffers now and at most so far.
    pub fn device_memory(&self) -> DeviceMemory {
        let s = &self.shared.device_bytes;
        DeviceMemory { current: s.current.load(Ordering::Relaxed), peak: s.peak.load(Ordering::Relaxed) }
    }

    /// Starts a new peak from the current amount.
    pub fn reset_peak_memory(&self) {
        let s = &self.shared.device_bytes;
        s.peak.store(s.current.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// A device buffer of `size` bytes (from the pool when one of its size class is free);
    /// `what` names it in errors.
    pub fn buffer(&self, size: u64, what: &str) -> Result<Buffer> {
        self.pooled_buffer(size, what, false)
    }

    /// A device buffer that kernels recorded from now on write before anything reads it (op
    /// outputs): it may reuse a buffer dropped while the current batch still reads it (the hazard
    /// tracker orders the accesses). Never upload host data into it before `reclaim_buffers`.
    pub fn scratch_buffer(&self, size: u64, what: &str) -> Result<Buffer> {
        self.pooled_buffer(size, what, true)
    }

    /// Makes the buffers dropped so far safe for any use: call once the batches that used them
    /// have completed.
    pub fn reclaim_buffers(&self) {
        self.shared.pool().reclaim();
    }

    /// Bytes the pool holds for reuse (reserved, not allocated to a live buffer).
    pub fn pooled_bytes(&self) -> u64 {
        self.shared.pool().bytes()
    }

    fn pooled_buffer(&self, size: u64, what: &str, scratch: bool) -> Result<Buffer> {
        let capacity = size_class(size);
        let found = {
            let mut pool = self.shared.pool();
            if scratch {
                pool.take_scratch(capacity)
            } else {
                pool.take_free(capacity)
            }
        };
        if let Some(p) = found {
            return Ok(Buffer::from_pool(&self.shared, p, size.max(4)));
        }
        match self.new_buffer(size, capacity, BufferKind::Device, what) {
            Err(VkError::OutOfDeviceMemory { .. }) => {
                self.release_free_pool();
                self.new_buffer(size, capacity, BufferKind::Device, what)
            }
            other => other,
        }
    }

    /// A device buffer of exactly `size` bytes (rounded to whole 4-byte words), outside the pool:
    /// for tensors that live as long as the model (weights, parameters), which the pool's size
    /// classes would round up by up to a quarter (a 1.1B Llama's bf16 weights by ~144 MB) for
    /// reuse that never comes. Freed on drop.
    pub fn exact_buffer(&self, size: u64, what: &str) -> Result<Buffer> {
        let capacity = size.max(4).next_multiple_of(4);
        let make = || self.new_buffer_pooled(size, capacity, BufferKind::Device, what, false);
        match make() {
            Err(VkError::OutOfDeviceMemory { .. }) => {
                self.release_free_pool();
                make()
            }
            other => other,
        }
    }

    /// Gives the memory of every free pooled buffer back (before retrying an allocation).
    fn release_free_pool(&self) {
        let freed = self.shared.pool().drain_free();
        self.shared.destroy_pooled(freed);
    }

    /// Allocates a buffer of the given kind (device buffers are pooled).
    pub fn buffer_of_kind(&self, size: u64, kind: BufferKind, what: &str) -> Result<Buffer> {
        if kind == BufferKind::Device {
            return self.buffer(size, what);
        }
        self.new_buffer(size, size.max(4), kind, what)
    }

    fn new_buffer(&self, size: u64, capacity: u64, kind: BufferKind, what: &str) -> Result<Buffer> {
        self.new_buffer_pooled(size, capacity, kind, what, kind == BufferKind::Device)
    }

    /// [`Self::new_buffer`], returning to the pool on drop when `pooled`.
    fn new_buffer_pooled(
        &self,
        size: u64,
        capacity: u64,
        kind: BufferKind,
        what: &str,
        pooled: bool,
    ) -> Result<Buffer> {
        let shared = &self.shared;
        let size = size.max(4);
        if size > shared.caps.max_buffer_size && shared.caps.max_buffer_size > 0 {
            return Err(VkError::OutOfDeviceMemory {
                what: format!("{what} (above maxBufferSize {})", shared.caps.max_buffer_size),
                bytes: size,
            });
        }
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let info = vk::BufferCreateInfo::default().size(capacity).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid device and create info.
        let raw =
            unsafe { shared.device.create_buffer(&info, None) }.map_err(|r| oom_or(r, what, size, "vkCreateBuffer"))?;
        // SAFETY: `raw` was just created on this device.
        let requirements = unsafe { shared.device.get_buffer_memory_requirements(raw) };
        let location = match kind {
            BufferKind::Device => MemoryLocation::GpuOnly,
            BufferKind::Upload => MemoryLocation::CpuToGpu,
            BufferKind::Download => MemoryLocation::GpuToCpu,
        };
        let allocation = {
            let mut guard = shared.allocator();
            let alloc = guard.as_mut().ok_or_else(|| VkError::Allocator("allocator already released".into()))?;
            alloc.allocate(&AllocationCreateDesc {
                name: what,
                requirements,
                location,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            })
        };
        let allocation = match allocation {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: `raw` is unbound and unused.
                unsafe { shared.device.destroy_buffer(raw, None) };
                return Err(match e {
                    gpu_allocator::AllocationError::OutOfMemory => {
                        VkError::OutOfDeviceMemory { what: what.into(), bytes: size }
                    }
                    other => VkError::Allocator(format!("{what}: {other}")),
                });
            }
        };
        // SAFETY: memory and offset come from the allocator for these requirements.
        unsafe { shared.device.bind_buffer_memory(raw, allocation.memory(), allocation.offset()) }
            .vk("vkBindBufferMemory")?;
        let addr_info = vk::BufferDeviceAddressInfo::default().buffer(raw);
        // SAFETY: the buffer was created with SHADER_DEVICE_ADDRESS usage and is bound.
        let address = unsafe { shared.device.get_buffer_device_address(&addr_info) };
        let counted = if kind == BufferKind::Device { allocation.size() } else { 0 };
        shared.device_bytes.add(counted);
        Ok(Buffer(Arc::new(BufferInner {
            shared: shared.clone(),
            raw,
            allocation: std::sync::Mutex::new(Some(allocation)),
            counted,
            size,
            capacity,
            pooled,
            address,
            id: NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed),
        })))
    }
}

fn oom_or(r: vk::Result, what: &str, bytes: u64, call: &'static str) -> VkError {
    match r {
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
            VkError::OutOfDeviceMemory { what: what.into(), bytes }
        }
        r => VkError::from_vk(call, r),
    }
}
