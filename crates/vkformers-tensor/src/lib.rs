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

pub use graph::{GradReadyHook, Graph, StepMode, StepRecord};
pub use profile::Profile;
pub use tensor::{DType, Tensor, WeakTensor};
pub use vkformers_vk::{Result, VkError};

/// `VKFORMERS_ZERO_FILLS=1` zero-fills buffers as before the kernels that write them whole
/// (AdamW's new moments, the embedding gradient), for an A/B of those fills.
pub(crate) fn zero_fills() -> bool {
    std::env::var("VKFORMERS_ZERO_FILLS").is_ok_and(|v| v == "1")
}
