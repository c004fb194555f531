//! PhiMoE's sparsemixer router in eval mode (see `shaders/moe/sparsemixer.comp`): the top-2
//! experts of each row of router logits and, per choice, the additive mask that limits its
//! softmax to the experts within a relative `2·eps` of the chosen score.

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use super::expect_words;
use crate::code;
use crate::code::MoeSparsemixerPush;
use crate::launch::{count, dispatch_elems, err};

/// The additive value of a masked-out expert (transformers' −inf: its softmax weight is 0).
pub const OFF: f32 = -1e30;

/// `scores [rows, E]` -> `mask [rows, 2, E]` (0 or [`OFF`]), int32 `ids [rows, 2]` and
/// `flat [rows, 2]` (`(row·2 + j)·E + id`, into the `[rows·2, E]` masked softmax), f32
/// `sel [rows, E]` (1 at both choices).
pub fn sparsemixer(
    rec: &mut Recorder,
    scores: BufferView<'_>,
    (mask, ids, flat, sel): (BufferView<'_>, BufferView<'_>, BufferView<'_>, BufferView<'_>),
    (rows, experts): (usize, usize),
    eps: f32,
) -> Result<()> {
    let kc = &code::MOE_SPARSEMIXER;
    if experts < 2 {
        return Err(err(kc, format!("sparsemixer chooses 2 of {experts} experts")));
    }
    let n = count(kc, &[rows, experts])?;
    expect_words(kc, "scores", &scores, n.into())?;
    expect_words(kc, "sel", &sel, n.into())?;
    // flat indexes the [rows·2, E] softmax with int32.
    let n2 = count(kc, &[rows, 2, experts])?;
    if n2 > i32::MAX as u32 {
        return Err(err(kc, format!("{rows} rows × 2 × {experts} experts past int32 indices")));
    }
    expect_words(kc, "mask", &mask, n2.into())?;
    expect_words(kc, "ids", &ids, 2 * rows as u64)?;
    expect_words(kc, "flat", &flat, 2 * rows as u64)?;
    let p = MoeSparsemixerPush { rows: rows as u32, experts: experts as u32, eps };
    let bufs = [read(scores), write(mask), write(ids), write(flat), write(sel)];
    dispatch_elems(rec, kc, &bufs, &p, rows as u64)
}

/// f64 reference of [`sparsemixer`]: `(mask, ids, flat, sel)`.
pub fn reference(scores: &[f64], experts: usize, eps: f64) -> (Vec<f64>, Vec<i32>, Vec<i32>, Vec<f64>) {
    let rows = scores.len() / experts;
    let (mut mask, mut ids, mut flat, mut sel) = (Vec::new(), Vec::new(), Vec::new(), vec![0.0; scores.len()]);
    for r in 0..rows {
        let s = &scores[r * experts..(r + 1) * experts];
        let best = |skip: Option<usize>| {
            (0..experts).filter(|&e| Some(e) != skip).fold(None, |b: Option<usize>, e| match b {
                Some(b) if s[e] <= s[b] => Some(b),
                _ => Some(e),
            })
        };
        let i1 = best(None).expect("2 experts");
        let i2 = best(Some(i1)).expect("2 experts");
        for (j, (i, skip)) in [(i1, None), (i2, Some(i1))].into_iter().enumerate() {
            let m = s[i];
            mask.extend((0..experts).map(|e| {
                let far = (m - s[e]) / s[e].abs().max(m) > 2.0 * eps;
                if far || Some(e) == skip {
                    f64::from(OFF)
                } else {
                    0.0
                }
            }));
            ids.push(i as i32);
            flat.push(((r * 2 + j) * experts + i) as i32);
            sel[r * experts + i] = 1.0;
        }
    }
    (mask, ids, flat, sel)
}
