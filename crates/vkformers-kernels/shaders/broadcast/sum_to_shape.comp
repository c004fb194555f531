#version 460
#include "common.glsl"
#include "dtype.glsl"
#define WG 256
layout(local_size_x = WG) in;
#include "reduce/tree.glsl"
// Gradient of a broadcast: out[j] = sum over the broadcast dims of g, where g [o0, o1, o2, o3]
// is contiguous and out has shape t [t0, t1, t2, t3] with t_d in {1, o_d} (m = prod t elements).
// Reduced extents r_d = o_d / t_d (o_d where t_d = 1, else 1), k = prod r. The element of g
// summed for (j, q) has coordinates c_d = j_d + q_d (one of them is 0 in every dim).
// Variant tree: one workgroup per output element (group-stride loop), a fixed-order tree sum
// over q. Variant serial (the launcher's choice for short sums or many outputs): one thread
// per output element, summing q = 0, 1, ..., k-1 in order. Both deterministic.
// g is in the storage type (variants `_f16`, `_bf16`; default f32); sums are f32; out is in the
// storage type too, or f32 with OUT_F32 (`_f16_to_f32`, `_bf16_to_f32`: the gradient of an f32
// operand such as a bias, from a 16-bit output gradient).
// variant: tree
// variant: serial SERIAL
// variant: tree_f16 DT_F16
// variant: tree_bf16 DT_BF16
// variant: serial_f16 SERIAL DT_F16
// variant: serial_bf16 SERIAL DT_BF16
// variant: tree_f16_to_f32 DT_F16 OUT_F32
// variant: serial_f16_to_f32 SERIAL DT_F16 OUT_F32
// variant: tree_bf16_to_f32 DT_BF16 OUT_F32
// variant: serial_bf16_to_f32 SERIAL DT_BF16 OUT_F32
layout(push_constant) uniform Push {
    DIn g;
#if defined(OUT_F32)
    F32Buf out_;
#else
    DBuf out_;
#endif
    uint m; uint k;
    uint o1; uint o2; uint o3;
    uint t1; uint t2; uint t3;
    uint r1; uint r2; uint r3;
} pc;
#if defined(OUT_F32)
void store(uint j, float s) { pc.out_.v[j] = s; }
#else
void store(uint j, float s) { st(pc.out_, j, s); }
#endif
uint offset_of(uint j0, uint j1, uint j2, uint j3, uint q) {
    uint q3 = q % pc.r3;
    uint w = q / pc.r3;
    uint q2 = w % pc.r2;
    w /= pc.r2;
    uint q1 = w % pc.r1;
    uint q0 = w / pc.r1;
    return (((j0 + q0) * pc.o1 + (j1 + q1)) * pc.o2 + (j2 + q2)) * pc.o3 + (j3 + q3);
}
#if defined(SERIAL)
void main() {
    FOR_EACH_INDEX(j, pc.m) {
        uint j3 = j % pc.t3;
        uint u = j / pc.t3;
        uint j2 = u % pc.t2;
        u /= pc.t2;
        uint j1 = u % pc.t1;
        uint j0 = u / pc.t1;
        float acc = 0.0;
        for (uint q = 0; q < pc.k; q++) {
            acc += ld(pc.g, offset_of(j0, j1, j2, j3, q));
        }
        store(j, acc);
    }
}
#else
void main() {
    for (uint j = gl_WorkGroupID.x; j < pc.m; j += gl_NumWorkGroups.x) {
        uint j3 = j % pc.t3;
        uint u = j / pc.t3;
        uint j2 = u % pc.t2;
        u /= pc.t2;
        uint j1 = u % pc.t1;
        uint j0 = u / pc.t1;
        float acc = 0.0;
        for (uint q = gl_LocalInvocationID.x; q < pc.k; q += WG) {
            acc += ld(pc.g, offset_of(j0, j1, j2, j3, q));
        }
        float s = wg_sum(acc);
        if (gl_LocalInvocationID.x == 0) {
            store(j, s);
        }
    }
}
#endif
