//! Random paged-cache layouts for the paged decode kernels' tests, and the case builders
//! they share (shapes, the per-row f64 reference, the packed q/k/v rows).

use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, Context, Result};

use super::masks::Masks;
use super::storage::unsupported;
use super::{f64s, Rng};
use crate::attention::decode::DecodeShape;
use crate::attention::decode_latent::LatentShape;
use crate::attention::reference::{self, Shape};
use crate::dtype::DType;

/// `table[b]` block ids of row b (`max_blocks` columns, unused ones -1 or an id of another
/// row), drawn from a shuffled pool of `num_blocks` with a few blocks no row owns.
pub struct Layout {
    pub num_blocks: usize,
    pub max_blocks: usize,
    pub table: Vec<i32>,
    pub block_size: usize,
}

impl Layout {
    /// Rows of `lens` positions in blocks of `block_size` (non-contiguous, shuffled blocks).
    pub fn random(lens: &[usize], block_size: usize, rng: &mut Rng) -> Self {
        let need: Vec<usize> = lens.iter().map(|l| l.div_ceil(block_size)).collect();
        let num_blocks = need.iter().sum::<usize>() + 3;
        let max_blocks = need.iter().max().copied().unwrap_or(0) + 1;
        let mut ids: Vec<i32> = (0..num_blocks as i32).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.below(i + 1));
        }
        let mut table = vec![-1; lens.len() * max_blocks];
        let mut next = ids.into_iter();
        for (b, &n) in need.iter().enumerate() {
            for c in 0..n {
                table[b * max_blocks + c] = next.next().expect("enough blocks");
            }
            // A stale entry past the row's length must never be followed.
            table[b * max_blocks + n] = if b % 2 == 0 { 0 } else { -1 };
        }
        Layout { num_blocks, max_blocks, table, block_size }
    }

    /// Pool row of key j of row b.
    pub fn pool_row(&self, b: usize, j: usize) -> usize {
        self.table[b * self.max_blocks + j / self.block_size] as usize * self.block_size + j % self.block_size
    }

    /// The paged decode's sizes over this layout: `batch` rows of `tq` new positions, `hq`
    /// query and `hkv` key/value heads, key head dim `d`, value dim `dv` read from rows of
    /// `v_row` values.
    pub fn decode_shape(
        &self,
        (batch, tq): (usize, usize),
        (hq, hkv): (usize, usize),
        (d, dv, v_row): (usize, usize, usize),
    ) -> DecodeShape {
        let [batch, tq, hq, hkv, d, dv, v_row] = [batch, tq, hq, hkv, d, dv, v_row].map(|x| x as u32);
        let [block_size, num_blocks, max_blocks] = self.pool_dims();
        DecodeShape { batch, tq, hq, hkv, d, dv, v_row, block_size, num_blocks, max_blocks }
    }

    /// The latent decode's sizes over this layout (one key head of latent rows of `d` values,
    /// the values their first `dv`).
    pub fn latent_shape(&self, (batch, tq): (usize, usize), hq: usize, (d, dv): (usize, usize)) -> LatentShape {
        let [batch, tq, hq, d, dv] = [batch, tq, hq, d, dv].map(|x| x as u32);
        let [block_size, num_blocks, max_blocks] = self.pool_dims();
        LatentShape { batch, tq, hq, d, dv, block_size, num_blocks, max_blocks }
    }

    /// The block table and the rows' lengths (`lens`) as the kernels read them, on the device.
    pub fn upload(&self, ctx: &Context, lens: &[usize]) -> Result<(Buffer, Buffer)> {
        let lens: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
        Ok((ctx.buffer_from(&self.table, "table")?, ctx.buffer_from(&lens, "lens")?))
    }

    /// Block size, blocks in the pool, blocks a row's table holds.
    fn pool_dims(&self) -> [u32; 3] {
        [self.block_size, self.num_blocks, self.max_blocks].map(|x| x as u32)
    }
}

/// Runs `check` on every case, on every device that stores `dt` (pools of `dt`, q and o of
/// `act`), case n seeded with `first_seed + n`.
pub fn run_cases<C>(
    test: &str,
    cases: &[C],
    (dt, act): (DType, DType),
    first_seed: u64,
    check: impl Fn(&Context, &C, u64, (DType, DType)) -> Result<()>,
) {
    on_every_device(&format!("{test} {dt:?} {act:?}"), |ctx| {
        if unsupported(ctx, dt, test) {
            return Ok(());
        }
        for (n, case) in cases.iter().enumerate() {
            check(ctx, case, first_seed + n as u64, (dt, act))?;
        }
        Ok(())
    });
}

/// The longest row (0 for none), as the splits' choice takes it.
pub fn max_len(lens: &[usize]) -> u32 {
    lens.iter().max().copied().unwrap_or(0) as u32
}

/// Head counts and dims of a decode case: `(tq, hq, hkv, d, dv)`.
pub type Heads = (usize, usize, usize, usize, usize);

/// The f64 reference o `[B, Tq, Hq, Dv]` and lse `[B, Hq, Tq]` of a decode over rows of `lens`
/// keys, one row at a time (`tk` = its length, so query i sits at `len − Tq + i` as in the
/// kernels): per row q `[Tq, Hq, D]`, k `[len, Hkv, D]` and v `[len, Hkv, Dv]`.
pub fn reference_rows(
    masks: &Masks,
    (tq, hq, hkv, d, dv): Heads,
    lens: &[usize],
    [q, k, v]: [&[Vec<f32>]; 3],
    scale: f32,
) -> (Vec<f64>, Vec<f64>) {
    let wide = masks.widened(hq);
    let (mut o, mut lse) = (Vec::new(), Vec::new());
    for (b, &len) in lens.iter().enumerate() {
        let s = Shape { batch: 1, tq, tk: len, hq, hkv, d, dv };
        let opt = masks.reference(f64::from(scale), None, &wide);
        let (ob, lb) = reference::forward(&f64s(&q[b]), &f64s(&k[b]), &f64s(&v[b]), &s, &opt);
        o.extend(ob);
        lse.extend(lb);
    }
    (o, lse)
}

/// MLA's latent values: the first `dv` columns of each key row of `d` values.
pub fn latent_values(k: &[f32], d: usize, dv: usize) -> Vec<f32> {
    k.chunks(d).flat_map(|row| row[..dv].to_vec()).collect()
}

/// The rows `[N, (Hq + 2 Hkv) D]` of the packed q/k/v product whose column blocks are q, k, v
/// (`n` tokens).
pub fn packed_rows(q: &[f32], k: &[f32], v: &[f32], n: usize) -> Vec<f32> {
    let (wq, wkv) = (q.len() / n, k.len() / n);
    (0..n).flat_map(|t| [&q[t * wq..][..wq], &k[t * wkv..][..wkv], &v[t * wkv..][..wkv]].concat()).collect()
}
