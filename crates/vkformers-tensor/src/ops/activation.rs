//! Pointwise activations `y = f(x)` (x, y [..], any shape): SiLU, GELU (exact), GELU (tanh
//! approximation), ReLU, squared ReLU, sigmoid. Backward: `dx = dy * f'(x)`, from the saved
//! input.

use vkformers_kernels::activation as k;
pub use vkformers_kernels::activation::Activation;
use vkformers_kernels::dtype::DType;
use vkformers_kernels::matmul::gemv::gemv_applies;

use crate::ops::push_one_kernel_grad;
use crate::{Graph, Result, Tensor};

/// `y = act(x)` elementwise; x, y [..].
pub fn activation(g: &Graph<'_>, x: &Tensor, act: Activation) -> Result<Tensor> {
    let y = g.output(x.shape(), &[x])?;
    g.record(|rec| k::forward(rec, act, x.view(), y.view(), DType::F32))?;
    let saved = x.clone();
    push_one_kernel_grad(g, &y, x, move |rec, dy, dx| k::backward(rec, act, saved.view(), dy, dx, DType::F32));
    Ok(y)
}

/// `act(x)` for the product that reads it next (an MLP's up -> act -> down). In inference under
/// autocast, on rows a GEMM multiplies (not the few-row f32 GEMV of decoding), that product
/// reads a 16-bit copy of `act(x)`: the result is that copy, written in one pass from the f32
/// x (no f32 output written, read back and cast). The same bits as `activation` then the cast;
/// else `activation` itself (training, f32, decoding).
pub fn activation_for_product(g: &Graph<'_>, x: &Tensor, act: Activation) -> Result<Tensor> {
    let gemm_rows = |n: usize| u32::try_from(n).is_ok_and(|m| !gemv_applies(m, g.ctx().caps()));
    let narrow = g
        .autocast()
        .filter(|dt| *dt != DType::F32 && !g.grad_enabled() && x.dtype() == DType::F32 && gemm_rows(x.rows()));
    let Some(dt) = narrow else { return activation(g, x, act) };
    let y = g.empty_as(x.shape(), dt)?;
    g.record(|rec| k::forward_narrow(rec, act, x.view(), y.view(), dt))?;
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

/// xIELU's scalars as graph tensors, `[1]` each: learned `a_p`, `a_n` (raw, before softplus)
/// and the constants `beta`, `eps`.
pub struct Xielu<'t> {
    pub a_p: &'t Tensor,
    pub a_n: &'t Tensor,
    pub beta: &'t Tensor,
    pub eps: &'t Tensor,
}

/// xIELU (Apertus): `y = ap x^2 + beta x` for x > 0, `an (expm1(min(x, eps)) - x) + beta x`
/// otherwise, `ap = softplus(a_p)`, `an = beta + softplus(a_n)`; x, y [..]. Gradients flow to x,
/// `a_p` and `a_n`: `d a_p = sigmoid(a_p) sum_{x>0} dy x^2`, `d a_n = sigmoid(a_n) sum_{x<=0}
/// dy (expm1(min(x, eps)) - x)` (softplus' = sigmoid).
pub fn xielu(g: &Graph<'_>, x: &Tensor, s: &Xielu<'_>) -> Result<Tensor> {
    let y = g.output(x.shape(), &[x, s.a_p, s.a_n])?;
    let (a_p, a_n, beta, eps) = (s.a_p.clone(), s.a_n.clone(), s.beta.clone(), s.eps.clone());
    g.record(|rec| {
        let sv = k::XieluScalars { a_p: a_p.view(), a_n: a_n.view(), beta: beta.view(), eps: eps.view() };
        k::xielu_forward(rec, x.view(), &sv, y.view())
    })?;
    let saved = x.clone();
    g.push_node(
        &y,
        vec![x.clone(), a_p.clone(), a_n.clone()],
        Box::new(move |g, dy| {
            let (dx, gp, gn) = (g.empty(saved.shape())?, g.empty(saved.shape())?, g.empty(saved.shape())?);
            g.record(|rec| {
                let sv = k::XieluScalars { a_p: a_p.view(), a_n: a_n.view(), beta: beta.view(), eps: eps.view() };
                k::xielu_backward(rec, saved.view(), &sv, dy.view(), [dx.view(), gp.view(), gn.view()])
            })?;
            // softplus'(u) = sigmoid(u), on copies outside the tape.
            let chain = |raw: &Tensor, terms: &Tensor| -> Result<Tensor> {
                let sig = g.empty(&[1])?;
                g.record(|rec| k::forward(rec, Activation::Sigmoid, raw.view(), sig.view(), DType::F32))?;
                crate::ops::broadcast::mul(g, &crate::ops::reduce::sum(g, terms)?, &sig)
            };
            Ok(vec![Some(dx), Some(chain(&a_p, &gp)?), Some(chain(&a_n, &gn)?)])
        }),
    );
    Ok(y)
}
