//! Differentiable ops: each records its forward kernels into the graph's batch and pushes a
//! backward closure onto the tape (see `Graph::push_node`).

pub mod activation;
pub mod broadcast;
pub mod glu;
pub mod reduce;
pub mod softmax;
