//! Pointwise activations, forward and backward: SiLU, GELU (exact, with an f32 erf), GELU with
//! the tanh approximation, ReLU, squared ReLU, sigmoid. `x`, `y`, `dy`, `dx` are views of `n`
//! f32 each (any shape, contiguous).

pub mod reference;
pub(crate) mod util;

use vkformers_vk::{read, write, BufferView, KernelCode, Recorder, Result};

use crate::code;
use util::{elements, expect_len, groups_for, params};

/// A pointwise activation function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// x * sigmoid(x).
    Silu,
    /// 0.5 x (1 + erf(x / sqrt 2)).
    Gelu,
    /// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's approximate='tanh'.
    GeluTanh,
    /// max(x, 0).
    Relu,
    /// max(x, 0)^2.
    Relu2,
    /// 1 / (1 + exp(-x)).
    Sigmoid,
}

impl Activation {
    /// Every activation, for tests.
    pub const ALL: [Activation; 6] = [
        Activation::Silu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Relu,
        Activation::Relu2,
        Activation::Sigmoid,
    ];

    fn forward_code(self) -> &'static KernelCode {
        match self {
            Activation::Silu => &code::ACTIVATION_FORWARD_SILU,
            Activation::Gelu => &code::ACTIVATION_FORWARD_GELU,
            Activation::GeluTanh => &code::ACTIVATION_FORWARD_GELU_TANH,
            Activation::Relu => &code::ACTIVATION_FORWARD_RELU,
            Activation::Relu2 => &code::ACTIVATION_FORWARD_RELU2,
            Activation::Sigmoid => &code::ACTIVATION_FORWARD_SIGMOID,
        }
    }

    fn backward_code(self) -> &'static KernelCode {
        match self {
            Activation::Silu => &code::ACTIVATION_BACKWARD_SILU,
            Activation::Gelu => &code::ACTIVATION_BACKWARD_GELU,
            Activation::GeluTanh => &code::ACTIVATION_BACKWARD_GELU_TANH,
            Activation::Relu => &code::ACTIVATION_BACKWARD_RELU,
            Activation::Relu2 => &code::ACTIVATION_BACKWARD_RELU2,
            Activation::Sigmoid => &code::ACTIVATION_BACKWARD_SIGMOID,
        }
    }
}

fn unary(rec: &mut Recorder, k: &KernelCode, x: BufferView<'_>, y: BufferView<'_>) -> Result<()> {
    let n = elements(k, "x", &x)?;
    expect_len(k, "y", &y, n)?;
    rec.dispatch(k, &[], &[read(x), write(y)], &params(&[n as u32]), groups_for(n))
}

/// `y = f(x)` elementwise; x, y [n].
pub fn forward(rec: &mut Recorder, act: Activation, x: BufferView<'_>, y: BufferView<'_>) -> Result<()> {
    unary(rec, act.forward_code(), x, y)
}

/// `dx = dy * f'(x)` elementwise; x, dy, dx [n].
pub fn backward(
    rec: &mut Recorder,
    act: Activation,
    x: BufferView<'_>,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
) -> Result<()> {
    let k = act.backward_code();
    let n = elements(k, "x", &x)?;
    expect_len(k, "dy", &dy, n)?;
    expect_len(k, "dx", &dx, n)?;
    rec.dispatch(k, &[], &[read(x), read(dy), write(dx)], &params(&[n as u32]), groups_for(n))
}

/// `y = erf(x)` elementwise with the shaders' f32 erf (absolute error below 2e-7); x, y [n].
/// Exposed so its accuracy can be tested.
pub fn erf(rec: &mut Recorder, x: BufferView<'_>, y: BufferView<'_>) -> Result<()> {
    unary(rec, &code::ACTIVATION_FORWARD_ERF, x, y)
}
