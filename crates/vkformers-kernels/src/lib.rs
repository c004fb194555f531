//! GLSL compute kernels, compiled to SPIR-V at build time (see `build.rs`), one folder per op
//! family under `shaders/`, each with its Rust launcher here.

use vkformers_vk::KernelCode;

/// Every compiled kernel as a `KernelCode` constant (generated).
pub mod code {
    use super::KernelCode;
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}

pub mod elementwise;
pub mod matmul;

#[doc(hidden)]
pub mod testutil;
