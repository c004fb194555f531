//! Differentiable ops.
