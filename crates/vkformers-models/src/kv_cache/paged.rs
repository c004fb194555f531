//! Device side of the paged KV cache: each layer's pools, the per-forward tables, and the two
//! kernels of `vkformers_kernels::attention::decode` (store, paged attention) on tensors.
//! Inference only: no gradient flows through the cache.

use std::cell::RefCell;
use vkformers_kernels::attention::decode::{self, DecodeOptions, DecodeOutputs, DecodeShape, PagedInputs, Pools};
use vkformers_kernels::attention::decode_lean::{self, Kernel};
use vkformers_kernels::attention::rope_store::{self, NewRows};
use vkformers_kernels::dtype::cast;
use vkformers_kernels::rope::{Rope, RopeLayout};
use vkformers_tensor::ops::attention::AttnOptions;

use vkformers_tensor::{DType, Graph, Tensor};
use vkformers_vk::BufferView;

use super::blocks::BlockTables;
use crate::error::{ModelError, Result};

mod packed;
pub(crate) use packed::packed_rows;
mod rope_attend;
mod wide;

/// One group's device tables for one forward over B selected rows of T new columns: the block
/// table, the lengths and the store slots in one int32 buffer (one upload a step instead of
/// three), each read through its byte range, after a prefix of other int32 data the forward
/// needs (the first group carries the position ids: one upload fewer again).
pub(crate) struct StepTables {
    /// `[P | B·max_blocks | B | B·T]` int32: the prefix, block ids (-1: not held), real
    /// positions of each row after this forward, pool row of each new column's key (-1:
    /// padding, or not kept).
    ints: Tensor,
    /// Values in the prefix P.
    prefix: usize,
    max_blocks: usize,
    /// Rows B and new columns T.
    rows: usize,
    cols: usize,
    max_len: usize,
    /// Copy on write: (shared block, fresh block) pairs each layer copies before its store.
    pub(crate) copies: Vec<(u32, u32)>,
    block_size: usize,
}

impl StepTables {
    /// Tables of `rows` whose lengths become `after`, with `real[n]` real tokens among the `t`
    /// new columns of row n (the last `real[n]` columns, at positions `after − real .. after`),
    /// uploaded after `prefix` ([`Self::prefix`] reads it back).
    pub(crate) fn upload(
        g: &Graph<'_>,
        tables: &BlockTables,
        (rows, after): (&[usize], &[usize]),
        (real, t): (&[usize], usize),
        prefix: &[i32],
    ) -> Result<Self> {
        let (table, max_blocks) = tables.table(rows);
        if after.iter().any(|&l| l > i32::MAX as usize) {
            return Err(ModelError::Config("a KV cache row beyond 2^31 positions".into()));
        }
        let mut ints = prefix.to_vec();
        ints.extend(table);
        ints.extend(after.iter().map(|&l| l as i32));
        for (n, &r) in rows.iter().enumerate() {
            let first_real = t - real[n];
            ints.extend(
                (0..t).map(|c| if c >= first_real { tables.slot(r, after[n] + c - t).unwrap_or(-1) } else { -1 }),
            );
        }
        let len = ints.len();
        Ok(StepTables {
            ints: g.step_ints(&ints, &[len])?,
            prefix: prefix.len(),
            max_blocks,
            rows: rows.len(),
            cols: t,
            max_len: after.iter().copied().max().unwrap_or(0),
            copies: Vec::new(),
            block_size: tables.block_size(),
        })
    }

    /// The int32 values `[from, from + n)` after the prefix.
    fn ints_at(&self, from: usize, n: usize) -> BufferView<'_> {
        let at = self.ints.view().offset + (self.prefix + from) as u64 * 4;
        self.ints.view().buffer.slice(at, n as u64 * 4)
    }

    /// The prefix given to [`Self::upload`] as a tensor of `shape` (sharing the upload).
    pub(crate) fn prefix(&self, g: &Graph<'_>, shape: &[usize]) -> Result<Tensor> {
        if shape.iter().product::<usize>() != self.prefix {
            return Err(ModelError::Config(format!("a prefix of {} values as {shape:?}", self.prefix)));
        }
        Ok(g.view_prefix(&self.ints, shape)?)
    }

    /// The uploaded int32 values.
    pub(crate) fn ints(&self) -> &Tensor {
        &self.ints
    }

    /// The layout `vkformers_kernels::step::advance` reads, for a forward of one new column a
    /// row (None otherwise).
    pub(crate) fn advance_layout(&self) -> Option<vkformers_kernels::step::StepTables> {
        (self.cols == 1 && (self.prefix == 0 || self.prefix == self.rows)).then_some(
            vkformers_kernels::step::StepTables {
                rows: self.rows as u32,
                prefix: self.prefix as u32,
                max_blocks: self.max_blocks as u32,
                block_size: self.block_size as u32,
            },
        )
    }

    /// `[B, max_blocks]` int32 block ids.
    pub(crate) fn table(&self) -> BufferView<'_> {
        self.ints_at(0, self.rows * self.max_blocks)
    }

    /// `[B]` int32 lengths after this forward.
    pub(crate) fn lens(&self) -> BufferView<'_> {
        self.ints_at(self.rows * self.max_blocks, self.rows)
    }

    /// `[B·T]` int32 store slots.
    pub(crate) fn slots(&self) -> BufferView<'_> {
        self.ints_at(self.rows * (self.max_blocks + 1), self.rows * self.cols)
    }
}

/// One layer's pools `[pool rows, Hkv, D]` (pool rows = blocks · block_size) in their storage type.
pub(crate) struct LayerPool {
    group: usize,
    kv_heads: usize,
    head_dim: usize,
    /// The values are the keys (multi-head latent attention's cached latent `[c | k_rot]`): one
    /// pool serves both, so a position holds `kv_heads · head_dim` values, not twice that.
    values_are_keys: bool,
    /// Value columns read per head: `head_dim`, or the latent's first `kv_lora_rank` columns
    /// (`c`, the absorbed decode's values; its rotary columns only ever meet q as keys).
    value_dim: usize,
    pools: Option<(Tensor, Tensor)>,
    /// The split decode attention's per-tile counters (`decode::counter_words` uint32, zero
    /// between calls), grown with the batch.
    counters: RefCell<Option<Tensor>>,
    /// The sizes of the layer's last decode-attention call (what a replay of the step keeps) and
    /// the kernel its split count was chosen for.
    last_shape: std::cell::Cell<Option<(DecodeShape, Kernel)>>,
}

impl LayerPool {
    pub(crate) fn new(group: usize, kv_heads: usize, head_dim: usize) -> Self {
        LayerPool {
            group,
            kv_heads,
            head_dim,
            values_are_keys: false,
            value_dim: head_dim,
            pools: None,
            counters: RefCell::new(None),
            last_shape: std::cell::Cell::new(None),
        }
    }

    /// A pool of one head of `width` values a position, read as the keys and (its first
    /// `values` columns) as the values: no value pool of its own.
    pub(crate) fn latent(group: usize, width: usize, values: usize) -> Self {
        LayerPool {
            group,
            kv_heads: 1,
            head_dim: width,
            values_are_keys: true,
            value_dim: values,
            pools: None,
            counters: RefCell::new(None),
            last_shape: std::cell::Cell::new(None),
        }
    }

    pub(crate) fn is_latent(&self) -> bool {
        self.values_are_keys
    }

    /// Values a position holds (`Hkv · D`: a latent pool's row width).
    pub(crate) fn width(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// The key pool `[rows, Hkv, D]` once a store made it.
    pub(crate) fn key_pool(&self) -> Option<&Tensor> {
        self.pools.as_ref().map(|p| &p.0)
    }

    /// Values held per cached position.
    pub(crate) fn values_per_position(&self) -> usize {
        self.kv_heads * self.head_dim * if self.values_are_keys { 1 } else { 2 }
    }

    /// The sizes of the layer's last decode-attention call, if it ran one, and the kernel its
    /// split count was chosen for.
    pub(crate) fn last_shape(&self) -> Option<(DecodeShape, Kernel)> {
        self.last_shape.get()
    }

    pub(crate) fn group(&self) -> usize {
        self.group
    }

    /// The pools with at least `rows` rows: allocated on first use in the storage type
    /// (autocast's, else k's), copied into bigger ones when the group's pool grew.
    fn pools(&mut self, g: &Graph<'_>, rows: usize, k: &Tensor) -> Result<(Tensor, Tensor)> {
        let dt = self.pools.as_ref().map_or(g.autocast().unwrap_or(k.dtype()), |p| p.0.dtype());
        let shape = [rows, self.kv_heads, self.head_dim];
        let shared = self.values_are_keys;
        let fresh = |g: &Graph<'_>| -> Result<(Tensor, Tensor)> {
            let k = g.empty_as(&shape, dt)?;
            let v = if shared { k.clone() } else { g.empty_as(&shape, dt)? };
            Ok((k, v))
        };
        match &self.pools {
            Some(p) if p.0.shape()[0] >= rows => return Ok(p.clone()),
            Some((ok, ov)) => {
                let (nk, nv) = fresh(g)?;
                let copies: &[(&Tensor, &Tensor)] = if shared { &[(ok, &nk)] } else { &[(ok, &nk), (ov, &nv)] };
                g.record(|rec| {
                    for (old, new) in copies {
                        let bytes = old.view().len;
                        rec.copy(old.view(), new.view().buffer.slice(0, bytes))?;
                    }
                    Ok(())
                })?;
                self.pools = Some((nk, nv));
            }
            None => self.pools = Some(fresh(g)?),
        }
        Ok(self.pools.clone().expect("pools just made"))
    }

    /// Writes the new keys and values `[B, T, Hkv, D]` at their slots (pools of `rows` rows).
    pub(crate) fn store(
        &mut self,
        g: &Graph<'_>,
        rows: usize,
        (k, v): (&Tensor, &Tensor),
        st: &StepTables,
    ) -> Result<()> {
        let (pk, pv) = self.pools(g, rows, k)?;
        self.copy_on_write(g, (&pk, &pv), st)?;
        let dt = pk.dtype();
        // f32 keys go into a 16-bit pool as they are (the store kernel rounds them, as a cast
        // would); any other mismatch is cast first.
        let src = if direct(k.dtype(), dt) { k.dtype() } else { dt };
        // A latent pool holds the keys alone (its values are their first columns): the values
        // given (the latent c, for the prefill's attention) are not stored again.
        let v = if self.values_are_keys { k } else { v };
        let (k, v) = (in_type(g, k, src)?, in_type(g, v, src)?);
        let pools =
            Pools { k: pk.view(), v: pv.view(), rows: rows as u32, width: (self.kv_heads * self.head_dim) as u32 };
        g.record(|rec| decode::store_from(rec, ((k.view(), v.view()), src), st.slots(), &pools, dt))?;
        Ok(())
    }

    /// Rotates q and k `[B, T, H, D]` f32 and stores k and v at their slots in one dispatch
    /// (`rope_store`, bit for bit the rope then [`Self::store`]): the rotated q, or `None` where
    /// the fused kernel does not apply (not f32, latent pools; the caller runs both steps).
    pub(crate) fn rope_store(
        &mut self,
        g: &Graph<'_>,
        rows: usize,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        st: &StepTables,
        (pos, inv_freq): (&Tensor, &Tensor),
        (layout, rotary_dim, mscale): (RopeLayout, usize, f32),
    ) -> Result<Option<Tensor>> {
        let (qs, ks) = (q.shape(), k.shape());
        let f32s = [q, k, v].iter().all(|t| t.dtype() == DType::F32);
        let fits = |x: usize| u32::try_from(x).ok();
        if !f32s || self.values_are_keys || qs.len() != 4 || ks.len() != 4 || v.shape() != ks {
            return Ok(None);
        }
        let (Some(b), Some(t), Some(hq), Some(d), Some(r)) =
            (fits(qs[0]), fits(qs[1]), fits(qs[2]), fits(qs[3]), fits(rotary_dim))
        else {
            return Ok(None);
        };
        let grid = ks[..2] == qs[..2] && ks[2] == self.kv_heads && ks[3] == self.head_dim && qs[3] == self.head_dim;
        if !grid || pos.numel() != qs[0] * qs[1] || inv_freq.numel() != rotary_dim / 2 {
            return Ok(None);
        }
        let p = Rope { batch: b, seq: t, heads: hq, head_dim: d, rotary_dim: r, layout, mscale, dtype: DType::F32 };
        let x = NewRows { q: q.view(), k: k.view(), v: v.view(), strides: None };
        Ok(Some(self.record_rope_store(g, (rows, st), &p, (&x, k), (pos, inv_freq))?))
    }

    /// The one dispatch of [`Self::rope_store`] on the new rows `x` (described by `p`, q's heads;
    /// `like`: an f32 tensor the pools take their type from when first made): returns the
    /// rotated q `[B, T, Hq, D]`, dense.
    fn record_rope_store(
        &mut self,
        g: &Graph<'_>,
        (rows, st): (usize, &StepTables),
        p: &Rope,
        (x, like): (&NewRows<'_>, &Tensor),
        (pos, inv_freq): (&Tensor, &Tensor),
    ) -> Result<Tensor> {
        let (pk, pv) = self.pools(g, rows, like)?;
        self.copy_on_write(g, (&pk, &pv), st)?;
        let dt = pk.dtype();
        let qo = g.empty(&[p.batch, p.seq, p.heads, p.head_dim].map(|x| x as usize))?;
        let pools =
            Pools { k: pk.view(), v: pv.view(), rows: rows as u32, width: (self.kv_heads * self.head_dim) as u32 };
        let io = (pos.view(), inv_freq.view(), st.slots());
        g.record(|rec| rope_store::rope_store(rec, p, x, io, (qo.view(), &pools), dt))?;
        Ok(qo)
    }

    /// Copies each shared block's positions into the fresh block a writing row took
    /// (`block_size · Hkv · D` values per pool, ahead of the store that writes the new ones).
    fn copy_on_write(&self, g: &Graph<'_>, (pk, pv): (&Tensor, &Tensor), st: &StepTables) -> Result<()> {
        if st.copies.is_empty() {
            return Ok(());
        }
        let bytes = (st.block_size * self.kv_heads * self.head_dim) as u64 * pk.dtype().bytes();
        let pools: &[&Tensor] = if self.values_are_keys { &[pk] } else { &[pk, pv] };
        g.record(|rec| {
            for pool in pools {
                let buf = pool.view().buffer;
                for &(from, to) in &st.copies {
                    rec.copy(buf.slice(u64::from(from) * bytes, bytes), buf.slice(u64::from(to) * bytes, bytes))?;
                }
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Paged attention of q `[B, T, Hq, D]` over the rows' keys (stored by [`Self::store`]), in
    /// q's type: o `[B, T, Hq, Dv]` (Dv = `value_dim`, read from v rows of `head_dim`).
    pub(crate) fn decode(
        &self,
        g: &Graph<'_>,
        q: &Tensor,
        st: &StepTables,
        opts: &AttnOptions,
        (block_size, chunk): (usize, u32),
    ) -> Result<Tensor> {
        if self.is_wide_latent() {
            return self.decode_wide(g, q, st, opts, (block_size, chunk));
        }
        let (pk, pv) =
            self.pools.as_ref().ok_or_else(|| ModelError::Config("paged attention before a store".into()))?;
        let dt = pk.dtype();
        let qs = q.shape();
        let shape = self.decode_shape((qs[0], qs[1], qs[2]), pk.shape()[0], st, block_size);
        let (act, q16, o, lse) = self.decode_io(g, q, dt)?;
        let (splits, work, counters) = self.split_buffers(g, &shape, st)?;
        let mut ko = decode_options(opts, shape.d, chunk, (dt, act));
        let sinks = f32_sinks(g, opts)?;
        ko.sinks = sinks.as_ref().map(Tensor::view);
        let x = PagedInputs { q: q16.view(), k: pk.view(), v: pv.view(), table: st.table(), lens: st.lens() };
        let o16 = o_twin(g, &o, dt)?;
        let out = decode_outputs(&o, &lse, (&work, &counters), &o16);
        g.record(|rec| decode::forward(rec, &x, &out, &shape, &ko, splits))?;
        in_type(g, &o, q.dtype())
    }
}

impl LayerPool {
    /// The decode kernels' sizes of a call on q `[B, T, Hq, ·]` (`bth`) over pools of `pool_rows`
    /// rows in blocks of `block_size`.
    fn decode_shape(
        &self,
        (b, t, hq): (usize, usize, usize),
        pool_rows: usize,
        st: &StepTables,
        block_size: usize,
    ) -> DecodeShape {
        DecodeShape {
            batch: b as u32,
            tq: t as u32,
            hq: hq as u32,
            hkv: self.kv_heads as u32,
            d: self.head_dim as u32,
            dv: self.value_dim as u32,
            v_row: self.head_dim as u32,
            block_size: block_size as u32,
            num_blocks: (pool_rows / block_size) as u32,
            max_blocks: st.max_blocks as u32,
        }
    }

    /// The splits of a call of `shape` over the step's rows, and its work buffer and counters
    /// when it splits.
    fn split_buffers(&self, g: &Graph<'_>, shape: &DecodeShape, st: &StepTables) -> Result<SplitBuffers> {
        let kernel = decode_lean::preferred_on(g.ctx().caps());
        self.last_shape.set(Some((*shape, kernel)));
        let splits = decode::splits_for_kernel(shape, st.max_len as u32, kernel);
        if splits == 1 {
            return Ok((1, None, None));
        }
        let work = g.empty(&[decode::work_floats(shape, splits) as usize])?;
        Ok((splits, Some(work), Some(self.counters(g, decode::counter_words(shape) as usize)?)))
    }

    /// The counters of split decode calls, at least `words` of them: made zero on first use (and
    /// when the batch outgrows them); the kernel leaves them zero after each call.
    fn counters(&self, g: &Graph<'_>, words: usize) -> Result<Tensor> {
        let mut slot = self.counters.borrow_mut();
        match slot.as_ref() {
            Some(c) if c.numel() >= words => Ok(c.clone()),
            _ => {
                // f32 zeros are uint32 zeros.
                let c = g.full(&[words], 0.0)?;
                *slot = Some(c.clone());
                Ok(c)
            }
        }
    }
}

/// Whether the decode kernels take tensors of `x` directly with pools of `dt`: the same type,
/// or f32 activations over a 16-bit pool.
/// The decode kernels' options from the layer's attention options: scale (else 1/sqrt(d)),
/// causal, window, softcap, ALiBi slopes, the chunk, pools of `dt` with q and o in `act` (the
/// caller adds the sinks).
fn decode_options(opts: &AttnOptions, d: u32, chunk: u32, (dt, act): (DType, DType)) -> DecodeOptions<'_> {
    let mut ko = DecodeOptions::new(d);
    ko.scale = opts.scale.unwrap_or(ko.scale);
    ko.causal = opts.causal;
    ko.window = opts.window;
    ko.chunk = chunk;
    ko.softcap = opts.softcap;
    ko.alibi = opts.alibi.as_ref().map(Tensor::view);
    ko.dtype = dt;
    ko.act = Some(act);
    ko
}

impl LayerPool {
    /// A decode call's q and outputs over a pool of `dt`: the type q and o are read and written
    /// in (f32 q and o over a 16-bit pool need no cast: the kernels' _q32 variants), q in it,
    /// o `[B, T, Hq, Dv]` and lse `[B, Hq, T]` f32.
    fn decode_io(&self, g: &Graph<'_>, q: &Tensor, dt: DType) -> Result<(DType, Tensor, Tensor, Tensor)> {
        let qs = q.shape();
        let act = if direct(q.dtype(), dt) { q.dtype() } else { dt };
        let q16 = in_type(g, q, act)?;
        let o = g.empty_as(&[qs[0], qs[1], qs[2], self.value_dim], act)?;
        let lse = g.empty(&[qs[0], qs[2], qs[1]])?;
        Ok((act, q16, o, lse))
    }
}

/// The 16-bit copy of the decode attention's f32 o `[B, T, Hq, Dv]` over pools of `pool` type
/// that the kernel writes too, where a tensor-core product reads o next (o_proj on more rows
/// than the GEMV takes, in inference under autocast in the pools' type), kept as o's copy so
/// o_proj runs no cast; None elsewhere.
/// The decode kernels' outputs: `o` and its log-sum-exp `lse`, the split `work` and `counters`
/// (when the keys are split) and `o16`, o's copy in the pools' type (where one is written).
pub(super) fn decode_outputs<'a>(
    o: &'a Tensor,
    lse: &'a Tensor,
    (work, counters): (&'a Option<Tensor>, &'a Option<Tensor>),
    o16: &'a Option<Tensor>,
) -> DecodeOutputs<'a> {
    DecodeOutputs {
        o: o.view(),
        lse: lse.view(),
        work: work.as_ref().map(Tensor::view),
        counters: counters.as_ref().map(Tensor::view),
        o16: o16.as_ref().map(Tensor::view),
    }
}

pub(super) fn o_twin(g: &Graph<'_>, o: &Tensor, pool: DType) -> Result<Option<Tensor>> {
    // Only a copy of the pools' type can be written (and one asked for is kept: never ask for
    // one the kernel would not write).
    if o.dtype() != DType::F32 || pool == DType::F32 || g.autocast() != Some(pool) {
        return Ok(None);
    }
    let s = o.shape();
    Ok(vkformers_tensor::ops::cast::twin_for_rows(g, o, s[0] * s[1])?)
}

/// A call's splits, and its work buffer and counters (split calls only).
type SplitBuffers = (u32, Option<Tensor>, Option<Tensor>);

/// The sinks as the kernels read them: f32 (a 16-bit sinks weight is widened; inference, no
/// gradient).
fn f32_sinks(g: &Graph<'_>, opts: &AttnOptions) -> Result<Option<Tensor>> {
    Ok(opts.sinks.as_ref().map(|t| vkformers_tensor::ops::cast::cast(g, t, DType::F32)).transpose()?)
}

fn direct(x: DType, dt: DType) -> bool {
    x == dt || (x == DType::F32 && dt != DType::F32)
}

/// `x` in storage type `dt` (itself, or a cast copy).
fn in_type(g: &Graph<'_>, x: &Tensor, dt: DType) -> Result<Tensor> {
    if x.dtype() == dt {
        return Ok(x.clone());
    }
    let y = g.empty_as(x.shape(), dt)?;
    g.record(|rec| cast(rec, x.view(), x.dtype(), y.view(), dt))?;
    Ok(y)
}
