#version 460
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#define WG 256
#define U 8
layout(local_size_x = WG) in;
// Greedy choice of the next token: for each of `rows` rows of logits [rows * t, v] (row b's
// last column is b t + t - 1), ids[b] = the index of the largest logit, the first one on ties,
// NaN skipped (as `vkformers_generate::argmax` / torch.argmax without NaN); ids[b] = 0xffffffff
// when every logit of the row is NaN (the launcher's caller reports it).
// One workgroup per row (group-stride loop over rows): each thread keeps the best of its strided
// slice (ascending, strict >, so its first index on ties), then a shared-memory tree keeps the
// larger value, or the smaller index on equal values. "No candidate" is index 0xffffffff, so a
// row of -inf still picks its first -inf.
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Out { uint v[]; };
layout(push_constant) uniform Push { F32In logits; U32Out ids; uint rows; uint t; uint v; } pc;

const uint NONE = 0xffffffffu;
shared float best_v[WG];
shared uint best_i[WG];

// Whether candidate (bv, bi) beats (av, ai).
bool beats(float bv, uint bi, float av, uint ai) {
    if (bi == NONE) return false;
    if (ai == NONE) return true;
    return bv > av || (bv == av && bi < ai);
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        uint base = (r * pc.t + pc.t - 1) * pc.v; // the launcher checks rows t v < 2^32
        float mv = 0.0;
        uint mi = NONE;
        // The thread's slice j = tid, tid + WG, ... in groups of U whose loads are all issued
        // before any is compared (a batch-1 step's one workgroup is bound by load latency, not
        // by the compares), then compared in ascending j as before.
        for (uint j0 = tid; j0 < pc.v; j0 += WG * U) {
            float x[U];
            [[unroll]] for (uint u = 0; u < U; u++) {
                uint j = j0 + u * WG;
                x[u] = j < pc.v ? pc.logits.v[base + j] : 0.0;
            }
            [[unroll]] for (uint u = 0; u < U; u++) {
                uint j = j0 + u * WG;
                if (j < pc.v && !isnan(x[u]) && (mi == NONE || x[u] > mv)) {
                    mv = x[u];
                    mi = j;
                }
            }
        }
        barrier(); // the previous row's readers of slot 0 are done
        best_v[tid] = mv;
        best_i[tid] = mi;
        barrier();
        for (uint s = WG / 2; s > 0; s >>= 1) {
            if (tid < s && beats(best_v[tid + s], best_i[tid + s], best_v[tid], best_i[tid])) {
                best_v[tid] = best_v[tid + s];
                best_i[tid] = best_i[tid + s];
            }
            barrier();
        }
        if (tid == 0) {
            pc.ids.v[r] = best_i[0];
        }
    }
}
