#version 460
#include "common.glsl"
#include "moe/moe.glsl"
// Grouped product over experts, one expert matrix per row of A (rows sorted by expert):
//   C[s, c] = sum_j A[s, j] · B_e[c, j]    (trans_b = 1; B [E, cols, inner], nn.Linear layout)
//   C[s, c] = sum_j A[s, j] · B_e[j, c]    (trans_b = 0; B [E, inner, cols])
// with e = slot_expert[s]; A [rows, inner], C [rows, cols] f32. The forward of an expert
// linear (trans_b 1) and its input gradient dA = dC ·_e B_e (trans_b 0). One invocation per
// output element, j ascending (deterministic).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In a;
    F32In b;
    F32Buf c;
    I32In slot_expert;
    uint rows;
    uint inner;
    uint cols;
    uint trans_b;
} pc;

void main() {
    FOR_EACH_INDEX(idx, pc.rows * pc.cols) {
        uint s = idx / pc.cols;
        uint col = idx % pc.cols;
        uint e = uint(pc.slot_expert.v[s]);
        uint mat = e * pc.cols * pc.inner;
        uint arow = s * pc.inner;
        float acc = 0.0;
        if (pc.trans_b != 0) {
            uint brow = mat + col * pc.inner;
            for (uint j = 0; j < pc.inner; j++) {
                acc += pc.a.v[arow + j] * pc.b.v[brow + j];
            }
        } else {
            for (uint j = 0; j < pc.inner; j++) {
                acc += pc.a.v[arow + j] * pc.b.v[mat + j * pc.cols + col];
            }
        }
        pc.c.v[idx] = acc;
    }
}
