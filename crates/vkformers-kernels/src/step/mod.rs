//! The two kernels a replayed decode step records besides its forward (see
//! `vkformers_tensor::Graph::replay`): [`advance`] makes the KV cache's step tables the next
//! step's, and [`emit_ids`] puts the ids the step chose where the host reads them.

use vkformers_vk::{read, read_write, write, BufferView, Recorder, Result};

use crate::code;
use crate::code::{StepAdvancePush, StepEmitIdsPush};
use crate::launch::{dispatch, dispatch_elems, err, expect_values};

/// The layout of one group's step tables (int32 `[P | B·MB | B | B]`, see
/// `shaders/step/advance.comp`): rows B, prefix P (0 or B), max blocks MB, block size BS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepTables {
    pub rows: u32,
    pub prefix: u32,
    pub max_blocks: u32,
    pub block_size: u32,
}

impl StepTables {
    /// int32 values of the tables.
    pub fn len(&self) -> u64 {
        u64::from(self.prefix) + u64::from(self.rows) * (u64::from(self.max_blocks) + 2)
    }

    /// True for tables of no row.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }
}

/// Advances `ints` (the tables of `t`, one new token a row) to the next step's: position ids
/// and lengths one further, each row's store slot at its new position.
pub fn advance(rec: &mut Recorder, ints: BufferView<'_>, t: &StepTables) -> Result<()> {
    let k = &code::STEP_ADVANCE;
    if t.prefix != 0 && t.prefix != t.rows {
        return Err(err(k, format!("a prefix of {} for {} rows: 0 or one position a row", t.prefix, t.rows)));
    }
    if t.block_size == 0 || t.max_blocks == 0 {
        return Err(err(k, format!("tables of {} blocks of {} positions", t.max_blocks, t.block_size)));
    }
    expect_values(k, "ints", &ints, t.len(), 4)?;
    let p = StepAdvancePush { rows: t.rows, prefix: t.prefix, max_blocks: t.max_blocks, block_size: t.block_size };
    dispatch_elems(rec, k, &[read_write(ints)], &p, u64::from(t.rows))
}

/// Copies `ids [B]` u32 into slot `count % slots` of `ring [slots, B]` and adds 1 to `count [1]`.
pub fn emit_ids(
    rec: &mut Recorder,
    ids: BufferView<'_>,
    ring: BufferView<'_>,
    count: BufferView<'_>,
    (rows, slots): (u32, u32),
) -> Result<()> {
    let k = &code::STEP_EMIT_IDS;
    if rows == 0 || slots == 0 {
        return Err(err(k, format!("a ring of {slots} slots of {rows} ids")));
    }
    expect_values(k, "ids", &ids, u64::from(rows), 4)?;
    expect_values(k, "ring", &ring, u64::from(rows) * u64::from(slots), 4)?;
    expect_values(k, "count", &count, 1, 4)?;
    let p = StepEmitIdsPush { rows, slots };
    dispatch(rec, k, &[], &[read(ids), write(ring), read_write(count)], &p, [1, 1, 1])
}

/// What [`advance`] computes, on the host (the tests' reference).
pub fn advance_reference(ints: &mut [i32], t: &StepTables) {
    let (b, p0, mb, bs) = (t.rows as usize, t.prefix as usize, t.max_blocks as usize, t.block_size as i32);
    let lens_at = p0 + b * mb;
    for r in 0..b {
        let p = ints[lens_at + r];
        if p0 > 0 {
            ints[r] = p;
        }
        ints[lens_at + r] = p + 1;
        let i = (p / bs) as usize;
        let blk = if i < mb { ints[p0 + r * mb + i] } else { -1 };
        ints[lens_at + b + r] = if blk >= 0 { blk * bs + p % bs } else { -1 };
    }
}
