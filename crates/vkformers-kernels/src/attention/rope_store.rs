//! A decode step's rotary embedding of q and k and the store of k and v into the paged pools in
//! one dispatch (`shaders/attention/decode_rope_store.comp`): what [`super::decode::rope_qk`]
//! then [`super::decode::store_from`] do, bit for bit, without the rotated keys' round trip
//! through memory and the barrier between the two. q, k and v may be rows of one wider tensor
//! (the packed q/k/v product `[N, (Hq + 2 Hkv) D]`, read in place: no split dispatch first).
//!
//! [`attend`] goes one dispatch further for a decode step of one new token a row: the decode
//! attention itself rotates q and the new key and stores the new key and value
//! (`shaders/attention/decode_rope_in.glsl`), bit for bit this module's [`rope_store`] then
//! [`super::decode::forward`].

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use super::decode::{self, DecodeOptions, DecodeOutputs, DecodeShape, Extra, PagedInputs, Pools};
use super::{check_len, fail};
use crate::code;
use crate::code::{AttentionDecodePushRope, AttentionDecodeRopeStorePush};
use crate::dtype::DType;
use crate::launch::{dispatch_elems, variant};
use crate::rope::{Rope, RopeLayout};

/// The step's new rows, f32: q `[N, Hq, D]`, k and v `[N, Hkv, D]`, each token's row `strides`
/// elements after the previous one (q's, then k's and v's); `None`: dense rows (`Hq·D`,
/// `Hkv·D`). The packed product `y [N, (Hq + 2 Hkv) D]` is q, k, v at element offsets 0,
/// `Hq·D`, `(Hq + Hkv)·D` with both strides its width.
#[derive(Clone, Copy, Debug)]
pub struct NewRows<'a> {
    pub q: BufferView<'a>,
    pub k: BufferView<'a>,
    pub v: BufferView<'a>,
    pub strides: Option<(u32, u32)>,
}

/// Records `qo = rope(q)` and the store of `rope(k)` and `v` at pool rows `slots [N]` int32
/// (negative: not stored) of `pools` (storage type `dt`), where `p` describes q (`p.heads` = Hq,
/// `p.batch · p.seq` = N tokens, `p.dtype` f32) and the pools' width is `Hkv · D`; positions
/// `pos [N]` int32 and `inv_freq [R/2]` f32.
pub fn rope_store(
    rec: &mut Recorder,
    p: &Rope,
    x: &NewRows<'_>,
    (pos, inv_freq, slots): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    (qo, pools): (BufferView<'_>, &Pools<'_>),
    dt: DType,
) -> Result<()> {
    let code = variant(
        dt,
        [
            &code::ATTENTION_DECODE_ROPE_STORE_F32,
            &code::ATTENTION_DECODE_ROPE_STORE_F16,
            &code::ATTENTION_DECODE_ROPE_STORE_BF16,
        ],
    );
    let (d, r) = (u64::from(p.head_dim), u64::from(p.rotary_dim));
    let hkv = pools.width.checked_div(p.head_dim).unwrap_or(0);
    let tokens = u64::from(p.batch) * u64::from(p.seq);
    let rows = tokens * u64::from(p.heads + hkv);
    let pool = u64::from(pools.rows) * u64::from(pools.width);
    if p.dtype != DType::F32
        || tokens == 0
        || p.heads == 0
        || hkv == 0
        || hkv * p.head_dim != pools.width
        || r % 2 != 0
        || r > d
        || (rows * d).max(pool) >= 1 << 32
    {
        let why =
            format!("rope of {p:?} into pools {} wide: not f32, empty, odd rotary dim, or too large", pools.width);
        return Err(fail(code.name, why));
    }
    let (q_row, kv_row) = (u64::from(p.heads) * d, u64::from(hkv) * d);
    let ((q_stride, kv_stride), (q_span, kv_span)) = strided_rows(code.name, x.strides, tokens, (q_row, kv_row))?;
    check_len(code.name, "q [N, Hq, D]", &x.q, q_span, 4)?;
    check_len(code.name, "qo [N, Hq, D]", &qo, tokens * q_row, 4)?;
    check_len(code.name, "k [N, Hkv, D]", &x.k, kv_span, 4)?;
    check_len(code.name, "v [N, Hkv, D]", &x.v, kv_span, 4)?;
    check_len(code.name, "pos [N]", &pos, tokens, 4)?;
    check_len(code.name, "slots [N]", &slots, tokens, 4)?;
    check_len(code.name, "inv_freq [R/2]", &inv_freq, r / 2, 4)?;
    check_len(code.name, "k pool", &pools.k, pool, dt.bytes())?;
    check_len(code.name, "v pool", &pools.v, pool, dt.bytes())?;
    let push = AttentionDecodeRopeStorePush {
        base: decode::rope_push(p, tokens, hkv),
        pool_rows: pools.rows,
        q_stride: q_stride as u32,
        kv_stride: kv_stride as u32,
    };
    let work = rows * (r / 2 + d - r);
    let args = [
        read(x.q),
        read(x.k),
        read(x.v),
        write(qo),
        write(pools.k),
        write(pools.v),
        read(pos),
        read(slots),
        read(inv_freq),
    ];
    dispatch_elems(rec, code, &args, &push, work)
}

/// The strides of q's rows and of k's and v's (`strides`, or dense rows of `q_row` and `kv_row`
/// elements) and each one's span, the elements from its first to its last read over `tokens`
/// rows: (tokens - 1) strides and one row. An error naming `kernel` when a stride is under its
/// row or a span reaches 2^32.
fn strided_rows(
    kernel: &str,
    strides: Option<(u32, u32)>,
    tokens: u64,
    (q_row, kv_row): (u64, u64),
) -> Result<((u64, u64), (u64, u64))> {
    let (q_stride, kv_stride) = strides.map_or((q_row, kv_row), |(a, b)| (u64::from(a), u64::from(b)));
    let (q_span, kv_span) = ((tokens - 1) * q_stride + q_row, (tokens - 1) * kv_stride + kv_row);
    if q_stride < q_row || kv_stride < kv_row || q_span.max(kv_span) >= 1 << 32 {
        let why = format!("rows strided ({q_stride}, {kv_stride}) under their widths ({q_row}, {kv_row}) or too large");
        return Err(fail(kernel, why));
    }
    Ok(((q_stride, kv_stride), (q_span, kv_span)))
}

/// The new token of a decode step that [`attend`] rotates and stores: k and v `[B, Hkv, D]` f32
/// unrotated (rows `strides.1` elements apart; `None`: dense, and q dense too), positions
/// `pos [B]` int32, `inv_freq [R/2]` f32, pool rows `slots [B]` int32 (negative or at/past
/// `pool_rows`: not stored, and attention reads the pools' key as it is).
#[derive(Clone, Copy, Debug)]
pub struct NewToken<'a> {
    pub k: BufferView<'a>,
    pub v: BufferView<'a>,
    /// Elements between rows of q, and of k and v.
    pub strides: Option<(u32, u32)>,
    pub pos: BufferView<'a>,
    pub inv_freq: BufferView<'a>,
    pub slots: BufferView<'a>,
    pub layout: RopeLayout,
    pub rotary_dim: u32,
    pub mscale: f32,
    /// Pool rows a slot may name (the cache's table's; at most the pools' rows).
    pub pool_rows: u32,
}

/// [`rope_store`] then [`decode::forward`] (128-key tiles) in one dispatch, for a decode step
/// (`s.tq` = 1, values in a pool of their own): `x.q` is the unrotated q `[B, Hq, D]` f32 (rows
/// `new.strides.0` apart), the pools get the rotated new keys and the values at their slots, o
/// and lse are the attention of the rotated q. f32 q and o (`opt.act_dtype()`) only. The caller
/// guarantees that `slots[b]` is the pool row `x.table` gives key `lens[b] − 1` (the new one).
pub fn attend<'a>(
    rec: &mut Recorder,
    new: &NewToken<'a>,
    x: &PagedInputs<'a>,
    out: &DecodeOutputs<'a>,
    s: &DecodeShape,
    opt: &DecodeOptions<'a>,
    splits: u32,
) -> Result<()> {
    let Some(code) = decode::rope_code(s.d, opt.dtype, opt.act_dtype()) else {
        let why = format!("q of {:?} over pools of {:?}: the fused rope takes f32 q", opt.act_dtype(), opt.dtype);
        return Err(fail("attention/decode_rope", why));
    };
    let (d, r) = (u64::from(s.d), u64::from(new.rotary_dim));
    let pool = u64::from(s.num_blocks) * u64::from(s.block_size);
    if s.tq != 1 || s.dv != s.d || s.v_row != s.d || r % 2 != 0 || r > d || u64::from(new.pool_rows) > pool {
        let why = format!("{s:?} with rotary dim {r}, {} pool rows: Tq 1, Dv = D, even R <= D", new.pool_rows);
        return Err(fail(code.name, why));
    }
    let tokens = u64::from(s.batch);
    if tokens == 0 {
        // The error decode's own check gives, before the rows' spans are sized from B - 1.
        return Err(fail(code.name, format!("empty shape {s:?}")));
    }
    let (q_row, kv_row) = (u64::from(s.hq) * d, u64::from(s.hkv) * d);
    let ((q_stride, kv_stride), (q_span, kv_span)) = strided_rows(code.name, new.strides, tokens, (q_row, kv_row))?;
    check_len(code.name, "q [B, Hq, D]", &x.q, q_span, 4)?;
    check_len(code.name, "k new [B, Hkv, D]", &new.k, kv_span, 4)?;
    check_len(code.name, "v new [B, Hkv, D]", &new.v, kv_span, 4)?;
    check_len(code.name, "pos [B]", &new.pos, tokens, 4)?;
    check_len(code.name, "slots [B]", &new.slots, tokens, 4)?;
    check_len(code.name, "inv_freq [R/2]", &new.inv_freq, r / 2, 4)?;
    let interleaved = u32::from(new.layout == RopeLayout::Interleaved);
    let (rot_dim, mscale, pool_rows) = (new.rotary_dim, new.mscale, new.pool_rows);
    let push = Box::new(move |base| AttentionDecodePushRope {
        base,
        rot_dim,
        interleaved,
        mscale,
        pool_rows,
        q_stride: q_stride as u32,
        kv_stride: kv_stride as u32,
    });
    let args = vec![read(new.k), read(new.v), read(new.pos), read(new.slots), read(new.inv_freq)];
    let extra = Extra { code, args, push };
    decode::forward_with(rec, x, out, s, opt, (splits, decode::TILE), Some(extra))
}
