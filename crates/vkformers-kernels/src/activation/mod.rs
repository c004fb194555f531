//! Pointwise activations, forward and backward: SiLU, GELU (exact, with an f32 erf), GELU with
//! the tanh approximation, ReLU, squared ReLU, sigmoid. `x`, `y`, `dy`, `dx` are views of `n`
//! elements each (any shape, contiguous) of one storage type `DType` (f32, f16 or bf16; math is
//! f32 in every case).

pub mod reference;

use vkformers_vk::{read, write, BufferView, KernelCode, Recorder, Result};

use crate::code;
use crate::code::{ActivationBackwardPush, ActivationForwardPush, ActivationXieluPush};
use crate::dtype::DType;
use crate::launch::{check_storage, dispatch_elems, elements, err, expect_len, expect_lens, pick};

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

    /// Forward kernels, `[f32, f16, bf16]`.
    fn forward_codes(self) -> [&'static KernelCode; 3] {
        use code::*;
        match self {
            Activation::Silu => [&ACTIVATION_FORWARD_SILU, &ACTIVATION_FORWARD_SILU_F16, &ACTIVATION_FORWARD_SILU_BF16],
            Activation::Gelu => [&ACTIVATION_FORWARD_GELU, &ACTIVATION_FORWARD_GELU_F16, &ACTIVATION_FORWARD_GELU_BF16],
            Activation::GeluTanh => {
                [&ACTIVATION_FORWARD_GELU_TANH, &ACTIVATION_FORWARD_GELU_TANH_F16, &ACTIVATION_FORWARD_GELU_TANH_BF16]
            }
            Activation::Relu => [&ACTIVATION_FORWARD_RELU, &ACTIVATION_FORWARD_RELU_F16, &ACTIVATION_FORWARD_RELU_BF16],
            Activation::Relu2 => {
                [&ACTIVATION_FORWARD_RELU2, &ACTIVATION_FORWARD_RELU2_F16, &ACTIVATION_FORWARD_RELU2_BF16]
            }
            Activation::Sigmoid => {
                [&ACTIVATION_FORWARD_SIGMOID, &ACTIVATION_FORWARD_SIGMOID_F16, &ACTIVATION_FORWARD_SIGMOID_BF16]
            }
        }
    }

    /// Forward kernels from f32 into a 16-bit type, `[f16, bf16]`.
    fn narrow_codes(self) -> [&'static KernelCode; 2] {
        use code::*;
        match self {
            Activation::Silu => [&ACTIVATION_FORWARD_NARROW_SILU_F16, &ACTIVATION_FORWARD_NARROW_SILU_BF16],
            Activation::Gelu => [&ACTIVATION_FORWARD_NARROW_GELU_F16, &ACTIVATION_FORWARD_NARROW_GELU_BF16],
            Activation::GeluTanh => {
                [&ACTIVATION_FORWARD_NARROW_GELU_TANH_F16, &ACTIVATION_FORWARD_NARROW_GELU_TANH_BF16]
            }
            Activation::Relu => [&ACTIVATION_FORWARD_NARROW_RELU_F16, &ACTIVATION_FORWARD_NARROW_RELU_BF16],
            Activation::Relu2 => [&ACTIVATION_FORWARD_NARROW_RELU2_F16, &ACTIVATION_FORWARD_NARROW_RELU2_BF16],
            Activation::Sigmoid => [&ACTIVATION_FORWARD_NARROW_SIGMOID_F16, &ACTIVATION_FORWARD_NARROW_SIGMOID_BF16],
        }
    }

    /// Backward kernels, `[f32, f16, bf16]`.
    fn backward_codes(self) -> [&'static KernelCode; 3] {
        use code::*;
        match self {
            Activation::Silu => {
                [&ACTIVATION_BACKWARD_SILU, &ACTIVATION_BACKWARD_SILU_F16, &ACTIVATION_BACKWARD_SILU_BF16]
            }
            Activation::Gelu => {
                [&ACTIVATION_BACKWARD_GELU, &ACTIVATION_BACKWARD_GELU_F16, &ACTIVATION_BACKWARD_GELU_BF16]
            }
            Activation::GeluTanh => [
                &ACTIVATION_BACKWARD_GELU_TANH,
                &ACTIVATION_BACKWARD_GELU_TANH_F16,
                &ACTIVATION_BACKWARD_GELU_TANH_BF16,
            ],
            Activation::Relu => {
                [&ACTIVATION_BACKWARD_RELU, &ACTIVATION_BACKWARD_RELU_F16, &ACTIVATION_BACKWARD_RELU_BF16]
            }
            Activation::Relu2 => {
                [&ACTIVATION_BACKWARD_RELU2, &ACTIVATION_BACKWARD_RELU2_F16, &ACTIVATION_BACKWARD_RELU2_BF16]
            }
            Activation::Sigmoid => {
                [&ACTIVATION_BACKWARD_SIGMOID, &ACTIVATION_BACKWARD_SIGMOID_F16, &ACTIVATION_BACKWARD_SIGMOID_BF16]
            }
        }
    }
}

/// `y = f(x)` by the forward kernel `k`: x of `x_dt`, y as many values of `y_dt`.
fn unary(
    rec: &mut Recorder,
    k: &KernelCode,
    (x, y): (BufferView<'_>, BufferView<'_>),
    (x_dt, y_dt): (DType, DType),
) -> Result<()> {
    let n = elements(k, "x", &x, x_dt)?;
    expect_len(k, "y", &y, n, y_dt)?;
    dispatch_elems(rec, k, &[read(x), write(y)], &ActivationForwardPush { n: n as u32 }, n)
}

/// `y = f(x)` elementwise; x, y [n] of storage type `dt`.
pub fn forward(rec: &mut Recorder, act: Activation, x: BufferView<'_>, y: BufferView<'_>, dt: DType) -> Result<()> {
    let k = pick(rec, dt, act.forward_codes())?;
    unary(rec, k, (x, y), (dt, dt))
}

/// `y = f(x)` elementwise, x [n] f32 and y [n] of the 16-bit type `out` (f16 or bf16): the
/// activation and the cast to a product's operand type in one pass (bit for bit `forward` in
/// f32 then `dtype::cast`).
pub fn forward_narrow(
    rec: &mut Recorder,
    act: Activation,
    x: BufferView<'_>,
    y: BufferView<'_>,
    out: DType,
) -> Result<()> {
    let [f16, bf16] = act.narrow_codes();
    let k = match out {
        DType::F16 => f16,
        DType::BF16 => bf16,
        DType::F32 => return Err(err(f16, "the output type must be f16 or bf16, not f32".into())),
    };
    check_storage(rec, k, out)?;
    unary(rec, k, (x, y), (DType::F32, out))
}

/// `dx = dy * f'(x)` elementwise; x, dy, dx [n] of storage type `dt`.
pub fn backward(
    rec: &mut Recorder,
    act: Activation,
    x: BufferView<'_>,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
    dt: DType,
) -> Result<()> {
    let k = pick(rec, dt, act.backward_codes())?;
    let n = elements(k, "x", &x, dt)?;
    expect_lens(k, &[("dy", &dy), ("dx", &dx)], n, dt)?;
    dispatch_elems(rec, k, &[read(x), read(dy), write(dx)], &ActivationBackwardPush { n: n as u32 }, n)
}

/// `y = erf(x)` elementwise with the shaders' f32 erf (absolute error below 2e-7); x, y [n] f32.
/// Exposed so its accuracy can be tested.
pub fn erf(rec: &mut Recorder, x: BufferView<'_>, y: BufferView<'_>) -> Result<()> {
    unary(rec, &code::ACTIVATION_FORWARD_ERF, (x, y), (DType::F32, DType::F32))
}

/// xIELU's scalars on the device, `[1]` f32 each: the raw learned `a_p`, `a_n` (used through
/// softplus) and the constants `beta`, `eps` (see shaders/activation/xielu.comp).
pub struct XieluScalars<'a> {
    pub a_p: BufferView<'a>,
    pub a_n: BufferView<'a>,
    pub beta: BufferView<'a>,
    pub eps: BufferView<'a>,
}

impl XieluScalars<'_> {
    fn check(&self, k: &KernelCode) -> Result<()> {
        let scalars = [("a_p", &self.a_p), ("a_n", &self.a_n), ("beta", &self.beta), ("eps", &self.eps)];
        expect_lens(k, &scalars, 1, DType::F32)
    }
}

/// xIELU forward: `y = xielu(x)`; x, y [n] f32.
pub fn xielu_forward(rec: &mut Recorder, x: BufferView<'_>, s: &XieluScalars<'_>, y: BufferView<'_>) -> Result<()> {
    let k = &code::ACTIVATION_XIELU_FORWARD;
    let n = elements(k, "x", &x, DType::F32)?;
    expect_len(k, "y", &y, n, DType::F32)?;
    s.check(k)?;
    let bufs = [read(x), read(s.a_p), read(s.a_n), read(s.beta), read(s.eps), write(y)];
    dispatch_elems(rec, k, &bufs, &ActivationXieluPush { n: n as u32 }, n)
}

/// xIELU backward: `dx`, and the per-element terms `gp`, `gn` whose sums are the gradients of
/// softplus(a_p) and softplus(a_n); x, dy, dx, gp, gn [n] f32.
pub fn xielu_backward(
    rec: &mut Recorder,
    x: BufferView<'_>,
    s: &XieluScalars<'_>,
    dy: BufferView<'_>,
    [dx, gp, gn]: [BufferView<'_>; 3],
) -> Result<()> {
    let k = &code::ACTIVATION_XIELU_BACKWARD;
    let n = elements(k, "x", &x, DType::F32)?;
    expect_lens(k, &[("dy", &dy), ("dx", &dx), ("gp", &gp), ("gn", &gn)], n, DType::F32)?;
    s.check(k)?;
    let bufs =
        [read(x), read(s.a_p), read(s.a_n), read(s.beta), read(s.eps), read(dy), write(dx), write(gp), write(gn)];
    dispatch_elems(rec, k, &bufs, &ActivationXieluPush { n: n as u32 }, n)
}
