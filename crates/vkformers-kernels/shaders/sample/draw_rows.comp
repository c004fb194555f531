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

const uint NONE = 0xffffffffu;
shared uint count_buf[WG];
shared uint chosen;
shared float prefix[WG];

// An order-preserving map from f32 bit patterns to u32 (-inf lowest among numbers).
uint key_of(float x) {
    uint u = floatBitsToUint(x);
    return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

uint wg_count(uint c) {
    uint t = gl_LocalInvocationID.x;
    barrier();
    count_buf[t] = c;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (t < s) {
            count_buf[t] += count_buf[t + s];
        }
        barrier();
    }
    return count_buf[0];
}

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

// The elements the passes after top-k visit: the whole row, or, when top-k leaves at most CAP
// of them, their (score, index) in index order, compacted into shared memory, so that top-p's
// 32 passes, min-p and the draw read CAP entries instead of the row.
const uint CAP = 2048u;
shared float list_s[CAP];
shared uint list_i[CAP];
shared uint list_n;
bool listed = false; // uniform over the workgroup
uint n_list = 0u;
uint g_base = 0u, g_pres = 0u;
uint elems() { return listed ? n_list : pc.v; }
float elem_score(uint i) { return listed ? list_s[i] : score(g_base, g_pres, i); }
uint elem_index(uint i) { return listed ? list_i[i] : i; }

// Compacts the scores with key >= low into the list when they are at most CAP.
void compact(uint low) {
    uint tid = gl_LocalInvocationID.x;
    uint chunk = (pc.v + WG - 1) / WG;
    uint j0 = min(tid * chunk, pc.v), j1 = min(j0 + chunk, pc.v);
    uint mine = 0u;
    for (uint j = j0; j < j1; j++) {
        if (key_of(score(g_base, g_pres, j)) >= low) mine++;
    }
    barrier();
    count_buf[tid] = mine;
    barrier();
    if (tid == 0u) {
        uint acc = 0u;
        for (uint i = 0u; i < WG; i++) {
            uint x = count_buf[i];
            count_buf[i] = acc;
            acc += x;
        }
        list_n = acc;
    }
    barrier();
    uint n = list_n;
    if (n <= CAP) {
        uint at = count_buf[tid];
        for (uint j = j0; j < j1; j++) {
            float x = score(g_base, g_pres, j);
            if (key_of(x) >= low) {
                list_s[at] = x;
                list_i[at] = j;
                at++;
            }
        }
    }
    barrier();
    listed = n <= CAP;
    n_list = n;
}

// The largest key K with #{j : key(s_j) >= K} >= k, i.e. the key of the k-th largest score
// (k >= 1): a radix select, 8 bits per pass from the top, through a 256-bin histogram of the
// keys that share the digits chosen so far (shared-memory integer atomics: exact, and the
// result does not depend on their order).
shared uint hist[256];
shared uint digit_sel;
shared uint digit_rest;
uint kth_key(uint base, uint pres, uint k) {
    uint tid = gl_LocalInvocationID.x;
    uint prefix = 0u;
    uint rest = k; // rank still wanted among the keys that match `prefix` above `shift`
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint above = shift == 24 ? 0u : (0xffffffffu << uint(shift + 8));
        barrier();
        for (uint d = tid; d < 256u; d += WG) hist[d] = 0u;
        barrier();
        for (uint j = tid; j < pc.v; j += WG) {
            uint key = key_of(score(base, pres, j));
            if ((key & above) == prefix) atomicAdd(hist[(key >> uint(shift)) & 255u], 1u);
        }
        barrier();
        if (tid == 0u) {
            uint acc = 0u;
            digit_sel = 0u;
            digit_rest = rest - acc;
            for (int d = 255; d >= 0; d--) {
                if (acc + hist[d] >= rest) {
                    digit_sel = uint(d);
                    digit_rest = rest - acc;
                    break;
                }
                acc += hist[d];
            }
        }
        barrier();
        prefix |= digit_sel << uint(shift);
        rest = digit_rest;
    }
    return prefix;
}

// Max and sum of exp(s - max) over the kept scores (key >= low).
vec2 max_and_mass(uint base, uint pres, uint low) {
    float m = -1.0 / 0.0;
    for (uint j = gl_LocalInvocationID.x; j < elems(); j += WG) {
        float s = elem_score(j);
        if (key_of(s) >= low) m = max(m, s);
    }
    m = wg_max(m);
    float z = 0.0;
    for (uint j = gl_LocalInvocationID.x; j < elems(); j += WG) {
        float s = elem_score(j);
        if (key_of(s) >= low && m > -1.0 / 0.0) z += exp(s - m);
    }
    return vec2(m, wg_sum(z));
}

// Top-p: the lowest key kept (before min_tokens_to_keep), i.e. one above the largest K whose
// running sum of kept probabilities over keys <= K is still <= cut; `offset` is the probability
// of the kept scores below `low` (all removed: see `narrow_for_top_p`), mz the max and mass of
// every kept score.
uint top_p_low(uint low, vec2 mz, float offset) {
    uint K = 0u;
    for (int bit = 31; bit >= 0; bit--) {
        uint cand = K | (1u << uint(bit));
        float c = 0.0;
        for (uint j = gl_LocalInvocationID.x; j < elems(); j += WG) {
            float s = elem_score(j);
            uint k = key_of(s);
            if (k >= low && k <= cand && mz.x > -1.0 / 0.0) c += exp(s - mz.x) / mz.y;
        }
        if (wg_sum(c) + offset <= row_p.top_p_cut) K = cand;
    }
    return K == NONE ? NONE : K + 1u;
}

// Before top-p's passes when no short top-k list was made: if the CAP largest kept scores hold
// the top-p cut (the probability below them is <= cut, so top-p removes all of it), compact them
// and return their lowest key, with that probability in `offset`; else return `low` (the passes
// then read the row). Not when min_tokens_to_keep could protect scores below them.
uint narrow_for_top_p(uint low, vec2 mz, out float offset) {
    offset = 0.0;
    if (listed || row_p.keep > CAP || mz.x == -1.0 / 0.0) return low;
    if (pc.v <= CAP) {
        compact(low);
        return low;
    }
    uint cap_key = kth_key(g_base, g_pres, CAP);
    float below = 0.0;
    for (uint j = gl_LocalInvocationID.x; j < pc.v; j += WG) {
        float s = score(g_base, g_pres, j);
        uint k = key_of(s);
        if (k >= low && k < cap_key) below += exp(s - mz.x) / mz.y;
    }
    below = wg_sum(below);
    if (cap_key <= low || below > row_p.top_p_cut) return low;
    compact(cap_key);
    if (!listed) return low; // ties at the CAP-th score made the list too long
    offset = below;
    return cap_key;
}

// Greedy: ids[r] = the first j whose logit is not NaN and whose score is the largest of those.
void choose_greedy(uint r, uint base, uint pres) {
    uint tid = gl_LocalInvocationID.x;
    float m = -1.0 / 0.0;
    uint numbers = 0u;
    for (uint j = tid; j < pc.v; j += WG) {
        if (!isnan(pc.logits.v[base + j])) {
            m = max(m, score(base, pres, j));
            numbers++;
        }
    }
    m = wg_max(m);
    bool none = wg_count(numbers) == 0u;
    barrier();
    if (tid == 0) chosen = NONE;
    barrier();
    for (uint j = tid; j < pc.v && !none; j += WG) {
        if (!isnan(pc.logits.v[base + j]) && score(base, pres, j) == m) {
            atomicMin(chosen, j);
            break;
        }
    }
    barrier();
}

// Sampling: the warpers, then the draw; leaves the choice in `chosen` (NONE: nothing to draw).
void choose_sampled(uint r, uint base, uint pres) {
    uint tid = gl_LocalInvocationID.x;
    uint low = 0u;
    uint keep_key = (row_p.flags & 24u) != 0u ? kth_key(base, pres, row_p.keep) : 0u;
    if ((row_p.flags & 4u) != 0u) {
        low = kth_key(base, pres, row_p.top_k);
        compact(low);
    }
    if ((row_p.flags & 8u) != 0u) {
        vec2 mz = max_and_mass(base, pres, low);
        float offset = 0.0;
        uint top_low = narrow_for_top_p(low, mz, offset);
        uint p_low = top_p_low(top_low, mz, offset);
        low = max(low, min(p_low, keep_key));
    }
    float min_p_cut = -1.0;
    vec2 mz = max_and_mass(base, pres, low);
    if ((row_p.flags & 16u) != 0u) {
        min_p_cut = row_p.min_p * (1.0 / mz.y); // min_p * the largest probability
    }
    // The draw: thread tid sums its contiguous chunk, an exclusive scan orders the chunks.
    uint chunk = (elems() + WG - 1) / WG;
    uint j0 = min(tid * chunk, elems()), j1 = min(j0 + chunk, elems());
    float mine = 0.0;
    uint last = 0u;
    bool any = false;
    for (uint j = j0; j < j1; j++) {
        float s = elem_score(j);
        uint k = key_of(s);
        float e = mz.x > -1.0 / 0.0 ? exp(s - mz.x) : 0.0;
        bool kept = k >= low && (e / mz.y >= min_p_cut || k >= keep_key) && e > 0.0;
        if (kept) {
            mine += e;
            last = elem_index(j);
            any = true;
        }
    }
    barrier();
    prefix[tid] = mine;
    if (tid == 0) chosen = NONE;
    barrier();
    if (tid == 0) {
        float acc = 0.0;
        for (uint i = 0; i < WG; i++) {
            float x = prefix[i];
            prefix[i] = acc;
            acc += x;
        }
        count_buf[0] = floatBitsToUint(acc);
    }
    barrier();
    float total = uintBitsToFloat(count_buf[0]);
    uvec4 w = philox4x32_10(uvec4(row_p.step_lo, row_p.step_hi, row_p.draw_row, 0u), uvec2(row_p.seed_lo, row_p.seed_hi));
    float target = float(w.x >> 8) * (1.0 / 16777216.0) * total;
    float cum = prefix[tid];
    if (total > 0.0 && cum <= target && cum + mine > target) {
        for (uint j = j0; j < j1; j++) {
            float s = elem_score(j);
            uint k = key_of(s);
            float e = exp(s - mz.x);
            if (k >= low && (e / mz.y >= min_p_cut || k >= keep_key) && e > 0.0) {
                cum += e;
                if (cum > target) {
                    atomicMin(chosen, elem_index(j));
                    break;
                }
            }
        }
    }
    barrier();
    // Rounding can leave the running sum a hair below the target: the last kept index.
    count_buf[tid] = any ? last + 1u : 0u;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (tid < s) count_buf[tid] = max(count_buf[tid], count_buf[tid + s]);
        barrier();
    }
    if (tid == 0) {
        chosen = chosen != NONE ? chosen : (count_buf[0] == 0u ? NONE : count_buf[0] - 1u);
    }
    barrier();
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
            choose_greedy(r, base, pres);
        } else {
            choose_sampled(r, base, pres);
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
