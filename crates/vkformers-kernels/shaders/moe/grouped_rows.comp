#version 460
#include "common.glsl"
#include "moe/moe.glsl"
// Grouped product over experts, rows of A sorted by expert (expert e owns rows
// offsets[e] .. offsets[e + 1]):
//   C[s, c] = sum_j A[s, j] · B_e[c, j]    (TRANS_B = 1; B [E, cols, inner], nn.Linear layout)
//   C[s, c] = sum_j A[s, j] · B_e[j, c]    (TRANS_B = 0; B [E, inner, cols])
// A [rows, inner], C [rows, cols] f32. The forward of an expert linear (TRANS_B 1) and its
// input gradient dA = dC ·_e B_e (TRANS_B 0).
//
// Grid: x = ceil(cols / BN) column tiles; y = row tiles, at least ceil(rows / BM) + E (the most
// that sum_e ceil(count_e / BM) can be), walked grid-stride. Row tile t is tile r of expert e
// where t = sum_{e' < e} ceil(count_e' / BM) + r: every workgroup finds its (e, r) from the
// device offsets (a uniform scan of E + 1 values), so there is no host loop and no host read of
// the counts; tiles past the last expert's exit. A tile never mixes two experts.
//
// variant: f32 BM=64 BN=64 BK=16 TM=4 TN=4
// variant: f32_f16 BM=64 BN=64 BK=16 TM=4 TN=4 B_F16
// variant: f32_bf16 BM=64 BN=64 BK=16 TM=4 TN=4 B_BF16
// variant: f16 BM=64 BN=64 BK=16 TM=4 TN=4 A_F16 B_F16
// variant: bf16 BM=64 BN=64 BK=16 TM=4 TN=4 A_BF16 B_BF16
// variant: f32_128 BM=128 BN=128 BK=8 TM=8 TN=8
// variant: f32_bf16_128 BM=128 BN=128 BK=8 TM=8 TN=8 B_BF16
// variant: bf16_128 BM=128 BN=128 BK=8 TM=8 TN=8 A_BF16 B_BF16
#include "moe/grouped_tile.glsl"

layout(constant_id = 0) const uint TRANS_B = 1;

layout(push_constant) uniform Push {
    AIn a;
    BIn b;
    F32Buf c;
    I32In offsets;
    uint rows;
    uint inner;
    uint cols;
    uint experts;
    uint row_tiles; // the bound ceil(rows / BM) + E
} pc;

// Expert e and first slot s0 of row tile t; e == experts when t is past the last tile.
uvec2 locate(uint t) {
    uint base = 0;
    for (uint e = 0; e < pc.experts; e++) {
        int lo = pc.offsets.v[e];
        uint n = uint((pc.offsets.v[e + 1] - lo + BM - 1) / BM);
        if (t < base + n) return uvec2(e, uint(lo) + (t - base) * BM);
        base += n;
    }
    return uvec2(pc.experts, 0);
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tx = tid % TX;
    const uint ty = tid / TX;
    const uint n0 = gl_WorkGroupID.x * BN;
    const bool b_kc = TRANS_B != 0; // B_e contiguous along the inner dimension
    for (uint t = gl_WorkGroupID.y; t < pc.row_tiles; t += gl_NumWorkGroups.y) {
        const uvec2 loc = locate(t);
        if (loc.x >= pc.experts) return; // uniform: tiles only grow with t
        const uint e = loc.x;
        const uint s0 = loc.y;
        const uint s1 = min(s0 + BM, uint(pc.offsets.v[e + 1]));
        BIn B = b_at(pc.b, uint64_t(e) * uint64_t(pc.cols) * uint64_t(pc.inner));
        zero_acc();
        for (uint k0 = 0; k0 < pc.inner; k0 += BK) {
            [[unroll]] for (uint i = 0; i < LA; i++) {
                uvec2 p = tile_pos(tid + i * NT, BM, true);
                uint s = s0 + p.x, k = k0 + p.y;
                As[p.y][p.x] = (s < s1 && k < pc.inner) ? lda_(pc.a, s * pc.inner + k) : 0.0;
            }
            [[unroll]] for (uint i = 0; i < LB; i++) {
                uvec2 p = tile_pos(tid + i * NT, BN, b_kc);
                uint n = n0 + p.x, k = k0 + p.y;
                uint idx = b_kc ? n * pc.inner + k : k * pc.cols + n;
                Bs[p.y][p.x] = (n < pc.cols && k < pc.inner) ? ldb_(B, idx) : 0.0;
            }
            barrier();
            mma_step(tx, ty);
            barrier();
        }
        [[unroll]] for (uint i = 0; i < TM; i++) {
            const uint s = s0 + ty + i * TY;
            if (s >= s1) continue;
            [[unroll]] for (uint j = 0; j < TN; j++) {
                const uint n = n0 + tx + j * TX;
                if (n < pc.cols) pc.c.v[s * pc.cols + n] = acc[i][j];
            }
        }
    }
}
