//! Cross-entropy loss over logits `[rows, vocab]` with int32 labels `[rows]`.
//!
//! A row counts iff `0 <= label < vocab`; `-100` (PyTorch's `ignore_index`) and any other
//! out-of-range label are ignored (PyTorch raises for the latter; a kernel cannot). The loss is
//! the mean over counted rows. `count` (number of counted rows, as f32) is computed on the
//! device by [`count_labels`], so no host round trip is needed. When `count == 0` the mean loss
//! and every gradient are 0 (PyTorch gives NaN); this keeps a fully padded batch harmless.
//!
//! The logits and dlogits are stored in [`CrossEntropy::dtype`] (f32, f16 or bf16); the math and
//! every other operand (per-row loss, lse, count, g, the mean) are f32.
//!
//! Typical training step (one batch, no host sync):
//! [`count_labels`] → [`forward_backward`] (per-row loss, lse, dlogits) → [`mean_loss`].

pub mod reference;

use vkformers_vk::{read, write, BufferView, KernelCode, Recorder, Result};

use crate::code;
use crate::code::{
    LossCountPush, LossCrossEntropyBwdPush, LossCrossEntropyBwdPushTwin, LossCrossEntropyPush, LossMeanPush,
};
use crate::dtype::DType;
use crate::launch::MAX_GROUPS_32 as MAX_GROUPS;
use crate::launch::{dispatch, err_plain as err, expect_bytes as expect_len_of, variant as pick, Push};

/// Threads per workgroup of the cross-entropy backward (its shader's, from the reflection).
const BWD_LOCAL: u32 = <LossCrossEntropyBwdPush as Push>::LOCAL_X;
const _: () = assert!(BWD_LOCAL > 0 && BWD_LOCAL == <LossCrossEntropyBwdPushTwin as Push>::LOCAL_X);

/// The operands shared by the cross-entropy kernels: `logits [rows, vocab]` in `dtype` (which
/// is also the type of the `dlogits` written) and `labels [rows]` i32.
#[derive(Clone, Copy, Debug)]
pub struct CrossEntropy<'a> {
    pub logits: BufferView<'a>,
    pub labels: BufferView<'a>,
    pub rows: u32,
    pub vocab: u32,
    /// Storage type of `logits` and `dlogits`.
    pub dtype: DType,
}

/// Checks that `v` holds exactly `elems` 4-byte values.
fn expect_len(k: &KernelCode, what: &str, v: &BufferView<'_>, elems: u64) -> Result<()> {
    expect_len_of(k, what, v, elems, 4)
}

/// [`expect_len`] of each named view in turn, `elems` values each.
fn expect_lens(k: &KernelCode, views: &[(&str, &BufferView<'_>)], elems: u64) -> Result<()> {
    views.iter().try_for_each(|(what, v)| expect_len(k, what, v, elems))
}

/// The `1..2^32` 4-byte values (`kind`: their type, for the error) of `v`, named `what`.
fn values(k: &KernelCode, what: &str, v: &BufferView<'_>, kind: &str) -> Result<u32> {
    let n = v.len / 4;
    if n == 0 || !v.len.is_multiple_of(4) || n > u64::from(u32::MAX) {
        return Err(err(k, format!("{what}: view of {} bytes is not 1..2^32 {kind} values", v.len)));
    }
    Ok(n as u32)
}

impl CrossEntropy<'_> {
    /// Elements of `logits` (and `dlogits`).
    fn elems(&self) -> u64 {
        u64::from(self.rows) * u64::from(self.vocab)
    }

    /// One workgroup per row (forward, fused forward and backward).
    fn row_groups(&self) -> [u32; 3] {
        [self.rows.min(MAX_GROUPS), 1, 1]
    }

    /// The backward alone: workgroups of `BWD_LOCAL` logits of a row.
    fn backward_groups(&self) -> [u32; 3] {
        [self.vocab.div_ceil(BWD_LOCAL).min(MAX_GROUPS), self.rows.min(MAX_GROUPS), 1]
    }

    fn validate(&self, k: &KernelCode) -> Result<()> {
        if self.rows == 0 || self.vocab == 0 {
            return Err(err(k, format!("empty shape [{}, {}]", self.rows, self.vocab)));
        }
        expect_len_of(k, "logits", &self.logits, self.elems(), self.dtype.bytes())?;
        expect_len(k, "labels", &self.labels, u64::from(self.rows))
    }
}

/// `count[0] = #{r : 0 <= labels[r] < vocab}` as f32. `labels [rows]` i32, `count [1]`.
pub fn count_labels(rec: &mut Recorder, labels: BufferView<'_>, vocab: u32, count: BufferView<'_>) -> Result<()> {
    let k = &code::LOSS_COUNT;
    let rows = values(k, "labels", &labels, "int32")?;
    expect_len(k, "count", &count, 1)?;
    dispatch(rec, k, &[], &[read(labels), write(count)], &LossCountPush { n: rows, vocab }, [1, 1, 1])
}

/// Forward only: `loss_rows [rows]` (0 on ignored rows) and `lse [rows]` (row log-sum-exp,
/// kept for [`backward`]).
pub fn forward(
    rec: &mut Recorder,
    ce: &CrossEntropy<'_>,
    loss_rows: BufferView<'_>,
    lse: BufferView<'_>,
) -> Result<()> {
    let k = pick(
        ce.dtype,
        [&code::LOSS_CROSS_ENTROPY_FWD, &code::LOSS_CROSS_ENTROPY_FWD_F16, &code::LOSS_CROSS_ENTROPY_FWD_BF16],
    );
    ce.validate(k)?;
    expect_lens(k, &[("loss_rows", &loss_rows), ("lse", &lse)], ce.rows.into())?;
    let args = [read(ce.logits), read(ce.labels), write(loss_rows), write(lse)];
    let push = LossCrossEntropyPush { n: ce.rows, vocab: ce.vocab };
    dispatch(rec, k, &[], &args, &push, ce.row_groups())
}

/// Fused forward and backward in one pass over each row: `loss_rows [rows]`, `lse [rows]` and
/// `dlogits [rows, vocab] = (softmax(logits) - onehot(labels)) * g[0] / count[0]` (0 on ignored
/// rows; in the logits' storage type). `count [1]` from [`count_labels`] (recorded earlier in the batch), `g [1]` the
/// upstream gradient of the mean loss (normally 1.0).
pub fn forward_backward(
    rec: &mut Recorder,
    ce: &CrossEntropy<'_>,
    count: BufferView<'_>,
    g: BufferView<'_>,
    loss_rows: BufferView<'_>,
    lse: BufferView<'_>,
    dlogits: BufferView<'_>,
) -> Result<()> {
    let k = pick(
        ce.dtype,
        [
            &code::LOSS_CROSS_ENTROPY_FWD_BWD,
            &code::LOSS_CROSS_ENTROPY_FWD_BWD_F16,
            &code::LOSS_CROSS_ENTROPY_FWD_BWD_BF16,
        ],
    );
    ce.validate(k)?;
    expect_lens(k, &[("count", &count), ("g", &g)], 1)?;
    expect_lens(k, &[("loss_rows", &loss_rows), ("lse", &lse)], ce.rows.into())?;
    expect_len_of(k, "dlogits", &dlogits, ce.elems(), ce.dtype.bytes())?;
    let args = [read(ce.logits), read(ce.labels), write(loss_rows), write(lse), read(count), read(g), write(dlogits)];
    let push = LossCrossEntropyPush { n: ce.rows, vocab: ce.vocab };
    dispatch(rec, k, &[], &args, &push, ce.row_groups())
}

/// Backward alone, from the `lse [rows]` saved by [`forward`]:
/// `dlogits [rows, vocab] = (exp(logits - lse) - onehot(labels)) * g[0] / count[0]`.
pub fn backward(
    rec: &mut Recorder,
    ce: &CrossEntropy<'_>,
    lse: BufferView<'_>,
    count: BufferView<'_>,
    g: BufferView<'_>,
    dlogits: BufferView<'_>,
) -> Result<()> {
    let k = pick(
        ce.dtype,
        [&code::LOSS_CROSS_ENTROPY_BWD_F32, &code::LOSS_CROSS_ENTROPY_BWD_F16, &code::LOSS_CROSS_ENTROPY_BWD_BF16],
    );
    ce.validate(k)?;
    expect_len(k, "lse", &lse, ce.rows.into())?;
    expect_lens(k, &[("count", &count), ("g", &g)], 1)?;
    expect_len_of(k, "dlogits", &dlogits, ce.elems(), ce.dtype.bytes())?;
    let args = [read(ce.logits), read(ce.labels), read(lse), read(count), read(g), write(dlogits)];
    let push = LossCrossEntropyBwdPush { n: ce.rows, vocab: ce.vocab };
    dispatch(rec, k, &[], &args, &push, ce.backward_groups())
}

/// [`backward`] of f32 logits writing dlogits only in 16 bits (`twin`, f16 or bf16, rounded as
/// `dtype::cast` rounds the f32 value): under autocast, the gradient the head product's
/// backward reads in its 16-bit type, with no f32 dlogits written and no cast after.
pub fn backward_twin_only(
    rec: &mut Recorder,
    ce: &CrossEntropy<'_>,
    (lse, count, g): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    twin: crate::dtype::Twin<'_>,
) -> Result<()> {
    let k = &code::LOSS_CROSS_ENTROPY_BWD_TWIN_F32;
    if ce.dtype != DType::F32 {
        return Err(err(k, format!("16-bit dlogits of {:?} logits", ce.dtype)));
    }
    ce.validate(k)?;
    expect_len(k, "lse", &lse, ce.rows.into())?;
    expect_lens(k, &[("count", &count), ("g", &g)], 1)?;
    let half = twin.code(k.name, ce.elems())?;
    let args = [read(ce.logits), read(ce.labels), read(lse), read(count), read(g), write(twin.view)];
    let push = LossCrossEntropyBwdPushTwin { n: ce.rows, vocab: ce.vocab, twin: half };
    dispatch(rec, k, &[], &args, &push, ce.backward_groups())
}

/// `out[0] = sum(loss_rows) / count[0]` (0 when `count[0] == 0`), a deterministic tree
/// reduction in one workgroup. `loss_rows [rows]`, `count [1]`, `out [1]`.
pub fn mean_loss(
    rec: &mut Recorder,
    loss_rows: BufferView<'_>,
    count: BufferView<'_>,
    out: BufferView<'_>,
) -> Result<()> {
    let k = &code::LOSS_MEAN;
    let rows = values(k, "loss_rows", &loss_rows, "f32")?;
    expect_lens(k, &[("count", &count), ("out", &out)], 1)?;
    dispatch(rec, k, &[], &[read(loss_rows), read(count), write(out)], &LossMeanPush { n: rows }, [1, 1, 1])
}
