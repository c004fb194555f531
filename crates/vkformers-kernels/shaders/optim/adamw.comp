#version 460
#include "common.glsl"
// One AdamW step in place over flat f32 buffers param, grad, exp_avg (m), exp_avg_sq (v) [n],
// in the order of operations of torch.optim.AdamW (single-tensor, non-amsgrad, non-fused):
//   g      = grad[i]                      (variant scaled: g = grad[i] * grad_scale[0])
//   p      = p * decay                    decay     = 1 - lr * wd
//   m      = lerp(m, g, w1)               w1        = 1 - beta1   (torch's lerp_ formula)
//   v      = v * beta2 + omb2 * g * g     omb2      = 1 - beta2   (torch's mul_ + addcmul_)
//   denom  = sqrt(v) / bc2_sqrt + eps     bc2_sqrt  = sqrt(1 - beta2^t)
//   p      = p + neg_step * m / denom     neg_step  = -lr / (1 - beta1^t)  (torch's addcdiv_)
// The host computes decay, w1, omb2, bc2_sqrt and neg_step in f64 (as PyTorch does with Python
// floats) and passes them rounded to f32. `precise` keeps the compiler from fusing into FMAs.
// A negative grad_scale (norm_clip's overflow signal under loss scaling) skips the step: no
// parameter or moment changes, as GradScaler skips optimizer.step().
// `fresh` != 0 (a parameter's first step): the moments are taken as zero instead of read, so
// they need no zero fill first (the same bits: m = 0 + w1 * (g - 0), v = 0 * beta2 + ...); a
// skipped fresh step writes them zero.
// Variants `*_copy_bf16` / `*_copy_f16` (mixed precision) also store the updated p, rounded as
// cast/cast.comp rounds it, into `copy [n]`: the 16-bit weight the next forward's products
// read, so no separate cast of every weight runs after the step.
// variant: plain
// variant: scaled GRAD_SCALE
// variant: plain_copy_bf16 DT_BF16 COPY
// variant: scaled_copy_bf16 GRAD_SCALE DT_BF16 COPY
// variant: plain_copy_f16 DT_F16 COPY
// variant: scaled_copy_f16 GRAD_SCALE DT_F16 COPY
#include "dtype.glsl"
#include "optim/adamw_math.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32Buf param;
    F32In grad;
    F32Buf exp_avg;
    F32Buf exp_avg_sq;
#ifdef GRAD_SCALE
    F32In grad_scale;
#endif
#ifdef COPY
    DBuf copy;
#endif
    uint n;
    float decay;
    float w1;
    float beta2;
    float omb2;
    float bc2_sqrt;
    float neg_step;
    float eps;
    uint fresh;
} pc;

void main() {
#ifdef GRAD_SCALE
    float gs = pc.grad_scale.v[0];
    if (gs < 0.0) {
        if (pc.fresh != 0u) {
            FOR_EACH_INDEX(i, pc.n) {
                pc.exp_avg.v[i] = 0.0;
                pc.exp_avg_sq.v[i] = 0.0;
            }
        }
        return;
    }
#endif
    FOR_EACH_INDEX(i, pc.n) {
        precise float g = pc.grad.v[i];
#ifdef GRAD_SCALE
        g = g * gs;
#endif
        float p = pc.param.v[i];
        float m = pc.fresh != 0u ? 0.0 : pc.exp_avg.v[i];
        float v = pc.fresh != 0u ? 0.0 : pc.exp_avg_sq.v[i];
        adamw_update(g, p, m, v, pc.decay, pc.w1, pc.beta2, pc.omb2, pc.bc2_sqrt, pc.neg_step, pc.eps);
        pc.param.v[i] = p;
#ifdef COPY
        st(pc.copy, i, p);
#endif
        pc.exp_avg.v[i] = m;
        pc.exp_avg_sq.v[i] = v;
    }
}
