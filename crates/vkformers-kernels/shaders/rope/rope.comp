#version 460
#include "common.glsl"
#include "dtype.glsl"
#ifdef OUT16
#include "cast/twin.glsl"
#endif
// Rotary position embedding, in place (out == x) or out of place, forward or backward.
//   x, out [B, T, H, Dh] contiguous (rows = B*T*H of Dh), pos [B, T] int32, inv_freq [R/2] f32,
//   R = rotary dim (even, <= Dh); dims R..Dh pass through unchanged (partial rotary).
// For pair i < R/2 of a row at (b, t): theta = float(pos[b, t]) * inv_freq[i] (an f32 product,
// as Hugging Face computes it), c = mscale cos(theta), s = sign * mscale sin(theta), and
//   (u, v) -> (u c - v s, v c + u s)
// where (u, v) = (x[i], x[i + R/2]) (half-split: Llama, NeoX) or (x[2i], x[2i+1])
// (interleaved: GPT-J, Cohere). sign = +1 is the forward; sign = -1 rotates by -theta, the
// transpose, i.e. the backward dx from dy. Each invocation owns one pair (so in place is safe)
// or, when copy_tail != 0, one pass-through element.
// x and out are in the variant's storage type (f32, f16, bf16); the rotation is f32 math.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
// variant: twin_f32 OUT16
// variant: twin_in16 OUT16 IN16
// `twin_f32`: out (f32) is also written to out16 in f16/bf16 (cast/twin.glsl), the copy the
// 16-bit attention or product reads under autocast; out of place only.
// `twin_in16`: the same with x read in the twin's 16-bit type (widened exactly): the backward
// of a 16-bit dy (attention's dq / dk under autocast) into an f32 dx and its 16-bit twin.
// The twin variants read x and write out (and out16) as token rows of `x_stride` and
// `out_stride` elements (heads * head_dim: contiguous): training reads q and k in place from the
// packed q/k/v product's output [tokens, nq + nk + nv] and writes dq, dk into their columns of
// its packed gradient (the views start at the part's first column).
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer I32In { int v[]; };
layout(push_constant) uniform Push {
    DBuf x;  // read through DIn: written too when in place (out_ == x)
    DBuf out_;
    I32In pos;
    F32In inv_freq;
#ifdef OUT16
    TwinBuf out16;
#endif
    uint rows;
    uint heads;
    uint head_dim;
    uint rot_dim;
    uint interleaved;
    uint copy_tail;
    float mscale;
    float sign;
#ifdef OUT16
    uint twin;
    uint x_stride;
    uint out_stride;
#endif
} pc;

// First element of head row `row` (token row / heads) in x and in out.
#ifdef OUT16
uint x_base(uint row) { return (row / pc.heads) * pc.x_stride + (row % pc.heads) * pc.head_dim; }
uint out_base(uint row) { return (row / pc.heads) * pc.out_stride + (row % pc.heads) * pc.head_dim; }
#else
uint x_base(uint row) { return row * pc.head_dim; }
uint out_base(uint row) { return row * pc.head_dim; }
#endif

// out[i] = v (and its 16-bit twin).
// twin bit 2: out16 only (training, when 16-bit attention is out's only reader).
void put(uint i, float v) {
#ifdef OUT16
    if ((pc.twin & 4u) == 0u) st(pc.out_, i, v);
    st_twin(pc.out16, i, v, pc.twin & 3u);
#else
    st(pc.out_, i, v);
#endif
}

#include "rope/sincos.glsl"

#ifdef IN16
#define LDX(i) ld_twin(TwinIn(uint64_t(pc.x)), i, pc.twin & 3u)
#else
#define LDX(i) ld(x, i)
#endif

void main() {
    DIn x = DIn(pc.x);  // same address, read-only view
    uint half_r = pc.rot_dim / 2;
    uint units = half_r + (pc.copy_tail != 0u ? pc.head_dim - pc.rot_dim : 0u);
    FOR_EACH_INDEX(i, pc.rows * units) {
        uint row = i / units;
        uint u = i - row * units;
        uint xb = x_base(row);
        uint ob = out_base(row);
        if (u >= half_r) {
            uint d = pc.rot_dim + (u - half_r);
            put(ob + d, LDX(xb + d));
            continue;
        }
        precise float theta = float(pc.pos.v[row / pc.heads]) * pc.inv_freq.v[u];
        float sn, cs;
        sincos_f32(theta, sn, cs);
        cs *= pc.mscale;
        sn *= pc.mscale * pc.sign;
        uint ia = pc.interleaved != 0u ? 2 * u : u;
        uint ib = pc.interleaved != 0u ? ia + 1 : ia + half_r;
        float a = LDX(xb + ia);
        float b = LDX(xb + ib);
        put(ob + ia, a * cs - b * sn);
        put(ob + ib, b * cs + a * sn);
    }
}
