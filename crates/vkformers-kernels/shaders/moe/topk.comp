#version 460
#include "common.glsl"
#include "moe/moe.glsl"
// Router top-k: for each token row r of probs [rows, E], the k largest entries in descending
// order (ties: the lower expert index first; NaN is never chosen before a number):
//   ids [rows, k]   int32 expert index of the j-th choice
//   flat [rows, k]  int32 r * E + ids[r, j] (the element of probs it reads, for a gather)
//   sel [rows, E]   f32 1 where an expert is chosen, else 0 (load-balancing counts)
// One invocation per row: E is small (8..256) and k smaller.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In probs;
    I32Buf ids;
    I32Buf flat_ids;
    F32Buf sel;
    uint rows;
    uint experts;
    uint k;
} pc;

void main() {
    FOR_EACH_INDEX(r, pc.rows) {
        uint base = r * pc.experts;
        for (uint e = 0; e < pc.experts; e++) {
            pc.sel.v[base + e] = 0.0;
        }
        for (uint j = 0; j < pc.k; j++) {
            int best = -1;
            float bv = 0.0;
            for (uint e = 0; e < pc.experts; e++) {
                float p = pc.probs.v[base + e];
                bool open_ = pc.sel.v[base + e] == 0.0;
                if (open_ && (best < 0 || p > bv || (isnan(bv) && !isnan(p)))) {
                    best = int(e);
                    bv = p;
                }
            }
            pc.sel.v[base + uint(best)] = 1.0;
            pc.ids.v[r * pc.k + j] = best;
            pc.flat_ids.v[r * pc.k + j] = int(base) + best;
        }
    }
}
