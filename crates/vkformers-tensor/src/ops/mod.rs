//! Differentiable ops: each records its forward kernels into the graph's batch and pushes a
//! backward closure onto the tape (see `Graph::push_node`).

pub mod attention;
pub mod dropout;
pub mod loss;
pub mod shape;
pub mod softmax;
