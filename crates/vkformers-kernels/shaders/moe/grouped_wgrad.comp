#version 460
#include "common.glsl"
#include "moe/moe.glsl"
// Weight gradient of a grouped product: per expert e, over its contiguous slots
// s in [offsets[e], offsets[e + 1]):
//   D[e, i, j] = sum_s L[s, i] · R[s, j]          L [S, li], R [S, rj], D [E, li, rj] f32
// (dB_e = dC_eᵀ · A_e for B in the nn.Linear layout: L = dC, R = A). D is overwritten; an
// expert with no slots gets zeros. A GEMM per expert with op(A) = L_eᵀ [li, count_e] and
// op(B) = R_e [count_e, rj], both contiguous along their output dimension; the tile walks
// the expert's slots in steps of BK, ascending (deterministic).
// Grid: x = ceil(rj / BN), y = ceil(li / BM), z = experts (grid-stride).
//
// variant: f32 BM=64 BN=64 BK=16 TM=4 TN=4
// variant: f16 BM=64 BN=64 BK=16 TM=4 TN=4 A_F16 B_F16
// variant: f32_f16 BM=64 BN=64 BK=16 TM=4 TN=4 B_F16
// variant: f32_bf16 BM=64 BN=64 BK=16 TM=4 TN=4 B_BF16
// variant: f16_f32 BM=64 BN=64 BK=16 TM=4 TN=4 A_F16
// variant: bf16_f32 BM=64 BN=64 BK=16 TM=4 TN=4 A_BF16
// variant: bf16 BM=64 BN=64 BK=16 TM=4 TN=4 A_BF16 B_BF16
// variant: f32_128 BM=128 BN=128 BK=8 TM=8 TN=8
// variant: bf16_128 BM=128 BN=128 BK=8 TM=8 TN=8 A_BF16 B_BF16
#include "moe/grouped_tile.glsl"

layout(push_constant) uniform Push {
    AIn l;
    BIn r;
    F32Buf d;
    I32In offsets;
    uint experts;
    uint li;
    uint rj;
} pc;

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tx = tid % TX;
    const uint ty = tid / TX;
    const uint m0 = gl_WorkGroupID.y * BM;
    const uint n0 = gl_WorkGroupID.x * BN;
    for (uint e = gl_WorkGroupID.z; e < pc.experts; e += gl_NumWorkGroups.z) {
        const uint lo = uint(pc.offsets.v[e]);
        const uint hi = uint(pc.offsets.v[e + 1]);
        zero_acc();
        for (uint s0 = lo; s0 < hi; s0 += BK) {
            [[unroll]] for (uint i = 0; i < LA; i++) {
                uvec2 p = tile_pos(tid + i * NT, BM, false);
                uint m = m0 + p.x, s = s0 + p.y;
                As[p.y][p.x] = (m < pc.li && s < hi) ? lda_(pc.l, s * pc.li + m) : 0.0;
            }
            [[unroll]] for (uint i = 0; i < LB; i++) {
                uvec2 p = tile_pos(tid + i * NT, BN, false);
                uint n = n0 + p.x, s = s0 + p.y;
                Bs[p.y][p.x] = (n < pc.rj && s < hi) ? ldb_(pc.r, s * pc.rj + n) : 0.0;
            }
            barrier();
            mma_step(tx, ty);
            barrier();
        }
        F32Buf D = F32Buf(uint64_t(pc.d) + uint64_t(e) * uint64_t(pc.li) * uint64_t(pc.rj) * 4ul);
        [[unroll]] for (uint i = 0; i < TM; i++) {
            const uint m = m0 + ty + i * TY;
            if (m >= pc.li) continue;
            [[unroll]] for (uint j = 0; j < TN; j++) {
                const uint n = n0 + tx + j * TX;
                if (n < pc.rj) D.v[m * pc.rj + n] = acc[i][j];
            }
        }
    }
}
