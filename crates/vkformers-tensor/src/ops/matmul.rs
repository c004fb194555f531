//! Matrix products on the GEMM kernel: `matmul` (`C = A · B`), `matmul_nt` (`C = A · Bᵀ`) and
//! `linear` (`y = x · Wᵀ + b`, the `nn.Linear` layout `W [out, in]`).
//!
//! A is `[.., M, K]` (its leading dims form a batch); B is either one matrix shared by the whole
//! batch (then the batch is folded into the rows: one GEMM of `batch · M` rows) or a batch of
//! matrices with exactly A's leading dims. Backward (transposes through the GEMM flags, no
//! copies): `dA = dC · op(B)ᵀ`, `dB = Aᵀ · dC` (or `dCᵀ · A` for a transposed B), summed over
//! the batch when B is shared, and `dbias = onesᵀ · dC` (column sums of dC).

use vkformers_kernels::matmul::auto::{gemm_auto, gemm_split_k, split_k_plan};
use vkformers_kernels::matmul::gemv::{gemv, gemv_applies, GemvDesc};
use vkformers_kernels::matmul::{gemm, GemmDesc};

use super::cast::{autocast_copy, narrow};
use crate::{DType, Graph, Result, Tensor, VkError};

/// A (batched) product `C [batch, m, n] = A [batch, m, k] · op(B)`, `op(B) [k, n]` stored
/// `[k, n]` or (`trans_b`) `[n, k]`. `batch == 1` also covers a B shared by a folded batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Product {
    pub(crate) batch: u32,
    pub(crate) m: u32,
    pub(crate) k: u32,
    pub(crate) n: u32,
    pub(crate) trans_b: bool,
}

fn err(message: String) -> VkError {
    VkError::Kernel { kernel: "matmul".into(), message }
}

fn dim32(what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| err(format!("{what} = {v} does not fit in 32 bits")))
}

/// `C [.., M, N] = A [.., M, K] · B`, with B `[K, N]` (shared across A's batch) or
/// `[.., K, N]` (same leading dims as A).
pub fn matmul(g: &Graph<'_>, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    two_operand(g, a, b, false)
}

/// `C [.., M, N] = A [.., M, K] · Bᵀ`, with B `[N, K]` (shared across A's batch) or
/// `[.., N, K]` (same leading dims as A): attention scores, tied LM heads.
pub fn matmul_nt(g: &Graph<'_>, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    two_operand(g, a, b, true)
}

/// `y [.., out] = x [.., in] · Wᵀ + bias`, with `W [out, in]` and an optional `bias [out]`.
pub fn linear(g: &Graph<'_>, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let (p, out_shape) = linear_plan(x, w, bias)?;
    product(g, (x, w), bias, p, &out_shape, DType::F32)
}

/// [`linear`] for an output that only attention reads (a decoder's v): in training under
/// autocast, on rows the GEMM multiplies, y is the product's 16-bit C in the autocast type (the
/// f32 result rounded in the kernel as attention's cast of an f32 y would round it: the same
/// bits, no f32 y and no cast), and its gradient comes back in that type (attention's dv as
/// written). Elsewhere, with a bias, or with `VKFORMERS_WIDE_OUTPUTS=1` / `VKFORMERS_GEMM_CASTS=1`,
/// exactly [`linear`].
pub fn linear_for_attention(g: &Graph<'_>, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let (p, out_shape) = linear_plan(x, w, bias)?;
    let half = super::cast::half_output_for_rows(g, x.rows()).filter(|_| bias.is_none() && grads_in_16_bits());
    product(g, (x, w), bias, p, &out_shape, half.unwrap_or(DType::F32))
}

/// Shapes of `linear`: the product and the output shape `[.., out]`.
fn linear_plan(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<(Product, Vec<usize>)> {
    let (xs, ws) = (x.shape(), w.shape());
    if xs.is_empty() || ws.len() != 2 || ws[1] != x.last_dim() {
        return Err(err(format!("linear: x {xs:?} and W {ws:?} (need x [.., in] and W [out, in])")));
    }
    if let Some(bias) = bias {
        if bias.numel() != ws[0] {
            return Err(err(format!("linear: bias {:?} for {} outputs", bias.shape(), ws[0])));
        }
    }
    let p = Product {
        batch: 1,
        m: dim32("rows", x.rows())?,
        k: dim32("in", ws[1])?,
        n: dim32("out", ws[0])?,
        trans_b: true,
    };
    let mut out_shape = xs.to_vec();
    if let Some(last) = out_shape.last_mut() {
        *last = ws[0];
    }
    Ok((p, out_shape))
}

/// Shapes of `matmul` / `matmul_nt`: the product and the output shape `[.., M, N]`.
fn plan(a: &Tensor, b: &Tensor, trans_b: bool) -> Result<(Product, Vec<usize>)> {
    let (sa, sb) = (a.shape(), b.shape());
    let bad = || err(format!("matmul{}: A {sa:?} and B {sb:?}", if trans_b { "_nt" } else { "" }));
    if sa.len() < 2 || sb.len() < 2 {
        return Err(bad());
    }
    let (lead, m, k) = (&sa[..sa.len() - 2], sa[sa.len() - 2], sa[sa.len() - 1]);
    let (b_lead, r, c) = (&sb[..sb.len() - 2], sb[sb.len() - 2], sb[sb.len() - 1]);
    let (bk, n) = if trans_b { (c, r) } else { (r, c) };
    let shared = b_lead.is_empty();
    if bk != k || !(shared || b_lead == lead) {
        return Err(bad());
    }
    let batch: usize = lead.iter().product();
    let (batch, m) = if shared { (1, batch * m) } else { (batch, m) };
    let p = Product { batch: dim32("batch", batch)?, m: dim32("M", m)?, k: dim32("K", k)?, n: dim32("N", n)?, trans_b };
    let mut out_shape = sa.to_vec();
    let last = out_shape.len() - 1;
    out_shape[last] = n;
    Ok((p, out_shape))
}

fn two_operand(g: &Graph<'_>, a: &Tensor, b: &Tensor, trans_b: bool) -> Result<Tensor> {
    let (p, out_shape) = plan(a, b, trans_b)?;
    product(g, (a, b), None, p, &out_shape, DType::F32)
}

/// The storage type a product runs in: the autocast type when mixed precision is on, else
/// the 16-bit type of a 16-bit operand (a weight kept in bf16 for inference), else f32.
fn product_dtype(g: &Graph<'_>, a: &Tensor, b: &Tensor) -> Result<DType> {
    let half = [a.dtype(), b.dtype()].into_iter().find(|d| *d != DType::F32);
    let dt = g.autocast().or(half).unwrap_or(DType::F32);
    for t in [a, b] {
        if t.dtype() != DType::F32 && t.dtype() != dt {
            return Err(err(format!(
                "operands {:?} {:?} and {:?} {:?} of different 16-bit types",
                a.shape(),
                a.dtype(),
                b.shape(),
                b.dtype()
            )));
        }
    }
    Ok(dt)
}

/// Records `C = A · op(B) (+ bias)` (C of `out`: f32, or the product's 16-bit type on GEMM
/// rows; A and B read in `product_dtype`) and its backward node (inputs `[a, b]` or
/// `[a, b, bias]`). Backward saves only the operands in the product's type (the 16-bit copies
/// under autocast, so f32 activations are not kept alive by it) and returns f32 gradients for
/// f32 inputs.
fn product(
    g: &Graph<'_>,
    (a, b): (&Tensor, &Tensor),
    bias: Option<&Tensor>,
    p: Product,
    shape: &[usize],
    out: DType,
) -> Result<Tensor> {
    if let Some(bias) = bias {
        if bias.dtype() != DType::F32 {
            return Err(err(format!("bias {:?} must be f32, is {:?}", bias.shape(), bias.dtype())));
        }
    }
    let mut inputs = vec![a, b];
    inputs.extend(bias);
    let c = g.output_as(shape, out, &inputs)?;
    let few = out == DType::F32 && few_rows(g, (a, b), bias, p, &c)?;
    if few && !c.requires_grad() {
        return Ok(c);
    }
    let dt = product_dtype(g, a, b)?;
    if out != DType::F32 && out != dt {
        return Err(err(format!("a {out:?} output of a {dt:?} product")));
    }
    let (a16, b16) = (autocast_copy(g, a, dt)?, autocast_copy(g, b, dt)?);
    if !few {
        let mut desc = GemmDesc::packed(p.m, p.n, p.k, false, p.trans_b);
        desc.batch = p.batch;
        desc.has_bias = bias.is_some();
        desc.dtype = dt;
        desc.c_dtype = out;
        record_gemm(g, &desc, &a16, &b16, bias, &c)?;
    }
    if bias.is_none() {
        // dC may come in the product's 16-bit type (attention's dv): the products read it as
        // they read dC's 16-bit copy. (A bias's gradient sums f32 dC.)
        super::cast::takes_half_grad(g, &c);
    }
    let need = [a.requires_grad(), b.requires_grad()];
    // dA in f32 for a 16-bit A whose producer takes its gradient in f32 (`glu_for_product`).
    let a_grad_dtype = if super::cast::wants_wide_grad(g, a) { DType::F32 } else { a.dtype() };
    let a_grad = Operand { shape: a.shape().to_vec(), dtype: a_grad_dtype };
    let b_grad = Operand { shape: b.shape().to_vec(), dtype: b.dtype() };
    let saved_bias = bias.map(|t| (t.requires_grad(), t.shape().to_vec()));
    let a_id = a.id();
    // A parameter B (a leaf) is kept to reach its gradient accumulator at backward time.
    let b_leaf = (b.is_leaf() && b.dtype() == DType::F32).then(|| b.clone());
    g.push_node(
        &c,
        inputs.into_iter().cloned().collect(),
        Box::new(move |g, dc| {
            let dc16 = narrow(g, dc, dt)?;
            let da = if need[0] {
                // dA adds into the gradient A already gathered from its other readers (the
                // other projections reading one normalised activation): no add after.
                let into =
                    if a_grad.dtype == DType::F32 { g.take_gathered_grad_in_place(a_id, &a_grad.shape) } else { None };
                Some(grad_a(g, p, &dc16, &b16, &a_grad, into)?)
            } else {
                None
            };
            // dB adds into B's accumulator when it has one (a weight read by several products of
            // one step, e.g. the LM head over the loss chunks, or a later micro-batch): no axpy.
            let b_acc = if need[1] { b_leaf.as_ref().and_then(|b| g.leaf_grad_accumulator(b)) } else { None };
            let db = match b_acc {
                Some(acc) => {
                    grad_b(g, p, &a16, &dc16, &b_grad, Some(acc))?;
                    None
                }
                None if need[1] => Some(grad_b(g, p, &a16, &dc16, &b_grad, None)?),
                None => None,
            };
            let mut grads = vec![da, db];
            if let Some((rg, shape)) = &saved_bias {
                grads.push(if *rg { Some(grad_bias(g, p, dc, shape)?) } else { None });
            }
            Ok(grads)
        }),
    );
    Ok(c)
}

/// Writes `y = x · Wᵀ (+ bias)` with the GEMV kernel when x is a few f32 rows and W `[n, k]`
/// any storage type (decoding): the weight is read once at bandwidth, in its stored type,
/// instead of padding the rows to a GEMM tile. Chosen by shape alone without autocast, so a
/// forward gives the same values with or without a tape; returns false when it does not apply.
/// Not while the tape records under autocast (training): there the forward multiplies the
/// 16-bit copies its backward multiplies, as `torch.autocast` rounds every linear's operands
/// however few the rows (the f32 GEMV made a tiny batch's forward f32, its backward 16-bit).
pub(crate) fn few_rows(
    g: &Graph<'_>,
    (x, w): (&Tensor, &Tensor),
    bias: Option<&Tensor>,
    p: Product,
    y: &Tensor,
) -> Result<bool> {
    let autocast_training = g.autocast().is_some() && g.grad_enabled();
    let applies = p.trans_b && p.batch == 1 && x.dtype() == DType::F32 && !autocast_training;
    if !applies || !gemv_applies(p.m, g.ctx().caps()) {
        return Ok(false);
    }
    let mut desc = GemvDesc::packed(p.m, p.n, p.k, w.dtype());
    desc.has_bias = bias.is_some();
    g.record(|rec| gemv(rec, &desc, x.view(), w.view(), bias.map(Tensor::view), y.view()))?;
    Ok(true)
}

/// Records one GEMM of the tape: split along K into a scratch workspace when the output is
/// too small to fill the device (weight gradients), else on `gemm_auto`'s engine.
pub(crate) fn record_gemm(
    g: &Graph<'_>,
    desc: &GemmDesc,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    c: &Tensor,
) -> Result<()> {
    if let Some((splits, bytes)) = split_k_plan(desc) {
        let ws = g.empty(&[(bytes / 4) as usize])?;
        return g.record(|rec| gemm_split_k(rec, desc, splits, a.view(), b.view(), ws.view(), c.view()));
    }
    g.record(|rec| gemm_auto(rec, desc, a.view(), b.view(), bias.map(Tensor::view), c.view()))
}

/// Shape and type of an operand's gradient.
pub(crate) struct Operand {
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
}

/// A GEMM result as the gradient of `op`: as written when of the operand's type, else (an f32
/// result for a 16-bit operand) cast.
fn as_grad(g: &Graph<'_>, out: Tensor, op: &Operand) -> Result<Tensor> {
    if out.dtype() == op.dtype {
        return Ok(out);
    }
    narrow(g, &out, op.dtype)
}

/// A fresh gradient tensor, or `into` (f32, the operand's shape) with beta 1 so the product
/// adds into it. A 16-bit operand's fresh gradient (o_proj's dA: attention's dO) is the GEMM's
/// 16-bit C, the f32 result rounded in the kernel as the cast after it rounded (same bits, no
/// f32 write and cast; see [`grads_in_16_bits`]).
fn grad_out(g: &Graph<'_>, op: &Operand, into: Option<Tensor>, desc: &mut GemmDesc) -> Result<Tensor> {
    match into {
        Some(t) => {
            desc.beta = 1.0;
            Ok(t)
        }
        None if op.dtype != DType::F32 && grads_in_16_bits() => {
            desc.c_dtype = op.dtype;
            g.empty_as(&op.shape, op.dtype)
        }
        None => g.empty(&op.shape),
    }
}

/// Whether products write a 16-bit operand's gradient in 16 bits themselves: off with
/// `VKFORMERS_GEMM_CASTS=1` (an f32 gradient and a cast, as before, for an A/B of this alone) or
/// with the other 16-bit outputs (`VKFORMERS_WIDE_OUTPUTS=1`, `VKFORMERS_NO_TWINS=1`).
fn grads_in_16_bits() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("VKFORMERS_GEMM_CASTS").is_none()) && super::cast::half_outputs_on()
}

/// `dA [batch, m, k] = dC [batch, m, n] · op(B)ᵀ` (`+= into` when given): B read as stored, with
/// the flag flipped.
pub(crate) fn grad_a(
    g: &Graph<'_>,
    p: Product,
    dc: &Tensor,
    b: &Tensor,
    op: &Operand,
    into: Option<Tensor>,
) -> Result<Tensor> {
    let mut desc = GemmDesc::packed(p.m, p.k, p.n, false, !p.trans_b);
    let da = grad_out(g, op, into, &mut desc)?;
    desc.batch = p.batch;
    desc.dtype = dc.dtype();
    record_gemm(g, &desc, dc, b, None, &da)?;
    as_grad(g, da, op)
}

/// `dB = Aᵀ · dC` (`[k, n]`) or, for B stored `[n, k]`, `dBᵀ = dCᵀ · A`; per batch, or summed
/// over the folded rows when B is shared; `+= into` when given.
pub(crate) fn grad_b(
    g: &Graph<'_>,
    p: Product,
    a: &Tensor,
    dc: &Tensor,
    op: &Operand,
    into: Option<Tensor>,
) -> Result<Tensor> {
    let mut out_desc = GemmDesc::packed(1, 1, 1, false, false);
    let db = grad_out(g, op, into, &mut out_desc)?;
    let (mut desc, lhs, rhs) = if p.trans_b {
        (GemmDesc::packed(p.n, p.k, p.m, true, false), dc, a)
    } else {
        (GemmDesc::packed(p.k, p.n, p.m, true, false), a, dc)
    };
    desc.batch = p.batch;
    (desc.beta, desc.c_dtype) = (out_desc.beta, out_desc.c_dtype);
    desc.dtype = dc.dtype();
    record_gemm(g, &desc, lhs, rhs, None, &db)?;
    as_grad(g, db, op)
}

/// `dbias [n] = ones [1, rows] · dC [rows, n]` over all `batch · m` rows (f32).
pub(crate) fn grad_bias(g: &Graph<'_>, p: Product, dc: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let rows = dim32("rows", dc.rows())?;
    let ones = g.full(&[rows as usize], 1.0)?;
    let dbias = g.empty(shape)?;
    let desc = GemmDesc::packed(1, p.n, rows, false, false);
    g.record(|rec| gemm(rec, &desc, ones.view(), dc.view(), None, dbias.view()))?;
    Ok(dbias)
}
