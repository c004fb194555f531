//! The paged KV cache on the device for up to `slots` sequences.
//!
//! Keys and values of every layer live in pools `[num_blocks, block_size, Hkv, D]` shared by all
//! rows; each row holds only its own real positions (no padding), block by block, through a block
//! table (`blocks.rs`). Layers with the same sliding window share one table; global layers grow
//! their rows as they run, sliding-window layers give back blocks their queries can no longer see
//! (a query at p sees `p − window + 1 ..= p`), so they hold about `window + block_size` positions
//! per row. A row that finishes gives its blocks back ([`KvCache::release`]) for the next one.
//!
//! A forward ([`crate::decoder::forward_cached`]) runs on the selected rows ([`KvCache::select`];
//! all by default) with `T` new columns each, left-padded (mask `0…0 1…1`); position ids continue
//! each row's count of real tokens (`cumsum(mask) − 1`, as transformers for left padding).
//! Attention (see [`KvCache::attend`]): when every selected row is empty (a prefill), the new keys
//! are the whole history and the flash-attention kernel runs on them (padding masked), then the
//! real ones are stored; otherwise the new keys are stored first and the paged decode kernel
//! (`vkformers_kernels::attention::decode`, split-KV for long rows) reads each row's blocks.

mod blocks;
mod latent;
mod packed_rope;
mod paged;
mod replay;
mod rewind;

use std::cell::{Cell, RefCell};

use vkformers_tensor::ops::attention::AttnOptions;
use vkformers_tensor::{Graph, Tensor};

use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;
use blocks::BlockTables;
pub(crate) use packed_rope::packed_new_rows;
use paged::{LayerPool, StepTables};

/// Positions per block.
pub const BLOCK_SIZE: usize = 16;

/// Layers that share a block table: one sliding window (or none).
struct Group {
    window: Option<usize>,
    tables: BlockTables,
}

/// What the current forward runs on, fixed by `begin`.
struct Step {
    /// The selected rows (slot indices).
    rows: Vec<usize>,
    /// Real new tokens of each selected row (a suffix of its columns).
    real: Vec<usize>,
    /// Every selected row was empty: attention runs on the new keys alone.
    prefill: bool,
    /// Per group: device table, lengths and store slots.
    tables: Vec<StepTables>,
    /// Per layer: its new keys and values are stored already ([`KvCache::rope_store`]).
    stored: Vec<bool>,
}

/// Keys and values of every layer for up to `slots` sequences, on the device.
pub struct KvCache {
    slots: usize,
    block_size: usize,
    groups: RefCell<Vec<Group>>,
    /// Per layer: its group and its pools (allocated at the first forward, in the storage type).
    layers: RefCell<Vec<LayerPool>>,
    /// Real tokens held by each row: the position id of its next real token.
    lens: RefCell<Vec<usize>>,
    /// Columns (padding included) each row has been fed since it was last empty.
    cols: RefCell<Vec<usize>>,
    selected: RefCell<Vec<usize>>,
    step: RefCell<Option<Step>>,
    forwards: Cell<usize>,
    /// f32 constants the forwards read unchanged (RoPE's `inv_freq`), by content: uploaded by
    /// the first forward and kept on the device, instead of one upload per decode step.
    constants: RefCell<Vec<(Vec<f32>, Tensor)>>,
}

impl KvCache {
    /// An empty cache of one sequence with room for `capacity` positions before it grows.
    pub fn new(g: &Graph<'_>, spec: &ModelSpec, capacity: usize) -> Result<Self> {
        Self::batched(g, spec, 1, capacity)
    }

    /// An empty cache of `batch` rows with pools for `capacity` positions per row before they
    /// grow (sliding-window groups: about their window).
    pub fn batched(g: &Graph<'_>, spec: &ModelSpec, batch: usize, capacity: usize) -> Result<Self> {
        Self::with_block_size(g, spec, batch, capacity, BLOCK_SIZE)
    }

    /// [`KvCache::batched`] with blocks of `block_size` positions.
    pub fn with_block_size(
        _g: &Graph<'_>,
        spec: &ModelSpec,
        batch: usize,
        capacity: usize,
        block_size: usize,
    ) -> Result<Self> {
        if batch == 0 || block_size == 0 {
            return Err(ModelError::Config("a KV cache needs at least one sequence and one position per block".into()));
        }
        let per_row = capacity.max(1).div_ceil(block_size);
        let mut groups: Vec<Group> = Vec::new();
        let mut layers = Vec::with_capacity(spec.layers.len());
        for l in &spec.layers {
            let window = l.attn.sliding_window.map(|w| w as usize);
            let group = match groups.iter().position(|gr| gr.window == window) {
                Some(i) => i,
                None => {
                    // A window row spans at most ceil(W / bs) + 1 blocks (W positions, unaligned).
                    let blocks = window.map_or(per_row, |w| per_row.min(w.div_ceil(block_size) + 1));
                    groups.push(Group { window, tables: BlockTables::new(batch, block_size, batch * blocks) });
                    groups.len() - 1
                }
            };
            let widest = vkformers_kernels::attention::decode_latent::MAX_LATENT_DIM as usize;
            if let Some(m) = l.attn.mla.as_ref().filter(|m| m.kv_lora_rank + m.rope_dim > widest) {
                return Err(ModelError::Unsupported(format!(
                    "a latent KV cache of kv_lora_rank {} + qk_rope_head_dim {} values: the latent decode \
                     takes up to {widest}",
                    m.kv_lora_rank, m.rope_dim
                )));
            }
            layers.push(match &l.attn.mla {
                // The latent and the rotary key, read by the absorbed attention as one key head
                // that is also the value head (see `decoder::mla`; rows over 256 values go to the
                // wide latent kernel).
                Some(m) => LayerPool::latent(group, m.kv_lora_rank + m.rope_dim, m.kv_lora_rank),
                _ => LayerPool::new(group, l.attn.kv_heads, l.attn.head_dim),
            });
        }
        Ok(KvCache {
            slots: batch,
            block_size,
            groups: RefCell::new(groups),
            layers: RefCell::new(layers),
            lens: RefCell::new(vec![0; batch]),
            cols: RefCell::new(vec![0; batch]),
            selected: RefCell::new((0..batch).collect()),
            step: RefCell::new(None),
            forwards: Cell::new(0),
            constants: RefCell::new(Vec::new()),
        })
    }

    /// Whether layer `i` caches multi-head latent attention's latent `[c | k_rot]` (one head
    /// read as keys and values) instead of full keys and values.
    pub(crate) fn is_latent(&self, i: usize) -> bool {
        self.layers.borrow().get(i).is_some_and(LayerPool::is_latent)
    }

    /// Values the cache holds per position over all layers: `2 · Hkv · D` per layer for keys and
    /// values, `kv_lora_rank + qk_rope_head_dim` per latent-cached layer.
    pub fn values_per_token(&self) -> usize {
        self.layers.borrow().iter().map(LayerPool::values_per_position).sum()
    }

    /// Columns fed so far (padding included): the most of any row.
    pub fn len(&self) -> usize {
        self.cols.borrow().iter().copied().max().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows the next forward runs on ([`KvCache::select`]; all rows by default).
    pub fn batch(&self) -> usize {
        self.selected.borrow().len()
    }

    /// Rows of the cache.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Real tokens row `row` holds.
    pub fn row_len(&self, row: usize) -> usize {
        self.lens.borrow()[row]
    }

    /// Positions each layer's pools hold per row (sliding-window layers stay near their window).
    pub fn layer_slots(&self) -> Vec<usize> {
        let groups = self.groups.borrow();
        let per_row = |g: usize| groups[g].tables.num_blocks() * self.block_size / self.slots;
        self.layers.borrow().iter().map(|l| per_row(l.group())).collect()
    }

    /// Pool blocks in use (over all groups) and the pools' blocks.
    pub fn blocks_in_use(&self) -> (usize, usize) {
        let groups = self.groups.borrow();
        (groups.iter().map(|g| g.tables.used()).sum(), groups.iter().map(|g| g.tables.num_blocks()).sum())
    }

    /// The device copy of `data` (a 1-d f32 constant), uploaded the first time any forward
    /// through this cache asks for it and kept for the next ones.
    pub(crate) fn constant(&self, g: &Graph<'_>, data: &[f32]) -> Result<Tensor> {
        let mut constants = self.constants.borrow_mut();
        if let Some((_, t)) = constants.iter().find(|(d, _)| d.as_slice() == data) {
            return Ok(t.clone());
        }
        let t = g.constant(data, &[data.len()])?;
        constants.push((data.to_vec(), t.clone()));
        Ok(t)
    }

    /// Forwards run so far.
    pub fn forwards(&self) -> usize {
        self.forwards.get()
    }

    /// Makes the next forwards run on `rows` (distinct slot indices, in the batch's order).
    pub fn select(&self, rows: &[usize]) -> Result<()> {
        let mut seen = vec![false; self.slots];
        for &r in rows {
            if r >= self.slots || std::mem::replace(&mut seen[r], true) {
                return Err(ModelError::Config(format!(
                    "rows {rows:?}: not distinct rows of a {}-row cache",
                    self.slots
                )));
            }
        }
        if rows.is_empty() {
            return Err(ModelError::Config("select at least one row of the KV cache".into()));
        }
        *self.selected.borrow_mut() = rows.to_vec();
        Ok(())
    }

    /// Empties row `row` and gives its blocks back to the pools.
    pub fn release(&self, row: usize) {
        for g in self.groups.borrow_mut().iter_mut() {
            g.tables.release(row);
        }
        self.lens.borrow_mut()[row] = 0;
        self.cols.borrow_mut()[row] = 0;
    }

    /// Rows `dst[n]` continue the histories of rows `src[n]` (read before any row changes, so
    /// rows may swap or repeat; what `dst` rows held is let go): block tables are re-pointed and
    /// blocks shared, nothing is copied on the device. A row later writing into a shared, partly
    /// filled last block copies that block alone (copy on write). Beam search forks the prompt's
    /// row into every beam with it, and reorders beams after each step with it.
    pub fn share(&self, dst: &[usize], src: &[usize]) -> Result<()> {
        let bad = |r: &usize| *r >= self.slots;
        if dst.len() != src.len() || dst.iter().any(bad) || src.iter().any(bad) {
            return Err(ModelError::Config(format!(
                "share rows {src:?} into {dst:?}: not rows of a {}-row cache",
                self.slots
            )));
        }
        for g in self.groups.borrow_mut().iter_mut() {
            g.tables.point(dst, src);
        }
        for v in [&self.lens, &self.cols] {
            let mut v = v.borrow_mut();
            let from: Vec<usize> = src.iter().map(|&s| v[s]).collect();
            dst.iter().zip(from).for_each(|(&d, x)| v[d] = x);
        }
        Ok(())
    }

    /// Position ids `[B·T]` of `T` new columns with mask `mask` (`[B·T]`) of the selected rows:
    /// each real token's count of real tokens before it in its row; padding gets 0.
    pub(crate) fn positions(&self, mask: &[i32], t: usize) -> Vec<i32> {
        let lens = self.lens.borrow();
        let mut out = Vec::with_capacity(mask.len());
        for (&row, cols) in self.selected.borrow().iter().zip(mask.chunks(t)) {
            let mut p = lens[row] as i32;
            for &m in cols {
                out.push(if m != 0 { p } else { 0 });
                p += i32::from(m != 0);
            }
        }
        out
    }

    /// Each of `t` new columns' index in its row, padding included (`[B·T]`, the selected rows):
    /// transformers' Llama 4 temperature counts these (`arange(T) + past_seen_tokens`).
    pub(crate) fn columns(&self, t: usize) -> Vec<i32> {
        let cols = self.cols.borrow();
        let rows = self.selected.borrow();
        rows.iter().flat_map(|&r| (cols[r]..cols[r] + t).map(|c| c as i32)).collect()
    }

    /// Prepares a forward of `t` new columns (mask `[B·T]`, left-padded) on the selected rows:
    /// gives back blocks no new query can see, takes blocks for the positions to store, and
    /// uploads each group's block table, lengths and store slots.
    pub(crate) fn begin(&self, g: &Graph<'_>, mask: &[i32], t: usize) -> Result<()> {
        let rows = self.selected.borrow().clone();
        let real = real_counts(mask, t)?;
        // The position ids ride in the first group's upload ([`KvCache::step_positions`]).
        let mut positions = self.positions(mask, t);
        let lens = self.lens.borrow();
        let prefill = rows.iter().all(|&r| lens[r] == 0);
        let mut tables = Vec::new();
        // Shared blocks this forward writes into: (shared, fresh) copied by each layer's store.
        let mut copies = Vec::new();
        for group in self.groups.borrow_mut().iter_mut() {
            for (n, &r) in rows.iter().enumerate() {
                let (past, after) = (lens[r], lens[r] + real[n]);
                let first_kept = match group.window {
                    // A prefill's keys are read from the new keys: keep what later queries see.
                    Some(w) if prefill => (after + 1).saturating_sub(w),
                    Some(w) => (past + 1).saturating_sub(w),
                    None => 0,
                };
                group.tables.drop_before(r, first_kept);
                copies.extend((first_kept.max(past)..after).filter_map(|p| group.tables.hold(r, p)));
            }
            let after: Vec<usize> = rows.iter().zip(&real).map(|(&r, n)| lens[r] + n).collect();
            let prefix = std::mem::take(&mut positions);
            let mut st = StepTables::upload(g, &group.tables, (&rows, &after), (&real, t), &prefix)?;
            st.copies = std::mem::take(&mut copies);
            tables.push(st);
        }
        let stored = vec![false; self.layers.borrow().len()];
        *self.step.borrow_mut() = Some(Step { rows, real, prefill, tables, stored });
        Ok(())
    }

    /// The position ids `[B, T]` of the forward [`KvCache::begin`] prepared
    /// ([`KvCache::positions`] on the device), from the upload of the step's tables.
    pub(crate) fn step_positions(&self, g: &Graph<'_>, (b, t): (usize, usize)) -> Result<Tensor> {
        let step = self.step.borrow();
        match step.as_ref().and_then(|s| s.tables.first()) {
            Some(st) => st.prefix(g, &[b, t]),
            None => Err(ModelError::Config("KV cache positions outside a forward".into())),
        }
    }

    /// Records the new columns of the selected rows as held, after every layer has stored them.
    pub(crate) fn commit(&self, _mask: &[i32], t: usize) {
        if let Some(step) = self.step.borrow_mut().take() {
            let (mut lens, mut cols) = (self.lens.borrow_mut(), self.cols.borrow_mut());
            for (&r, n) in step.rows.iter().zip(&step.real) {
                lens[r] += n;
                cols[r] += t;
            }
        }
        self.forwards.set(self.forwards.get() + 1);
    }

    /// Stores layer `i`'s new keys and values `[B, T, Hkv, D]` and returns the attention output
    /// `[B, T, Hq, D]` of the new queries q over the rows' cached keys; `opts` (scale, softcap,
    /// ALiBi, and the new columns' key mask `[B, T]`) as the layer's uncached attention.
    /// Llama 4's chunked mask of `chunk` positions (0 = off) applies by each row's
    /// own positions. A left-padded prefill runs through the paged kernel (which counts a row's
    /// positions from its first real token) instead of the fused kernel (which would count
    /// chunks from the padded column 0).
    pub(crate) fn attend_chunked(
        &self,
        g: &Graph<'_>,
        i: usize,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        mut opts: AttnOptions,
        chunk: u32,
    ) -> Result<Tensor> {
        let step = self.step.borrow();
        let step = step.as_ref().ok_or_else(|| ModelError::Config("KV cache attend outside a forward".into()))?;
        let mut layers = self.layers.borrow_mut();
        let layer = &mut layers[i];
        let groups = self.groups.borrow();
        let group = &groups[layer.group()];
        if !step.stored[i] {
            layer.store(g, group.tables.num_blocks() * self.block_size, (k, v), &step.tables[layer.group()])?;
        }
        opts.window = group.window.unwrap_or(0) as u32;
        if step.prefill && (chunk == 0 || opts.kmask.is_none()) {
            return Ok(vkformers_tensor::ops::attention::attention_chunked(g, q, k, v, &opts, chunk)?);
        }
        layer.decode(g, q, &step.tables[layer.group()], &opts, (group.tables.block_size(), chunk))
    }
}

impl KvCache {
    /// A decode step's rotary embedding of layer `i`'s q `[B, T, Hq, D]` and k `[B, T, Hkv, D]`
    /// (f32; positions `pos [B·T]`, `inv_freq [R/2]`, `rot` = layout, rotary dim, mscale) and the
    /// store of the rotated k and v `[B, T, Hkv, D]` in one dispatch: returns the rotated q, and
    /// the layer's [`KvCache::attend`] then stores nothing. `None` (nothing done) in a prefill,
    /// which attends to the rotated new keys themselves, or where the fused kernel does not apply.
    pub(crate) fn rope_store(
        &self,
        g: &Graph<'_>,
        i: usize,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        rope: (&Tensor, &Tensor),
        rot: (vkformers_kernels::rope::RopeLayout, usize, f32),
    ) -> Result<Option<Tensor>> {
        self.in_decode_layer(g, i, "rope_store", |layer, (step, _, rows)| {
            layer.rope_store(g, rows, (q, k, v), &step.tables[layer.group()], rope, rot)
        })
    }

    /// Runs `f` on layer `i`'s pools in a decode step (not a prefill, no gradients) with the
    /// step, the layer's group and the rows its block tables address; `f`'s `Some` means the
    /// kernel it recorded stored the layer's new keys and values (the layer's `attend` then
    /// stores nothing). `None` (nothing run) in a prefill or with gradients; `what` names the
    /// call in the error outside a forward.
    fn in_decode_layer<R>(
        &self,
        g: &Graph<'_>,
        i: usize,
        what: &str,
        f: impl FnOnce(&mut LayerPool, (&Step, &Group, usize)) -> Result<Option<R>>,
    ) -> Result<Option<R>> {
        let mut step = self.step.borrow_mut();
        let step = step.as_mut().ok_or_else(|| ModelError::Config(format!("KV cache {what} outside a forward")))?;
        if step.prefill || g.grad_enabled() {
            return Ok(None);
        }
        let mut layers = self.layers.borrow_mut();
        let layer = &mut layers[i];
        let groups = self.groups.borrow();
        let group = &groups[layer.group()];
        let rows = group.tables.num_blocks() * self.block_size;
        let out = f(layer, (step, group, rows))?;
        step.stored[i] |= out.is_some();
        Ok(out)
    }
}

/// Real tokens of each row of a left-padded `[B, T]` mask (`0…0 1…1`); anything else is an error.
fn real_counts(mask: &[i32], t: usize) -> Result<Vec<usize>> {
    mask.chunks(t.max(1))
        .map(|row| {
            let n = row.iter().filter(|&&m| m != 0).count();
            if row[t - n..].contains(&0) {
                return Err(ModelError::Config(format!("mask {row:?}: a KV cache takes left padding only")));
            }
            Ok(n)
        })
        .collect()
}
