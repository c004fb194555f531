//! GLSL compute kernels, compiled to SPIR-V at build time (see `build.rs`), one folder per op
//! family under `shaders/`, each with its Rust launcher here.

use vkformers_vk::KernelCode;

/// Every compiled kernel as a `KernelCode` constant (generated).
pub mod code {
    use super::KernelCode;
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}

pub mod activation;
pub mod attention;
pub mod broadcast;
pub mod dropout;
pub mod dtype;
pub mod elementwise;
pub mod embedding;
pub mod gemm_coopmat;
pub mod glu;
pub(crate) mod launch;
pub mod loss;
pub mod matmul;
pub mod mma_peak;
pub mod moe;
pub mod norm;
pub mod optim;
pub mod reduce;
pub mod rope;
pub mod sample;
pub mod softmax;
pub mod step;

#[doc(hidden)]
pub mod testutil;
