//! Differentiable ops: each records its forward kernels into the graph's batch and pushes a
//! backward closure onto the tape (see `Graph::push_node`).

pub mod embedding;
pub mod matmul;
pub mod norm;
pub mod rope;
pub mod softmax;
