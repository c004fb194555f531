#version 460
#include "common.glsl"
#include "moe/moe.glsl"
// PhiMoE's sparsemixer router in eval mode (transformers' `sparsemixer(training=False)`, top-2),
// for each token row r of the router logits s [rows, E], eps = router_jitter_noise:
//   i1 = argmax s (ties: the lower expert),  m1 = s[i1]
//   mask[r, 0, e] = -1e30 where (m1 - s[e]) / max(|s[e]|, m1) > 2 eps, else 0
//   i2 = argmax of s without i1,  m2 = s[i2]
//   mask[r, 1, e] = -1e30 at i1 and where (m2 - s[e]) / max(|s[e]|, m2) > 2 eps, else 0
// The weights are then softmax(s + mask[r, j])[i_j] (transformers' -inf: exp gives exactly 0
// either way), so a gather of the [rows·2, E] softmax at
//   flat [rows, 2] = (r·2 + j)·E + i_j;   ids [rows, 2] = i_j;   sel [rows, E] 1 at i1, i2.
// One invocation per row: E is small.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In scores;
    F32Buf mask;
    I32Buf ids;
    I32Buf flat_ids;
    F32Buf sel;
    uint rows;
    uint experts;
    float eps;
} pc;

const float OFF = -1e30;

// The largest entry of row `base` other than `skip` (ties: the lower index; NaN never first).
int best_of(uint base, int skip) {
    int best = -1;
    float bv = 0.0;
    for (uint e = 0; e < pc.experts; e++) {
        float v = pc.scores.v[base + e];
        if (int(e) != skip && (best < 0 || v > bv || (isnan(bv) && !isnan(v)))) {
            best = int(e);
            bv = v;
        }
    }
    return best;
}

// Row `r`'s j-th mask: experts too far below the chosen one's score m are off.
void mask_row(uint r, uint j, float m, int skip) {
    uint base = r * pc.experts, out_base = (r * 2 + j) * pc.experts;
    for (uint e = 0; e < pc.experts; e++) {
        float v = pc.scores.v[base + e];
        bool far = (m - v) / max(abs(v), m) > 2.0 * pc.eps;
        pc.mask.v[out_base + e] = (far || int(e) == skip) ? OFF : 0.0;
    }
}

void main() {
    FOR_EACH_INDEX(r, pc.rows) {
        uint base = r * pc.experts;
        int i1 = best_of(base, -1);
        int i2 = best_of(base, i1);
        mask_row(r, 0, pc.scores.v[base + uint(i1)], -1);
        mask_row(r, 1, pc.scores.v[base + uint(i2)], i1);
        for (uint e = 0; e < pc.experts; e++) {
            pc.sel.v[base + e] = (int(e) == i1 || int(e) == i2) ? 1.0 : 0.0;
        }
        pc.ids.v[r * 2] = i1;
        pc.ids.v[r * 2 + 1] = i2;
        pc.flat_ids.v[r * 2] = int(r * 2 * pc.experts) + i1;
        pc.flat_ids.v[r * 2 + 1] = int((r * 2 + 1) * pc.experts) + i2;
    }
}
