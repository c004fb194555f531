//! The KV cache on the device for a batch of B sequences, left-padded to one length.
//!
//! Every layer keeps `k`, `v` `[B, slots, kv_heads, head_dim]` (f32, zero-initialised so that
//! slots no kernel wrote yet are finite: attention multiplies masked keys' values by 0). Slot `s`
//! of a layer holds buffer position `start + s`; buffer positions count every column of the batch,
//! padding included, so all rows share them. The host keeps the attention mask of every position
//! (`1` real, `0` padding) and each row's count of real tokens, from which the position ids of new
//! tokens follow (`cumsum(mask) − 1`, as transformers derives them for left padding).
//!
//! Sliding-window layers roll: before new keys would overflow their slots, only the last
//! `window − 1` positions are kept (the oldest position a new query at `p` sees is `p − window + 1`)
//! and moved to the front of a fresh buffer, as transformers' sliding-window cache keeps the last
//! `window` keys. Global layers grow (doubling) instead.
//!
//! Attention over the cache (see [`KvCache::attend`]): for B = 1 the filled slots are a prefix of
//! the buffer, attended with the usual causal / window rules in slot coordinates. For B > 1 the
//! filled slots of a row are not contiguous with the next row's, so a decode step (one new token
//! per row) attends over all slots with causality and the window folded into the key mask; a
//! batched prefill (empty cache) attends over the new keys alone.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use vkformers_tensor::ops::attention::AttnOptions;
use vkformers_tensor::{Graph, Tensor};

use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

/// Slots of a sliding-window layer: room for the window and as many new positions again, so that
/// keys move once every `window` decode steps.
fn window_slots(window: usize, capacity: usize) -> usize {
    (2 * window).max(window + 16).min(capacity.max(1))
}

/// One layer's keys and values.
struct LayerCache {
    k: Tensor,
    v: Tensor,
    slots: usize,
    /// Buffer position held by slot 0.
    start: usize,
    window: Option<usize>,
}

/// Keys and values of every layer for a batch of sequences, on the device.
pub struct KvCache {
    batch: usize,
    layers: RefCell<Vec<LayerCache>>,
    /// `mask[b]`: one entry per buffer position so far (1 real, 0 padding).
    mask: RefCell<Vec<Vec<i32>>>,
    /// Real tokens so far in each row: the position id of the row's next real token.
    seen: RefCell<Vec<i32>>,
    len: Cell<usize>,
    /// Key masks uploaded during the current forward, by (slots, start, window, mode).
    kmasks: RefCell<HashMap<(usize, usize, usize, bool), Tensor>>,
}

/// The key/value view and attention options of one layer for one forward.
pub struct Attend {
    pub k: Tensor,
    pub v: Tensor,
    pub opts: AttnOptions,
}

impl KvCache {
    /// An empty cache of one sequence with room for `capacity` positions before it grows.
    pub fn new(g: &Graph<'_>, spec: &ModelSpec, capacity: usize) -> Result<Self> {
        Self::batched(g, spec, 1, capacity)
    }

    /// An empty cache of `batch` sequences with room for `capacity` positions before global
    /// layers grow (sliding-window layers hold about twice their window).
    pub fn batched(g: &Graph<'_>, spec: &ModelSpec, batch: usize, capacity: usize) -> Result<Self> {
        if batch == 0 {
            return Err(ModelError::Config("a KV cache needs at least one sequence".into()));
        }
        let mut layers = Vec::with_capacity(spec.layers.len());
        for l in &spec.layers {
            let window = l.attn.sliding_window.map(|w| w as usize);
            let slots = window.map_or(capacity.max(1), |w| window_slots(w, capacity));
            let shape = [batch, slots, l.attn.kv_heads, l.attn.head_dim];
            layers.push(LayerCache { k: g.full(&shape, 0.0)?, v: g.full(&shape, 0.0)?, slots, start: 0, window });
        }
        Ok(KvCache {
            batch,
            layers: RefCell::new(layers),
            mask: RefCell::new(vec![Vec::new(); batch]),
            seen: RefCell::new(vec![0; batch]),
            len: Cell::new(0),
            kmasks: RefCell::new(HashMap::new()),
        })
    }

    /// Buffer positions filled so far (padding included).
    pub fn len(&self) -> usize {
        self.len.get()
    }

    pub fn is_empty(&self) -> bool {
        self.len.get() == 0
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Positions each layer holds now (sliding-window layers stay near their window).
    pub fn layer_slots(&self) -> Vec<usize> {
        self.layers.borrow().iter().map(|l| l.slots).collect()
    }

    /// Position ids `[B·T]` of `T` new columns with mask `mask` (`[B·T]`): each real token's count
    /// of real tokens before it in its row; padding gets 0 (never attended).
    pub(crate) fn positions(&self, mask: &[i32], t: usize) -> Vec<i32> {
        let seen = self.seen.borrow();
        let mut out = Vec::with_capacity(mask.len());
        for (row, cols) in mask.chunks(t).enumerate() {
            let mut p = seen[row];
            for &m in cols {
                out.push(if m != 0 { p } else { 0 });
                p += i32::from(m != 0);
            }
        }
        out
    }

    /// Checks a forward of `t` new columns can run, and forgets the key masks of the last one.
    pub(crate) fn begin(&self, t: usize) -> Result<()> {
        let (b, past) = (self.batch, self.len());
        if b > 1 && t > 1 && past > 0 {
            return Err(ModelError::Config(format!(
                "a batch of {b} sequences takes several new tokens only into an empty cache ({past} positions filled)"
            )));
        }
        self.kmasks.borrow_mut().clear();
        Ok(())
    }

    /// Records `t` new columns (mask `[B·T]`) as filled, after every layer has appended them.
    pub(crate) fn commit(&self, mask: &[i32], t: usize) {
        let mut rows = self.mask.borrow_mut();
        let mut seen = self.seen.borrow_mut();
        for (row, cols) in mask.chunks(t).enumerate() {
            rows[row].extend_from_slice(cols);
            seen[row] += cols.iter().filter(|&&m| m != 0).count() as i32;
        }
        self.len.set(self.len() + t);
    }

    /// Appends layer `i`'s new keys and values `[B, T, Hkv, D]` (mask `new_mask [B·T]`) and returns
    /// what attention should read, with `opts` (scale, softcap, ALiBi of the layer) completed by
    /// the masks.
    pub(crate) fn attend(
        &self,
        g: &Graph<'_>,
        i: usize,
        k: &Tensor,
        v: &Tensor,
        new_mask: &[i32],
        mut opts: AttnOptions,
    ) -> Result<Attend> {
        let (b, t) = (self.batch, k.shape()[1]);
        let past = self.len();
        self.make_room(g, i, t)?;
        let mut layers = self.layers.borrow_mut();
        let lc = &mut layers[i];
        write_rows(g, lc, k, v, past - lc.start)?;
        let window = lc.window.unwrap_or(0);
        opts.window = window as u32;
        if b == 1 {
            // Filled slots are a prefix: the new queries sit at its end, as the kernel assumes.
            let filled = past + t - lc.start;
            let shape = [1, filled, k.shape()[2], k.shape()[3]];
            opts.kmask = Some(self.kmask(g, lc, filled, false, new_mask)?);
            return Ok(Attend { k: g.view_prefix(&lc.k, &shape)?, v: g.view_prefix(&lc.v, &shape)?, opts });
        }
        if past == 0 {
            // Batched prefill: the new keys are the whole history.
            opts.kmask = Some(g.ints(new_mask, &[b, t])?);
            return Ok(Attend { k: k.clone(), v: v.clone(), opts });
        }
        // Batched decode (t = 1): every slot, visibility (filled, real, in the window) in the mask.
        opts.kmask = Some(self.kmask(g, lc, lc.slots, true, new_mask)?);
        opts.causal = false;
        opts.window = 0;
        Ok(Attend { k: lc.k.clone(), v: lc.v.clone(), opts })
    }

    /// Key mask `[B, n]` over slots `0..n` of `lc` for the query at the newest position: slot s
    /// (position `start + s`) is kept when filled and real, and with `fold_window` also when within
    /// the layer's window of the query.
    fn kmask(&self, g: &Graph<'_>, lc: &LayerCache, n: usize, fold_window: bool, new_mask: &[i32]) -> Result<Tensor> {
        let key = (n, lc.start, lc.window.unwrap_or(0), fold_window);
        if let Some(t) = self.kmasks.borrow().get(&key) {
            return Ok(t.clone());
        }
        let rows = self.mask.borrow();
        let (b, past) = (self.batch, self.len());
        let t_new = new_mask.len() / b;
        let query = past + t_new - 1;
        let mut data = vec![0; b * n];
        for (row, out) in data.chunks_mut(n).enumerate() {
            for (s, o) in out.iter_mut().enumerate() {
                let p = lc.start + s;
                let real = match p {
                    p if p < past => rows[row][p],
                    p if p < past + t_new => new_mask[row * t_new + p - past],
                    _ => 0,
                };
                let in_window = !fold_window || p > query || lc.window.is_none_or(|w| query - p < w);
                *o = i32::from(real != 0 && in_window);
            }
        }
        let t = g.ints(&data, &[b, n])?;
        self.kmasks.borrow_mut().insert(key, t.clone());
        Ok(t)
    }

    /// Makes room in layer `i` for `t` more positions: a sliding-window layer keeps only the last
    /// `window − 1` (all a new query can see), a global layer doubles.
    fn make_room(&self, g: &Graph<'_>, i: usize, t: usize) -> Result<()> {
        let past = self.len();
        let mut layers = self.layers.borrow_mut();
        let lc = &mut layers[i];
        if past + t - lc.start <= lc.slots {
            return Ok(());
        }
        let (keep, slots) = match lc.window {
            Some(w) => {
                let keep = (past - lc.start).min(w.saturating_sub(1));
                (keep, lc.slots.max(keep + t))
            }
            None => (past - lc.start, (2 * lc.slots).max(past - lc.start + t)),
        };
        let shape = [self.batch, slots, lc.k.shape()[2], lc.k.shape()[3]];
        let (k, v) = (g.full(&shape, 0.0)?, g.full(&shape, 0.0)?);
        let from = past - keep - lc.start;
        move_rows(g, (&lc.k, lc.slots, from), (&k, slots, 0), keep)?;
        move_rows(g, (&lc.v, lc.slots, from), (&v, slots, 0), keep)?;
        *lc = LayerCache { k, v, slots, start: past - keep, window: lc.window };
        Ok(())
    }
}

/// Writes `[B, T, Hkv, D]` keys and values into slots `at..at + T` of every row.
fn write_rows(g: &Graph<'_>, lc: &LayerCache, k: &Tensor, v: &Tensor, at: usize) -> Result<()> {
    let t = k.shape()[1];
    move_rows(g, (k, t, 0), (&lc.k, lc.slots, at), t)?;
    move_rows(g, (v, t, 0), (&lc.v, lc.slots, at), t)
}

/// Copies `n` positions of every batch row from `src` (rows of `src_slots`, from slot `src_at`) to
/// `dst` (rows of `dst_slots`, from slot `dst_at`); both `[B, slots, Hkv, D]` f32.
fn move_rows(g: &Graph<'_>, src: (&Tensor, usize, usize), dst: (&Tensor, usize, usize), n: usize) -> Result<()> {
    let ((s, s_slots, s_at), (d, d_slots, d_at)) = (src, dst);
    if n == 0 {
        return Ok(());
    }
    let batch = d.shape()[0];
    let pos_bytes = (d.shape()[2] * d.shape()[3] * 4) as u64;
    let len = n as u64 * pos_bytes;
    g.record(|rec| {
        for b in 0..batch {
            let from = ((b * s_slots + s_at) as u64) * pos_bytes;
            let to = ((b * d_slots + d_at) as u64) * pos_bytes;
            rec.copy(s.view().buffer.slice(from, len), d.view().buffer.slice(to, len))?;
        }
        Ok(())
    })?;
    Ok(())
}
