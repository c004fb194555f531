#version 460
#include "common.glsl"
#define WG 256
layout(local_size_x = WG) in;
#include "reduce/tree.glsl"
// Sampling of the next token on the device with per-row parameters, for the serving engine's
// batched step: row b of logits [rows * t, v] (its last column b t + t - 1) is a request of its
// own, with its own processors, seed, step and draw row, and its own slot in `state`. The rules
// are those of `draw.comp` (transformers' processors in `generate`'s order, then the seeded
// inverse-CDF draw; see it for where a choice can differ from the host's f64 pipeline), with
// OpenAI's presence/frequency penalties after the repetition penalty, as the host engine applies
// them, and optionally the raw distribution's log-probabilities:
//   s_j = logit_j; NaN -> -inf
//   repetition penalty (flag 1): s_j = s_j < 0 ? s_j pen : s_j / pen   where j is in the history
//   OpenAI penalties (flag 64):  s_j -= presence + frequency c_j       where c_j > 0
//   temperature (2), top-k (4), top-p (8), min-p (16), greedy (32): as draw.comp
// state [slots, v] u32: bit 31 = j occurs in the slot's history (prompt + generated), bits 0-30 =
// c_j, how often j was generated. The kernel records its choice (sets the bit, adds 1 to c), so
// the host uploads a slot's row only when a request takes the slot.
// params [rows, 16] u32, row b: 0 slot, 1 flags, 2 penalty, 3 temperature, 4 top_k (raised to
// keep, flag off when >= v), 5 f32(1 - top_p), 6 min_p, 7 keep (<= v), 8-9 seed lo/hi, 10-11
// step lo/hi, 12 the draw row (Philox counter (step lo, step hi, draw row, 0)), 13 presence,
// 14 frequency, 15 top logprobs (0xffffffff: none; else how many alternatives, at most 20).
// Out: ids[b] (0xffffffff when nothing can be drawn), and when asked logprobs[b, 0..41].
#include "dropout/philox.glsl"
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Out { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer U32In { uint v[]; };
layout(push_constant) uniform Push {
    F32In logits;
    U32In params;  // [rows, PARAM_WORDS]: see the layout above
    U32Buf state;  // [slots, v]: HIST bit | generated count
    U32Out ids;    // [rows]
    F32Buf logprobs; // [rows, 1 + 2 TOP_MAX]: chosen token's, then (id bits, logprob) pairs
    uint rows;
    uint t;
    uint v;
} pc;

const uint PARAM_WORDS = 16u;
const uint TOP_MAX = 20u;
const uint LP_WORDS = 1u + 2u * TOP_MAX;
const uint HIST = 0x80000000u;
const uint NO_LOGPROBS = 0xffffffffu;

// The current row's parameters (uniform over the workgroup), loaded by `load_row`.
struct Row {
    uint flags;
    float penalty;
    float temperature;
    uint top_k;
    float top_p_cut;
    float min_p;
    uint keep;
    uint seed_lo, seed_hi, step_lo, step_hi, draw_row;
    float presence;
    float frequency;
    uint top_logprobs;
};
Row row_p;

void load_row(uint r) {
    uint a = r * PARAM_WORDS;
    row_p.flags = pc.params.v[a + 1u];
    row_p.penalty = uintBitsToFloat(pc.params.v[a + 2u]);
    row_p.temperature = uintBitsToFloat(pc.params.v[a + 3u]);
    row_p.top_k = pc.params.v[a + 4u];
    row_p.top_p_cut = uintBitsToFloat(pc.params.v[a + 5u]);
    row_p.min_p = uintBitsToFloat(pc.params.v[a + 6u]);
    row_p.keep = pc.params.v[a + 7u];
    row_p.seed_lo = pc.params.v[a + 8u];
    row_p.seed_hi = pc.params.v[a + 9u];
    row_p.step_lo = pc.params.v[a + 10u];
    row_p.step_hi = pc.params.v[a + 11u];
    row_p.draw_row = pc.params.v[a + 12u];
    row_p.presence = uintBitsToFloat(pc.params.v[a + 13u]);
    row_p.frequency = uintBitsToFloat(pc.params.v[a + 14u]);
    row_p.top_logprobs = pc.params.v[a + 15u];
}

#define SP row_p
float score(uint base, uint pres, uint j) {
    float x = pc.logits.v[base + j];
    if (isnan(x)) return -1.0 / 0.0;
    uint st = pc.state.v[pres + j];
    if ((row_p.flags & 1u) != 0u && (st & HIST) != 0u) {
        x = x < 0.0 ? x * row_p.penalty : x / row_p.penalty;
    }
    uint c = st & ~HIST;
    if ((row_p.flags & 64u) != 0u && c != 0u) {
        // The host's `presence + frequency * count` in f32, unfused, then subtracted.
        precise float d = row_p.presence + row_p.frequency * float(c);
        x = x - d;
    }
    if ((row_p.flags & 2u) != 0u) {
        x = x / row_p.temperature;
    }
    return x;
}

#include "sample/pick.glsl"

// Maximum / minimum of c over the workgroup.
uint wg_umax(uint c) {
    uint t = gl_LocalInvocationID.x;
    barrier();
    count_buf[t] = c;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (t < s) count_buf[t] = max(count_buf[t], count_buf[t + s]);
        barrier();
    }
    return count_buf[0];
}

uint wg_umin(uint c) {
    uint t = gl_LocalInvocationID.x;
    barrier();
    count_buf[t] = c;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (t < s) count_buf[t] = min(count_buf[t], count_buf[t + s]);
        barrier();
    }
    return count_buf[0];
}

// The raw distribution's log-probabilities (log_softmax of the logits, NaN as -inf, as OpenAI
// reports them, before any processor): lp[0] = that of `id`, then the `n` most likely as (id bits,
// logprob) pairs, most likely first, the lower id first on ties. The top n are n rounds of a
// workgroup maximum over the composite order (key desc, index asc), each round taking the best
// entry strictly after the previous one: exact, no sort, no scratch.
void write_logprobs(uint r, uint base, uint id, uint n) {
    uint tid = gl_LocalInvocationID.x;
    float m = -1.0 / 0.0;
    for (uint j = tid; j < pc.v; j += WG) {
        float x = pc.logits.v[base + j];
        if (!isnan(x)) m = max(m, x);
    }
    m = wg_max(m);
    float z = 0.0;
    for (uint j = tid; j < pc.v; j += WG) {
        float x = pc.logits.v[base + j];
        if (!isnan(x) && m > -1.0 / 0.0) z += exp(x - m);
    }
    float log_z = m + log(wg_sum(z));
    uint out_at = r * LP_WORDS;
    if (tid == 0u) {
        float x = id == NONE ? -1.0 / 0.0 : pc.logits.v[base + id];
        pc.logprobs.v[out_at] = isnan(x) ? -1.0 / 0.0 : x - log_z;
    }
    uint prev_k = 0xffffffffu, prev_i = NONE; // "before everything": no entry is after it yet
    bool first = true;
    for (uint round = 0u; round < n; round++) {
        uint best_k = 0u;
        bool seen = false;
        for (uint j = tid; j < pc.v; j += WG) {
            float x = pc.logits.v[base + j];
            uint k = key_of(isnan(x) ? -1.0 / 0.0 : x);
            bool after = first || k < prev_k || (k == prev_k && j > prev_i);
            if (after && (!seen || k > best_k)) {
                best_k = k;
                seen = true;
            }
        }
        // Keys of numbers are >= key_of(-inf) > 0, so 0 stands for "none here".
        uint kmax = wg_umax(seen ? best_k : 0u);
        uint best_i = NONE;
        for (uint j = tid; j < pc.v; j += WG) {
            float x = pc.logits.v[base + j];
            uint k = key_of(isnan(x) ? -1.0 / 0.0 : x);
            bool after = first || k < prev_k || (k == prev_k && j > prev_i);
            if (after && k == kmax) {
                best_i = min(best_i, j);
            }
        }
        uint imin = wg_umin(best_i);
        if (imin == NONE) break; // fewer than n entries in the row
        if (tid == 0u) {
            float x = pc.logits.v[base + imin];
            pc.logprobs.v[out_at + 1u + 2u * round] = uintBitsToFloat(imin);
            pc.logprobs.v[out_at + 2u + 2u * round] = isnan(x) ? -1.0 / 0.0 : x - log_z;
        }
        prev_k = kmax;
        prev_i = imin;
        first = false;
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        load_row(r);
        uint base = (r * pc.t + pc.t - 1) * pc.v; // the launcher checks rows t v < 2^32
        uint pres = pc.params.v[r * PARAM_WORDS] * pc.v; // the row's slot in `state`
        g_base = base;
        g_pres = pres;
        listed = false;
        if ((row_p.flags & 32u) != 0u) {
            choose_greedy(base, pres);
        } else {
            choose_sampled(row_p.draw_row, base, pres);
        }
        barrier();
        uint id = chosen;
        if (row_p.top_logprobs != NO_LOGPROBS) {
            write_logprobs(r, base, id, min(row_p.top_logprobs, TOP_MAX));
        }
        barrier();
        if (tid == 0u) {
            pc.ids.v[r] = id;
            // The repetition penalty's history and the OpenAI penalties' count of generated ids.
            if (id != NONE) pc.state.v[pres + id] = (pc.state.v[pres + id] | HIST) + 1u;
        }
        barrier();
    }
}
