#version 460
// grouped_wgrad.comp on NVIDIA cooperative matrix 2 (see moe/grouped_cm2.glsl): per expert e,
// D_e [li, rj] = L_eᵀ · R_e over its slots s in offsets[e] .. offsets[e + 1], L [S, li] and
// R [S, rj] read through layouts bounded at the expert's last slot (L_e loaded transposed),
// slots walked in BK steps from the first; D [E, li, rj] f32 overwritten (zeros for an idle
// expert). Grid: x = ceil(rj / BN), y = ceil(li / BM), z = experts (grid-stride).
// variant: bf16 ELEM_BF16 BM=128 BN=128 BK=32
// variant: f16 ELEM_F16 BM=128 BN=128 BK=32
#include "moe/grouped_cm2.glsl"

layout(push_constant) uniform Push {
    EIn l;
    EIn r;
    F32Buf d;
    I32In offsets;
    uint experts;
    uint li;
    uint rj;
} pc;

void main() {
    const uint m0 = gl_WorkGroupID.y * BM;
    const uint n0 = gl_WorkGroupID.x * BN;
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
    for (uint e = gl_WorkGroupID.z; e < pc.experts; e += gl_NumWorkGroups.z) {
        const uint lo = uint(pc.offsets.v[e]);
        const uint hi = uint(pc.offsets.v[e + 1]);
        CLAMPED ll = row_major(hi, pc.li);
        CLAMPED lr = row_major(hi, pc.rj);
        ACC acc = ACC(0.0);
        [[dont_unroll]] for (uint s0 = lo; s0 < hi; s0 += BK) {
            MAT_A ma;
            MAT_B mb;
            coopMatLoadTensorNV(ma, pc.l.v, 0, sliceTensorLayoutNV(ll, s0, BK, m0, BM), transposed);
            coopMatLoadTensorNV(mb, pc.r.v, 0, sliceTensorLayoutNV(lr, s0, BK, n0, BN));
            acc = coopMatMulAdd(ma, mb, acc);
        }
        const uint d_off = e * pc.li * pc.rj;
        coopMatStoreTensorNV(acc, pc.d.v, d_off, sliceTensorLayoutNV(row_major(pc.li, pc.rj), m0, BM, n0, BN));
    }
}
