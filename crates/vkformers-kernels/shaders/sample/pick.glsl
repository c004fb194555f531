// The processors and the draw both sampling kernels share (draw.comp: one set of parameters
// for every row; draw_rows.comp: each row its own). See draw.comp for the rules and where a
// choice can differ from the host's f64 pipeline.
// Before the include: `pc.logits` (F32In) and `pc.v` (the vocabulary), `WG`, reduce/tree.glsl
// (wg_max, wg_sum), dropout/philox.glsl, `SP` naming the current row's parameters (fields flags,
// top_k, top_p_cut, min_p, keep, seed_lo, seed_hi, step_lo, step_hi), and a prototype or
// definition of `float score(uint base, uint pres, uint j)`: the processed score of column j of
// the logits row at `base` with the penalty state at `pres` (-inf for NaN).
// After: `choose_greedy` / `choose_sampled` leave the row's choice in the shared `chosen`.
// The draw's step (lo, hi): the row parameters' unless the including kernel says otherwise.
#ifndef DRAW_STEP
#define DRAW_STEP uvec2(SP.step_lo, SP.step_hi)
#endif

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
        if (wg_sum(c) + offset <= SP.top_p_cut) K = cand;
    }
    return K == NONE ? NONE : K + 1u;
}

// Before top-p's passes when no short top-k list was made: if the CAP largest kept scores hold
// the top-p cut (the probability below them is <= cut, so top-p removes all of it), compact them
// and return their lowest key, with that probability in `offset`; else return `low` (the passes
// then read the row). Not when min_tokens_to_keep could protect scores below them.
uint narrow_for_top_p(uint low, vec2 mz, out float offset) {
    offset = 0.0;
    if (listed || SP.keep > CAP || mz.x == -1.0 / 0.0) return low;
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
    if (cap_key <= low || below > SP.top_p_cut) return low;
    compact(cap_key);
    if (!listed) return low; // ties at the CAP-th score made the list too long
    offset = below;
    return cap_key;
}

// Greedy: `chosen` = the first j whose logit is not NaN and whose score is the largest of those.
void choose_greedy(uint base, uint pres) {
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

// Sampling: the warpers, then the draw (Philox counter (step lo, step hi, draw_row, 0));
// leaves the choice in `chosen` (NONE: nothing to draw).
void choose_sampled(uint draw_row, uint base, uint pres) {
    uint tid = gl_LocalInvocationID.x;
    uint low = 0u;
    uint keep_key = (SP.flags & 24u) != 0u ? kth_key(base, pres, SP.keep) : 0u;
    if ((SP.flags & 4u) != 0u) {
        low = kth_key(base, pres, SP.top_k);
        compact(low);
    }
    if ((SP.flags & 8u) != 0u) {
        vec2 mz = max_and_mass(base, pres, low);
        float offset = 0.0;
        uint top_low = narrow_for_top_p(low, mz, offset);
        uint p_low = top_p_low(top_low, mz, offset);
        low = max(low, min(p_low, keep_key));
    }
    float min_p_cut = -1.0;
    vec2 mz = max_and_mass(base, pres, low);
    if ((SP.flags & 16u) != 0u) {
        min_p_cut = SP.min_p * (1.0 / mz.y); // min_p * the largest probability
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
    uvec2 step = DRAW_STEP;
    uvec4 w = philox4x32_10(uvec4(step.x, step.y, draw_row, 0u), uvec2(SP.seed_lo, SP.seed_hi));
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

