#version 460
// grouped_rows.comp on NVIDIA cooperative matrix 2 (see moe/grouped_cm2.glsl): expert e's rows
// offsets[e] .. offsets[e + 1] of A [rows, inner] times B_e ([cols, inner] when TRANS_B, the
// nn.Linear layout; else [inner, cols]) into C [rows, cols] f32. Same grid and row-tile
// mapping as grouped_rows.comp: x = ceil(cols / BN), y >= ceil(rows / BM) + E row tiles,
// tile t located from the device offsets, tiles past the last expert's exit.
// variant: bf16 ELEM_BF16 BM=64 BN=128 BK=32
// variant: f16 ELEM_F16 BM=64 BN=128 BK=32
// variant: bf16_128 ELEM_BF16 BM=128 BN=128 BK=32
// variant: f16_128 ELEM_F16 BM=128 BN=128 BK=32
#include "moe/grouped_cm2.glsl"

layout(constant_id = 0) const uint TRANS_B = 1;

layout(push_constant) uniform Push {
    EIn a;
    EIn b;
    F32Buf c;
    I32In offsets;
    uint rows;
    uint inner;
    uint cols;
    uint experts;
    uint row_tiles;
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
    const uint n0 = gl_WorkGroupID.x * BN;
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
    for (uint t = gl_WorkGroupID.y; t < pc.row_tiles; t += gl_NumWorkGroups.y) {
        const uvec2 loc = locate(t);
        if (loc.x >= pc.experts) return; // uniform: tiles only grow with t
        const uint e = loc.x, s0 = loc.y;
        const uint s1 = uint(pc.offsets.v[e + 1]);
        // Rows past the expert's last slot read as zero.
        CLAMPED la = row_major(s1, pc.inner);
        CLAMPED lb = TRANS_B != 0 ? row_major(pc.cols, pc.inner) : row_major(pc.inner, pc.cols);
        const uint b_off = e * pc.cols * pc.inner;
        ACC acc = ACC(0.0);
        [[dont_unroll]] for (uint k0 = 0; k0 < pc.inner; k0 += BK) {
            MAT_A ma;
            MAT_B mb;
            coopMatLoadTensorNV(ma, pc.a.v, 0, sliceTensorLayoutNV(la, s0, BM, k0, BK));
            if (TRANS_B != 0)
                coopMatLoadTensorNV(mb, pc.b.v, b_off, sliceTensorLayoutNV(lb, n0, BN, k0, BK), transposed);
            else
                coopMatLoadTensorNV(mb, pc.b.v, b_off, sliceTensorLayoutNV(lb, k0, BK, n0, BN));
            acc = coopMatMulAdd(ma, mb, acc);
        }
        // Stores past the expert's last slot (or the last column) are dropped by the clamp.
        coopMatStoreTensorNV(acc, pc.c.v, 0, sliceTensorLayoutNV(row_major(s1, pc.cols), s0, BM, n0, BN));
    }
}
