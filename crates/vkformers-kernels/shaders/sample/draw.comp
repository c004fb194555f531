#version 460
#include "common.glsl"
#define WG 256
layout(local_size_x = WG) in;
#include "reduce/tree.glsl"
// Sampling of the next token on the device, for each of `rows` rows of logits [rows * t, v] (row
// b's last column is b t + t - 1): transformers' processors in `generate`'s order, then a
// multinomial draw, writing ids[b] (0xffffffff when nothing can be drawn: every score -inf/NaN)
// and marking presence[b, ids[b]] = 1 for the next step's repetition penalty.
//   s_j = logit_j; NaN -> -inf
//   repetition penalty (flag 1): s_j = s_j < 0 ? s_j * pen : s_j / pen   where presence[b, j] != 0
//   temperature (flag 2):        s_j = s_j / temp                        (f32, as the host)
//   top-k (flag 4):   keep s_j >= the k-th largest s (ties with it all kept; k already max'ed
//                     with min_tokens_to_keep and clipped to v by the launcher)
//   top-p (flag 8):   p = softmax(kept s); remove the ascending-order prefix whose running sum
//                     is <= 1 - top_p, except the `keep` largest
//   min-p (flag 16):  p = softmax(kept s); remove p_j < min_p * max p, except the `keep` largest
//   greedy (flag 32, instead of the warpers and the draw): the first j of the largest s_j, NaN
//                     logits skipped (as `vkformers_generate::argmax`)
//   draw:             e_j = exp(s_j - max s) over kept j; the first j (index order) whose running
//                     sum of e exceeds u * sum(e), u from Philox4x32-10 (see below).
// Every filter removes the smallest scores, so the kept set is {j : key(s_j) >= low} for an
// order-preserving key of the f32 bit pattern; the top-k (and min_tokens_to_keep) threshold is a
// 4-pass radix select over keys, the top-p one a 32-step binary search over keys, each step a
// workgroup sum (no sort, no scratch buffer). The passes after top-k read a shared-memory list of
// the kept (score, index) pairs in index order when there are at most 2048 of them (after a
// top-k, or when the 2048 largest scores hold the top-p cut), else the row; shared memory ~21 KiB. Ties straddling a top-p or min_tokens_to_keep cut are kept whole
// (the host's stable sort keeps only the higher indices of such a tie; torch's unstable sort is
// arbitrary there). Sums are f32 trees (the host sums in f64), so a choice may differ from the
// host's only when a running sum lands within rounding of a cut or of the draw point.
// Uniform: the host's `uniform_f64(seed, step, row)` takes words (r0, r1) of
// philox4x32_10((lo step, hi step, row, 0), (lo seed, hi seed)) as (r0 2^21 + (r1 >> 11)) 2^-53;
// here u = (r0 >> 8) 2^-24 in f32, within 2^-24 of the host's.
// Counted steps (flag 64): the step is (step_hi:step_lo) + runs[0], a count of runs a replayed
// decode step keeps on the device (`step/emit_ids.comp` adds 1 after each run), so one recording
// draws step s, s + 1, ... run after run.
#include "dropout/philox.glsl"
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Out { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer U32In { uint v[]; };
layout(push_constant) uniform Push {
    F32In logits;
    U32Buf presence;
    U32Out ids;
    U32In runs;  // [1], read with flag 64 (any buffer otherwise)
    uint rows;
    uint t;
    uint v;
    uint flags;
    float penalty;
    float temperature;
    uint top_k;
    float top_p_cut; // f32(1 - top_p)
    float min_p;
    uint keep;
    uint seed_lo;
    uint seed_hi;
    uint step_lo;
    uint step_hi;
} pc;

#define SP pc
// The draw's step: the push constant's, plus the device count of runs with flag 64 (64-bit add).
uvec2 draw_step() {
    uint add = (pc.flags & 64u) != 0u ? pc.runs.v[0] : 0u;
    uint lo = pc.step_lo + add;
    return uvec2(lo, pc.step_hi + (lo < add ? 1u : 0u));
}
#define DRAW_STEP draw_step()
float score(uint base, uint pres, uint j) {
    float x = pc.logits.v[base + j];
    if (isnan(x)) return -1.0 / 0.0;
    if ((pc.flags & 1u) != 0u && pc.presence.v[pres + j] != 0u) {
        x = x < 0.0 ? x * pc.penalty : x / pc.penalty;
    }
    if ((pc.flags & 2u) != 0u) {
        x = x / pc.temperature;
    }
    return x;
}

#include "sample/pick.glsl"

void main() {
    uint tid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        uint base = (r * pc.t + pc.t - 1) * pc.v; // the launcher checks rows t v < 2^32
        uint pres = r * pc.v;
        g_base = base;
        g_pres = pres;
        listed = false;
        if ((pc.flags & 32u) != 0u) {
            choose_greedy(base, pres);
        } else {
            choose_sampled(r, base, pres);
        }
        barrier();
        if (tid == 0) {
            uint id = chosen;
            pc.ids.v[r] = id;
            if (id != NONE) pc.presence.v[pres + id] = 1u;
        }
        barrier();
    }
}
