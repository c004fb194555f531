//! Pointwise activations `y = f(x)` (x, y [..], any shape): SiLU, GELU (exact), GELU (tanh
//! approximation), ReLU, squared ReLU, sigmoid. Backward: `dx = dy * f'(x)`, from the saved
//! input.

use vkformers_kernels::activation as k;
pub use vkformers_kernels::activation::Activation;
use vkformers_kernels::dtype::DType;

use crate::{Graph, Result, Tensor};

/// `y = act(x)` elementwise; x, y [..].
pub fn activation(g: &Graph<'_>, x: &Tensor, act: Activation) -> Result<Tensor> {
    let y = g.output(x.shape(), &[x])?;
    g.record(|rec| k::forward(rec, act, x.view(), y.view(), DType::F32))?;
    let saved = x.clone();
    g.push_node(
        &y,
        vec![x.clone()],
        Box::new(move |g, dy| {
            let dx = g.empty(saved.shape())?;
            g.record(|rec| k::backward(rec, act, saved.view(), dy.view(), dx.view(), DType::F32))?;
            Ok(vec![Some(dx)])
        }),
    );
    Ok(y)
}

/// `x * sigmoid(x)`.
pub fn silu(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    activation(g, x, Activation::Silu)
}

/// `0.5 x (1 + erf(x / sqrt 2))`.
pub fn gelu(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    activation(g, x, Activation::Gelu)
}

/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub fn gelu_tanh(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    activation(g, x, Activation::GeluTanh)
}

/// `max(x, 0)`.
pub fn relu(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    activation(g, x, Activation::Relu)
}

/// `max(x, 0)^2`.
pub fn relu2(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    activation(g, x, Activation::Relu2)
}

/// `1 / (1 + exp(-x))`.
pub fn sigmoid(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    activation(g, x, Activation::Sigmoid)
}
