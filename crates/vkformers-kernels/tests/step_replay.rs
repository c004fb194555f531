//! The kernels of a replayed decode step, each run as a replay runs them: recorded once into a
//! batch for replay (`Context::replay_recorder`) and submitted again and again, with the next
//! submission sent before the last is waited for.
//! - `step::advance` on tables of several rows (held and missing blocks, block boundaries, the
//!   group with position ids and one without): after k runs, the reference advanced k times;
//!   a position past the table's blocks gets no slot.
//! - `step::emit_ids`: run k's ids land in slot k % S of the ring; the count is kept on the
//!   device across runs.
//!
//! And the replay's log: two recordings of the same work log equal, another scalar differs.

use vkformers_kernels::step::{self, StepTables};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

/// Tables of 3 rows at lengths 14, 15, 31 (block size 8, 5 blocks a row: rows hold blocks for
/// positions up to 39; row 2's fifth block is missing to show the -1 slot), P = `prefix`.
fn tables(prefix: u32) -> (Vec<i32>, StepTables) {
    let t = StepTables { rows: 3, prefix, max_blocks: 5, block_size: 8 };
    let lens = [14, 15, 31];
    let mut ints: Vec<i32> = if prefix > 0 { lens.iter().map(|l| l - 1).collect() } else { Vec::new() };
    let table = [[7, 2, 9, 4, 11], [0, 1, 3, 5, 6], [8, 10, 12, 14, -1]];
    ints.extend(table.iter().flatten());
    ints.extend(lens);
    ints.extend(lens.iter().zip(&table).map(|(&l, row)| row[((l - 1) / 8) as usize] * 8 + (l - 1) % 8));
    (ints, t)
}

#[test]
fn replayed_advance_equals_the_reference_run_after_run() {
    on_every_device("step advance", |ctx| {
        for prefix in [0, 3] {
            let (start, t) = tables(prefix);
            let buf = ctx.buffer_from(&start, "tables")?;
            let view = buf.slice(0, t.len() * 4);
            let mut rec = ctx.replay_recorder()?;
            step::advance(&mut rec, view, &t)?;
            let replay = rec.into_replay()?;
            let mut want = start.clone();
            // 8 runs: row 2 goes from 31 into its missing block (positions 32..39).
            for run in 1..=4 {
                let first = replay.submit()?;
                let second = replay.submit()?;
                first.wait()?;
                second.wait()?;
                step::advance_reference(&mut want, &t);
                step::advance_reference(&mut want, &t);
                let got: Vec<i32> = ctx.read_vec(view)?;
                assert_eq!(got, want, "prefix {prefix}, after {} runs", 2 * run);
            }
            let slots = &want[(prefix + 3 * 5 + 3) as usize..];
            assert_eq!(slots[2], -1, "{want:?}");
        }
        Ok(())
    });
}

/// Reads the ring `[S, B]` of a host-visible buffer.
fn ring_of(ring: &vkformers_vk::Buffer, n: usize) -> Vec<u32> {
    let mut bytes = vec![0u8; n * 4];
    assert!(ring.read_mapped(&mut bytes), "the ring is host-visible");
    bytemuck::cast_slice(&bytes).to_vec()
}

fn emitting_replay(ctx: &Context, ids: &[u32], slots: u32) -> Result<(vkformers_vk::Replay, vkformers_vk::Buffer)> {
    let b = ids.len() as u32;
    let ids_buf = ctx.buffer_from(ids, "ids")?;
    let ring = ctx.buffer_of_kind(u64::from(b * slots) * 4, vkformers_vk::BufferKind::Download, "ring")?;
    let count = ctx.buffer_from(&[0u32], "count")?;
    let mut rec = ctx.replay_recorder()?;
    step::emit_ids(&mut rec, ids_buf.view(), ring.slice(0, u64::from(b * slots) * 4), count.slice(0, 4), (b, slots))?;
    Ok((rec.into_replay()?, ring))
}

#[test]
fn emitted_ids_go_to_the_runs_slot() {
    on_every_device("step emit ids", |ctx| {
        let ids = [5u32, 70, 3, 99, 1];
        let (replay, ring) = emitting_replay(ctx, &ids, 3)?;
        for run in 0..7usize {
            replay.submit()?.wait()?;
            let got = ring_of(&ring, 15);
            let slot = run % 3;
            assert_eq!(&got[slot * 5..slot * 5 + 5], &ids, "run {run}");
        }
        Ok(())
    });
}

#[test]
fn logs_of_the_same_work_are_equal() {
    on_every_device("step logs", |ctx| {
        let log = |prefix: u32, rows: u32| -> Result<Vec<vkformers_vk::LogEntry>> {
            let (ints, mut t) = tables(prefix);
            t.rows = rows.min(t.rows);
            let buf = ctx.buffer_from(&ints, "tables")?;
            let mut rec = ctx.recorder(false)?;
            rec.start_log();
            let n = t.len() * 4;
            step::advance(&mut rec, buf.slice(0, n), &t)?;
            rec.update(buf.slice(0, 8), &[1, 0, 0, 0, 2, 0, 0, 0])?;
            let out = rec.take_log().expect("logging");
            rec.submit()?;
            // Buffer ids differ between recordings (the graph leaves them out too).
            Ok(out
                .into_iter()
                .map(|e| match e {
                    vkformers_vk::LogEntry::Update { data, .. } => vkformers_vk::LogEntry::Update { buffer: 0, data },
                    other => other,
                })
                .collect())
        };
        assert_eq!(log(3, 3)?, log(3, 3)?);
        assert_ne!(log(3, 3)?, log(0, 3)?, "another prefix is another scalar");
        assert_eq!(log(0, 3)?.len(), 2, "a dispatch and a write");
        Ok(())
    });
}

#[test]
fn a_position_past_the_table_has_no_slot() {
    let (mut ints, t) = tables(0);
    // Row 0 at length 40: its next position, 40, is past its 5 blocks of 8.
    let lens_at = (t.rows * t.max_blocks) as usize;
    ints[lens_at] = 40;
    step::advance_reference(&mut ints, &t);
    assert_eq!(ints[lens_at], 41);
    assert_eq!(ints[lens_at + 3], -1);
}
