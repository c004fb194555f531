//! The Vulkan runtime of vkformers: instance and device selection, `Caps`, device-address
//! buffers sub-allocated by `gpu-allocator`, staging transfers, lazily built compute pipelines
//! with an on-disk cache, and the `Recorder` that batches dispatches into one submission.

pub mod caps;
pub mod chain;
pub mod device;
pub mod error;
mod ext_structs;
pub mod hazard;
pub mod instance;
pub mod memory;
pub mod pipeline;
mod pool;
pub mod recorder;
pub mod replay;
mod spare;
mod staging;
pub mod testing;

pub use caps::{Caps, CoopMat2, CoopMatShape, MemoryHeap};
pub use chain::{chains_on, ChainLink, CHAIN_SLOTS};
pub use device::{choose_device, list_devices, Context, DeviceInfo, DeviceSelector};
pub use error::{Result, VkError};
pub use hazard::AccessKind;
pub use instance::{Instance, InstanceOptions};
pub use memory::{Buffer, BufferKind, BufferView, DeviceMemory};
pub use pipeline::KernelCode;
pub use recorder::{read, read_write, write, Arg, BatchReport, LogEntry, Pending, Recorder};
pub use replay::Replay;
pub use staging::STAGING_BYTES;
