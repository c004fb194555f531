//! Tensors on the device and a tape that differentiates any composition of the ops in `ops`.
//!
//! A `Graph` owns the device, one open `Recorder` (every op records into it, so a whole
//! forward + backward + optimizer step is one submission) and the tape. Reading a tensor back
//! to the host submits the batch and waits once.

pub mod graph;
pub mod ops;
pub mod optim;
pub mod profile;
pub mod tensor;

pub use graph::{GradReadyHook, Graph};
pub use profile::Profile;
pub use tensor::{DType, Tensor, WeakTensor};
pub use vkformers_vk::{Result, VkError};
