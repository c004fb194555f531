#version 460
#include "common.glsl"
#include "dtype.glsl"
// A decode step's rotary embedding and KV-cache store in one dispatch (instead of
// decode_rope.comp then decode_store.comp, with a barrier between):
//   q [N, Hq, D] -> qo = rope(q) (f32, out of place);
//   k [N, Hkv, D] -> rope(k) and v [N, Hkv, D] -> written to pool row slots[n] of
//   k_pool, v_pool [NB * BS, Hkv, D] (pools' type, rounded as decode_store.comp rounds;
//   slots[n] < 0 or past the pool: not stored, as decode_store.comp).
// pos [N] int32, inv_freq [R/2] f32, R = rotary dim (even, <= D); dims R..D are copied.
// The rotation is decode_rope.comp's expression for expression (theta = float(pos) * inv_freq[i],
// sincos_f32, c = mscale cos, s = mscale sin, (u, v) -> (u c - v s, v c + u s)), so q and the
// stored keys come out bit for bit as the two dispatches give them.
// q, k, v rows may be strided (q_stride, kv_stride: elements from one token's row to the
// next): the packed q/k/v product's rows [N, (Hq + 2 Hkv) D] read in place through three
// pointers at column offsets 0, Hq D and (Hq + Hkv) D, instead of a split into three tensors
// first; dense tensors have q_stride = Hq D and kv_stride = Hkv D. qo is always dense.
// Invocation i owns one pair or one copied element of row r = i / units of the N * (Hq + Hkv)
// rows, token r / (Hq + Hkv): head h < Hq is a q row, the rest k rows, whose invocation also
// copies the v elements of its k elements.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(local_size_x = 256) in;
#include "attention/attention.glsl"
layout(push_constant) uniform Push {
    F32In q;
    F32In k;
    F32In v;
    F32Buf qo;
    DBuf k_pool;
    DBuf v_pool;
    I32In pos;    // [N]
    I32In slots;  // [N]
    F32In inv_freq;
    uint tokens;
    uint hq;
    uint hkv;
    uint head_dim;
    uint rot_dim;
    uint interleaved;
    float mscale;
    uint pool_rows;  // NB * BS
    uint q_stride;   // elements between tokens' rows of q
    uint kv_stride;  // ... of k and of v
} pc;

#include "rope/sincos.glsl"

// Element d of the key head at element `kv_base` of k and v (head hk of its token): the
// rotated key x and its value into the pools at the token's slot, when it has one.
void store_kv(int slot, uint kv_base, uint hk, uint d, float x) {
    if (slot >= 0 && uint(slot) < pc.pool_rows) {
        uint dst = (uint(slot) * pc.hkv + hk) * pc.head_dim + d;
        st(pc.k_pool, dst, x);
        st(pc.v_pool, dst, pc.v.v[kv_base + d]);
    }
}

void main() {
    uint half_r = pc.rot_dim / 2;
    uint units = half_r + pc.head_dim - pc.rot_dim;
    uint heads = pc.hq + pc.hkv;
    FOR_EACH_INDEX(i, pc.tokens * heads * units) {
        uint row = i / units;
        uint u = i - row * units;
        uint tok = row / heads;
        uint h = row - tok * heads;
        bool is_q = h < pc.hq;
        uint hk = h - pc.hq; // a k row's head (unused for q rows)
        // First element of the head row in q (or in k and v), and of the q row in qo [N·Hq, D];
        // element offsets within a head row below.
        uint base = is_q ? tok * pc.q_stride + h * pc.head_dim : tok * pc.kv_stride + hk * pc.head_dim;
        uint obase = (tok * pc.hq + h) * pc.head_dim;
        F32In x = is_q ? pc.q : pc.k;
        int slot = is_q ? -1 : pc.slots.v[tok];
        if (u >= half_r) {
            uint d = pc.rot_dim + (u - half_r);
            float c = x.v[base + d];
            if (is_q) {
                pc.qo.v[obase + d] = c;
            } else {
                store_kv(slot, base, hk, d, c);
            }
            continue;
        }
        precise float theta = float(pc.pos.v[tok]) * pc.inv_freq.v[u];
        float sn, cs;
        sincos_f32(theta, sn, cs);
        cs *= pc.mscale;
        sn *= pc.mscale;
        uint da = pc.interleaved != 0u ? 2 * u : u;
        uint db = pc.interleaved != 0u ? da + 1 : da + half_r;
        float a = x.v[base + da];
        float b = x.v[base + db];
        float ra = a * cs - b * sn;
        float rb = b * cs + a * sn;
        if (is_q) {
            pc.qo.v[obase + da] = ra;
            pc.qo.v[obase + db] = rb;
        } else {
            store_kv(slot, base, hk, da, ra);
            store_kv(slot, base, hk, db, rb);
        }
    }
}
