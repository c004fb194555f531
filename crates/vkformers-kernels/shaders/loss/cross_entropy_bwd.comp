#version 460
#include "common.glsl"
#include "dtype.glsl"
#define LOSS_STORAGE
#include "loss/loss.glsl"
#ifdef OUT16
#include "cast/twin.glsl"
#endif
// Backward of the mean cross-entropy from the saved row log-sum-exp:
//   dlogits[r, j] = (exp(logits[r, j] - lse[r]) - [j == labels[r]]) * g[0] / count[0]
// for counted rows; 0 for ignored rows and everywhere when count[0] == 0.
// logits, dlogits [n, vocab]; labels [n] int32; lse [n]; count [1]; g [1].
// Grid: x strides over columns, y over rows.
// logits and dlogits are in the variant's storage type; the math, lse, count and g are f32.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
// variant: twin_f32 OUT16
// `twin_f32` (training under autocast): f32 logits, dlogits written only in f16/bf16
// (cast/twin.glsl, `twin` 1 or 2), rounded as cast/cast4 rounds the f32 value: the 16-bit
// gradient the head product's backward reads, with no f32 dlogits and no cast between.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    DIn logits;
    I32In labels;
    F32In lse;
    F32In count;
    F32In g;
#ifdef OUT16
    TwinBuf dlogits;
#else
    DBuf dlogits;
#endif
    uint n;
    uint vocab;
#ifdef OUT16
    uint twin;
#endif
} pc;

void main() {
    float cnt = pc.count.v[0];
    float gs = cnt > 0.0 ? pc.g.v[0] / cnt : 0.0;
    for (uint row = gl_WorkGroupID.y; row < pc.n; row += gl_NumWorkGroups.y) {
        int label = pc.labels.v[row];
        float scale = counted(label, pc.vocab) ? gs : 0.0;
        float l = pc.lse.v[row];
        DIn x = d_in_at(pc.logits, uint64_t(row) * pc.vocab);
#ifdef OUT16
        TwinBuf d = TwinBuf(uint64_t(pc.dlogits) + uint64_t(row) * pc.vocab * 2u);
#else
        DBuf d = d_buf_at(pc.dlogits, uint64_t(row) * pc.vocab);
#endif
        for (uint j = gl_GlobalInvocationID.x; j < pc.vocab; j += gl_NumWorkGroups.x * 256) {
            float onehot = (int(j) == label) ? 1.0 : 0.0;
            float v = scale == 0.0 ? 0.0 : (exp(ld(x, j) - l) - onehot) * scale;
#ifdef OUT16
            st_twin(d, j, v, pc.twin);
#else
            st(d, j, v);
#endif
        }
    }
}
