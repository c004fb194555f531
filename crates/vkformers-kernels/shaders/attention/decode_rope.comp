#version 460
#include "common.glsl"
#include "dtype.glsl"
// Rotary embedding of a decode step's queries and keys in one dispatch (two with rope/rope.comp):
//   q [N, Hq, D] -> qo, k [N, Hkv, D] -> ko (out of place), pos [N] int32 (N = B * T tokens),
//   inv_freq [R/2] f32, R = rotary dim (even, <= D); dims R..D are copied.
// The math is rope.comp's forward, expression for expression (theta = float(pos) * inv_freq[i]
// as an f32 product, the same sincos_f32, c = mscale cos, s = mscale sin,
// (u, v) -> (u c - v s, v c + u s), half-split or interleaved pairs), so q and k come out bit
// for bit as two rope.comp calls give them. Invocation i owns one pair or one copied element of
// row r = i / units of the N * (Hq + Hkv) rows, token r / (Hq + Hkv): head h < Hq is a q row,
// the rest k rows.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer I32In { int v[]; };
layout(push_constant) uniform Push {
    DIn q;
    DIn k;
    DBuf qo;
    DBuf ko;
    I32In pos;
    F32In inv_freq;
    uint tokens;
    uint hq;
    uint hkv;
    uint head_dim;
    uint rot_dim;
    uint interleaved;
    float mscale;
} pc;

// rope.comp's sincos_f32 (the same constants and order, so the same bits).
#include "rope/sincos.glsl"

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
        DIn x = is_q ? pc.q : pc.k;
        DBuf o = is_q ? pc.qo : pc.ko;
        uint base = (is_q ? tok * pc.hq + h : tok * pc.hkv + (h - pc.hq)) * pc.head_dim;
        if (u >= half_r) {
            uint d = pc.rot_dim + (u - half_r);
            st(o, base + d, ld(x, base + d));
            continue;
        }
        precise float theta = float(pc.pos.v[tok]) * pc.inv_freq.v[u];
        float sn, cs;
        sincos_f32(theta, sn, cs);
        cs *= pc.mscale;
        sn *= pc.mscale; // rope.comp: mscale * sign, sign = 1 forward
        uint ia = pc.interleaved != 0u ? base + 2 * u : base + u;
        uint ib = pc.interleaved != 0u ? ia + 1 : ia + half_r;
        float a = ld(x, ia);
        float b = ld(x, ib);
        st(o, ia, a * cs - b * sn);
        st(o, ib, b * cs + a * sn);
    }
}
