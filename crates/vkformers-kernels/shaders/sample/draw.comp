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
#include "dropout/philox.glsl"
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Out { uint v[]; };
layout(push_constant) uniform Push {
    F32In logits;
    U32Buf presence;
    U32Out ids;
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
        if (wg_sum(c) + offset <= pc.top_p_cut) K = cand;
    }
    return K == NONE ? NONE : K + 1u;
}

// Before top-p's passes when no short top-k list was made: if the CAP largest kept scores hold
// the top-p cut (the probability below them is <= cut, so top-p removes all of it), compact them
// and return their lowest key, with that probability in `offset`; else return `low` (the passes
// then read the row). Not when min_tokens_to_keep could protect scores below them.
uint narrow_for_top_p(uint low, vec2 mz, out float offset) {
    offset = 0.0;
    if (listed || pc.keep > CAP || mz.x == -1.0 / 0.0) return low;
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
    if (cap_key <= low || below > pc.top_p_cut) return low;
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
    if (tid == 0) {
        pc.ids.v[r] = chosen;
        if (chosen != NONE) pc.presence.v[pres + chosen] = 1u;
    }
    barrier();
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        uint base = (r * pc.t + pc.t - 1) * pc.v; // the launcher checks rows t v < 2^32
        uint pres = r * pc.v;
        g_base = base;
        g_pres = pres;
        listed = false;
        if ((pc.flags & 32u) != 0u) {
            choose_greedy(r, base, pres);
            continue;
        }
        uint low = 0u;
        uint keep_key = (pc.flags & 24u) != 0u ? kth_key(base, pres, pc.keep) : 0u;
        if ((pc.flags & 4u) != 0u) {
            low = kth_key(base, pres, pc.top_k);
            compact(low);
        }
        if ((pc.flags & 8u) != 0u) {
            vec2 mz = max_and_mass(base, pres, low);
            float offset = 0.0;
            uint top_low = narrow_for_top_p(low, mz, offset);
            uint p_low = top_p_low(top_low, mz, offset);
            low = max(low, min(p_low, keep_key));
        }
        float min_p_cut = -1.0;
        vec2 mz = max_and_mass(base, pres, low);
        if ((pc.flags & 16u) != 0u) {
            min_p_cut = pc.min_p * (1.0 / mz.y); // min_p * the largest probability
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
        uvec4 w = philox4x32_10(uvec4(pc.step_lo, pc.step_hi, r, 0u), uvec2(pc.seed_lo, pc.seed_hi));
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
            uint id = chosen != NONE ? chosen : (count_buf[0] == 0u ? NONE : count_buf[0] - 1u);
            pc.ids.v[r] = id;
            if (id != NONE) pc.presence.v[pres + id] = 1u;
        }
        barrier();
    }
}
