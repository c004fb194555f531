#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "embedding/embedding.glsl"
// Embedding backward, step 4: dW[id, d] += sum of dout[n, d] over the positions n of id, in
// increasing n (the order step 3 sorted them in):     dout [N, D], dW [V, D]
// Invocation (s, d) works only when slot s is the first of its id's run in perm, so each
// touched row of dW is written once; rows of ids absent from the batch are not touched.
// O(N D + V) work overall, no float atomics, deterministic.
// The row `padding_idx` (0xFFFFFFFF: none) is never written, as torch's nn.Embedding(padding_idx)
// leaves that row's gradient zero: its positions still sort, their sum is just not added.
// dout is in the variant's storage type (f32, f16, bf16); the sums and dW are f32.
// Variants `write_*` (a fresh gradient) instead write every element of dW once, invocation
// (id, d) over V x D: its id's sum, or 0 for absent ids and `padding_idx`; the same bits as a
// zero fill followed by the accumulation (0 + acc == acc: acc, a sum from +0, is never -0),
// without the fill's pass over dW.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
// variant: write_f32 WRITE
// variant: write_f16 DT_F16 WRITE
// variant: write_bf16 DT_BF16 WRITE
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    I32In ids;
    U32In offsets;
    U32In perm;
    DIn dout;
    F32Buf dw;
    uint n_tokens;
    uint vocab;
    uint D;
    uint padding_idx;
} pc;

// Sum of dout[perm[j] * D + d] over the slots j of one id, in increasing j.
float id_sum(uint start, uint end, uint d) {
    float acc = 0.0;
    for (uint j = start; j < end; j++) {
        acc += ld(pc.dout, pc.perm.v[j] * pc.D + d);
    }
    return acc;
}

#ifdef WRITE
void main() {
    FOR_EACH_INDEX(e, pc.vocab * pc.D) {
        uint id = e / pc.D;
        uint d = e - id * pc.D;
        float acc = 0.0;
        if (id != pc.padding_idx) {
            acc = id_sum(pc.offsets.v[id], pc.offsets.v[id + 1], d);
        }
        pc.dw.v[e] = acc;
    }
}
#else
void main() {
    uint total = pc.offsets.v[pc.vocab];
    FOR_EACH_INDEX(e, pc.n_tokens * pc.D) {
        uint s = e / pc.D;
        if (s >= total) {
            break;
        }
        uint d = e - s * pc.D;
        uint id = uint(pc.ids.v[pc.perm.v[s]]);
        uint start = pc.offsets.v[id];
        if (s == start && id != pc.padding_idx) {
            pc.dw.v[id * pc.D + d] += id_sum(start, pc.offsets.v[id + 1], d);
        }
    }
}
#endif
