//! Differentiable ops: each records its forward kernels into the graph's batch and pushes a
//! backward closure onto the tape (see `Graph::push_node`).

pub mod activation;
pub mod attention;
pub mod broadcast;
pub mod cast;
pub mod checkpoint;
pub mod chunked_loss;
pub mod clamped_swiglu;
pub mod dropout;
pub mod embedding;
pub mod glu;
pub mod loss;
pub mod matmul;
pub mod moe;
pub mod norm;
mod one_kernel_grad;
pub mod packed_linear;
pub mod packed_qkv;
pub mod packed_split;
pub mod reduce;
pub mod rope;
pub mod scatter;
pub mod shape;
pub mod softmax;
pub mod sparsemixer;
pub mod split;

pub(crate) use one_kernel_grad::push_one_kernel_grad;
