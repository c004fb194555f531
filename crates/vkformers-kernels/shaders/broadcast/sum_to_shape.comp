#version 460
#include "common.glsl"
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
// variant: tree
// variant: serial SERIAL
layout(push_constant) uniform Push {
    F32In g; F32Buf out_;
    uint m; uint k;
    uint o1; uint o2; uint o3;
    uint t1; uint t2; uint t3;
    uint r1; uint r2; uint r3;
} pc;
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
            acc += pc.g.v[offset_of(j0, j1, j2, j3, q)];
        }
        pc.out_.v[j] = acc;
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
            acc += pc.g.v[offset_of(j0, j1, j2, j3, q)];
        }
        float s = wg_sum(acc);
        if (gl_LocalInvocationID.x == 0) {
            pc.out_.v[j] = s;
        }
    }
}
#endif
