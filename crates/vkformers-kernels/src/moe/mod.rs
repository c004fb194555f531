//! Routed mixture of experts: router top-k, the grouping of token assignments by expert (a
//! stable counting sort shared with the embedding backward, then per-slot indices), and the
//! grouped expert products, forward and backward, with no per-expert host loop.
//!
//! Shapes: n tokens, E experts, k choices per token, S = n·k assignment slots sorted by expert.
//! Index buffers are int32; data f32 (the grouped products also read f16/bf16, see [`grouped`]).

pub mod clamped_swiglu;
pub mod grouped;
pub mod reference;
pub mod sparsemixer;

pub use grouped::{grouped_rows, grouped_wgrad, GroupTile, Storage};

use vkformers_vk::{read, write, BufferView, KernelCode, Recorder, Result};

use crate::code;
use crate::code::{MoeSlotsPush, MoeTopkPush};
use crate::embedding::{backward_scratch_bytes, counting_sort};
use crate::launch::{count, dispatch_elems, err};

fn expect_words(k: &KernelCode, what: &str, v: &BufferView<'_>, n: u64) -> Result<()> {
    if v.len != n * 4 {
        return Err(err(k, format!("{what}: view of {} bytes, expected {n} 4-byte values", v.len)));
    }
    Ok(())
}

/// Top-k of each row of `probs [rows, experts]` (descending; ties to the lower index):
/// `ids [rows, k]` and `flat [rows, k]` (`row·E + id`) int32, `sel [rows, E]` f32 0/1.
pub fn topk(
    rec: &mut Recorder,
    probs: BufferView<'_>,
    (ids, flat, sel): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    rows: usize,
    experts: usize,
    k: usize,
) -> Result<()> {
    let kc = &code::MOE_TOPK;
    if k == 0 || k > experts {
        return Err(err(kc, format!("top-{k} of {experts} experts")));
    }
    let n = count(kc, &[rows, experts])?;
    expect_words(kc, "probs", &probs, n.into())?;
    expect_words(kc, "sel", &sel, n.into())?;
    let nk = count(kc, &[rows, k])?;
    expect_words(kc, "ids", &ids, nk.into())?;
    expect_words(kc, "flat", &flat, nk.into())?;
    let p = MoeTopkPush { rows: rows as u32, experts: experts as u32, k: k as u32 };
    dispatch_elems(rec, kc, &[read(probs), write(ids), write(flat), write(sel)], &p, rows as u64)
}

/// Bytes of scratch [`group`] needs for `slots` assignments over `experts`.
pub fn group_scratch_bytes(experts: u32, slots: u32) -> u64 {
    backward_scratch_bytes(experts, slots)
}

/// The slots of the `S = rows·k` assignments sorted by expert (stable: token order within an
/// expert), from `ids [S]` (int32 experts, assignment `a = token·k + j`):
/// `offsets [E + 1]` (expert e's slots are `offsets[e]..offsets[e + 1]`), `slot_token [S]`,
/// `slot_expert [S]` and `assign_slot [S]` (the slot of assignment a). `scratch` holds
/// [`group_scratch_bytes`]; `offsets` is copied out of it.
#[allow(clippy::too_many_arguments)]
pub fn group(
    rec: &mut Recorder,
    ids: BufferView<'_>,
    experts: u32,
    k: u32,
    scratch: BufferView<'_>,
    offsets: BufferView<'_>,
    (slot_token, slot_expert, assign_slot): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
) -> Result<()> {
    let kc = &code::MOE_SLOTS;
    let slots = (ids.len / 4) as u32;
    if k == 0 || !slots.is_multiple_of(k) {
        return Err(err(kc, format!("{slots} assignments are not whole rows of {k}")));
    }
    expect_words(kc, "offsets", &offsets, u64::from(experts) + 1)?;
    for (what, v) in [("slot_token", &slot_token), ("slot_expert", &slot_expert), ("assign_slot", &assign_slot)] {
        expect_words(kc, what, v, slots.into())?;
    }
    let (sorted_offsets, perm) = counting_sort(rec, ids, slots, experts, scratch)?;
    rec.copy(sorted_offsets, offsets)?;
    let args = [read(ids), read(perm), write(slot_token), write(slot_expert), write(assign_slot)];
    dispatch_elems(rec, kc, &args, &MoeSlotsPush { slots, k }, slots.into())
}
