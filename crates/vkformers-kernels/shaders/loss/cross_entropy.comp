#version 460
#include "common.glsl"
#include "dtype.glsl"
#define LOSS_STORAGE
#include "loss/loss.glsl"
// Cross-entropy over logits [n, vocab] with int32 labels [n] (ignored rows: see counted()).
// Per row r (one workgroup per row, grid-stride over rows):
//   lse[r]  = log sum_j exp(logits[r, j])            (online max / sum-exp over the row)
//   loss[r] = lse[r] - logits[r, labels[r]]          (0 for ignored rows)
// Variant fwd_bwd also writes, in the same pass (the row is read twice, no global sync):
//   dlogits[r, j] = (exp(logits[r, j] - lse[r]) - [j == labels[r]]) * g[0] / count[0]
// for counted rows and 0 for ignored rows, or everywhere when count[0] == 0 (PyTorch: NaN).
// count [1] comes from loss/count, g [1] is the upstream gradient of the mean loss.
// logits and dlogits are in the variant's storage type (fwd, fwd_bwd: f32; _f16, _bf16); the
// math, lse, loss, count and g are f32.
// variant: fwd
// variant: fwd_bwd DLOGITS
// variant: fwd_f16 DT_F16
// variant: fwd_bf16 DT_BF16
// variant: fwd_bwd_f16 DLOGITS DT_F16
// variant: fwd_bwd_bf16 DLOGITS DT_BF16
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    DIn logits;
    I32In labels;
    F32Buf loss;
    F32Buf lse;
#ifdef DLOGITS
    F32In count;
    F32In g;
    DBuf dlogits;
#endif
    uint n;
    uint vocab;
} pc;

shared float sh_m[256];
shared float sh_s[256];

// (m, s) represents s * exp(m); merges (m2, s2) into it. m == -inf means "empty".
void merge(inout float m, inout float s, float m2, float s2) {
    if (m2 == NEG_INF) return;
    if (m == NEG_INF) { m = m2; s = s2; return; }
    float mm = max(m, m2);
    s = s * exp(m - mm) + s2 * exp(m2 - mm);
    m = mm;
}

void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint row = gl_WorkGroupID.x; row < pc.n; row += gl_NumWorkGroups.x) {
        DIn x = d_in_at(pc.logits, uint64_t(row) * pc.vocab);
        float m = NEG_INF;
        float s = 0.0;
        for (uint j = t; j < pc.vocab; j += 256) {
            float v = ld(x, j);
            if (v > m) {
                s = s * exp(m - v) + 1.0;
                m = v;
            } else if (m != NEG_INF) {
                s += exp(v - m);
            }
        }
        sh_m[t] = m;
        sh_s[t] = s;
        barrier();
        for (uint h = 128; h > 0; h >>= 1) {
            if (t < h) {
                float mm = sh_m[t], ss = sh_s[t];
                merge(mm, ss, sh_m[t + h], sh_s[t + h]);
                sh_m[t] = mm;
                sh_s[t] = ss;
            }
            barrier();
        }
        float lse = sh_m[0] + log(sh_s[0]);
        int label = pc.labels.v[row];
        bool use = counted(label, pc.vocab);
        if (t == 0) {
            pc.lse.v[row] = lse;
            pc.loss.v[row] = use ? lse - ld(x, uint(label)) : 0.0;
        }
#ifdef DLOGITS
        float cnt = pc.count.v[0];
        float scale = (use && cnt > 0.0) ? pc.g.v[0] / cnt : 0.0;
        DBuf d = d_buf_at(pc.dlogits, uint64_t(row) * pc.vocab);
        for (uint j = t; j < pc.vocab; j += 256) {
            float onehot = (int(j) == label) ? 1.0 : 0.0;
            st(d, j, scale == 0.0 ? 0.0 : (exp(ld(x, j) - lse) - onehot) * scale);
        }
#endif
        barrier(); // the next row reuses sh_m / sh_s
    }
}
