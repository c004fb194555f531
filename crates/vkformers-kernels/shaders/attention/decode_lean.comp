#version 460
#include "common.glsl"
#include "dtype.glsl"
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
// Latency-lean paged decode attention: decode.comp's interface and results (read its module
// comment for the layouts, masks, splits and their in-kernel merge, sinks, DECODE_O16) for f32
// q/o over 16-bit pools, head dims up to 128 (D % 8 == 0, 16-byte aligned pools: ATTN_WIDE),
// v rows of their own (Dv = VROW = D). The launcher (attention/decode_lean.rs) sends it what it
// runs and the rest to decode.comp.
//
// Why another kernel: at batch 1 decode.comp is bound by chains of dependent memory round trips
// (~0.6-1 µs each on an H200), not bytes: a 128-key tile costs ~10 µs with every phase probed
// out. This one is laid out for the fewest dependent round trips per workgroup and per tile:
// - splits own interleaved key tiles: split s of S runs the BK-key tiles t = s, s + S, ...
//   (tile t: keys [t BK, (t + 1) BK) of the row, those outside [lo, hi) skipped), not
//   decode.comp's contiguous ranges: with no window and no chunk a split's first tiles do not
//   depend on the row's length, and the splits' shares differ by one tile at most. The partials,
//   their `work` layout and the merge are decode.comp's (the merge is order-free);
// - prologue: lens (and the new token's pos, slot), the q tile (unrolled, all loads in flight)
//   and the first two tiles' table entries together, then the first tile's K and V rows: 2
//   round trips (3 with a window or chunk, whose first tile depends on the length);
// - thread per key: thread (key kk = kid / TPK, half h = kid % TPK; kid: the thread's place in
//   the workgroup counted by subgroups) holds its key's K and V
//   columns h * 64 .. h * 64 + 63 in registers (8 + 8 16-byte loads issued together); TPK = 1 at
//   d64 (BK = 128 keys a tile), 2 at d128 (BK = 64; the halves' dot products meet by a
//   subgroup shuffle); scores against q in shared memory;
// - the tile's row maxima: subgroupMax, one shared-memory step (barrier A), no serial scans;
// - probabilities p [BQ][BK] and the V rows (16-bit, packed) go to shared memory (barrier B);
//   then thread (row orow, column group cg of CPT = DMAX / CG columns) sums p v over ALL keys of
//   the tile: no per-slot partials, no halving rounds. With NR <= 4 rows (GQA 4, MHA) KP = 2..8
//   adjacent lanes share a (row, group), each over a KP-th of the keys, and add their sums by
//   subgroup shuffles once, after the last tile;
// - software pipeline: while a tile's max, p and P.V run, the split's next tile's K and V rows
//   and the one after's table entries are already loading, so a multi-tile workgroup pays about one round
//   trip a tile (2 barriers a tile);
// - split merge: the last workgroup reads the partials MS splits at a time, all their loads in
//   flight at once (an online softmax over the chunks).
// The running row max m is kept by every thread for every row (uniform values), l and acc by
// the threads that own the row's output columns:
//   m' = max(m, max_j s_j);  p_j = e^(s_j - m');  l = l e^(m - m') + sum_j p_j;
//   acc = acc e^(m - m') + sum_j p_j v_j;  o = acc / l;  lse = m + log l.
// Shared memory ~23 KiB (under lavapipe's 32 KiB). Subgroups of any size from 8 to NT whose
// count is at most NSG (specialization constant 0, NT / the device's smallest subgroup size).
//
// variant: d64_f16 DMAX=64 BK=128 DT_F16
// variant: d128_f16 DMAX=128 BK=64 DT_F16
// variant: d64_bf16 DMAX=64 BK=128 DT_BF16
// variant: d128_bf16 DMAX=128 BK=64 DT_BF16
// _rope (ROPE): q, the new k and v come unrotated in f32; the kernel rotates q and the new key and
// stores the new key and value (attention/decode_rope_in.glsl), as decode.comp's _rope variants.
// variant: d64_f16_rope DMAX=64 BK=128 DT_F16 ROPE
// variant: d128_f16_rope DMAX=128 BK=64 DT_F16 ROPE
// variant: d64_bf16_rope DMAX=64 BK=128 DT_BF16 ROPE
// variant: d128_bf16_rope DMAX=128 BK=64 DT_BF16 ROPE
#include "attention/attention.glsl"

#define NT 128
#define BQ 8
// Threads per key; 16-byte words (8 columns each) of K (and of V) a thread holds: 64 columns.
#define TPK (NT / BK)
#define HC 8
// Output column groups per row (CG x BQ = NT threads) and columns per group.
#define CG 16
#define CPT (DMAX / CG)
#define CV (CPT / 4)
// Splits whose partials the merge loads at once.
#define MS 8

layout(local_size_x = NT) in;
// Most subgroups of a workgroup (NT / the smallest subgroup size the device may run).
layout(constant_id = 0) const uint NSG = NT;
// PROBE (specialization constant 1): cost probes for `vkformers bench decode --kernel lean` only
// (VKFORMERS_DECODE_PROBE; wrong results), each bit leaving a part out to time the rest: 1 the K
// and V loads (zeros); 2 the P.V pass; 4 the merge of the splits (each split's partials are
// written, none merged); 8 the scores, row maxima and probabilities (and their barrier). 0: the
// kernel.
layout(constant_id = 1) const uint PROBE = 0;
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer F32Coh { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer U32Coh { uint v[]; };
// decode.comp's push block (QF32), member for member: one launcher builds both.
layout(push_constant) uniform Push {
    F32In q;
    DIn k;
    DIn v;
    I32In table;
    I32In lens;
    F32In slopes;
    F32In sinks;
    F32Buf o;
    F32Buf lse;
    F32Buf work;
    U32Coh counters;
    DBuf o16;
#if defined(ROPE)
    F32In kn;
    F32In vn;
    I32In pos;
    I32In slots;
    F32In inv_freq;
#endif
    uint tq;
    uint hq;
    uint hkv;
    uint d;
    uint flags;
    uint window;
    float scale;
    float softcap;
    uint block_size;
    uint max_blocks;
    uint num_blocks;
    uint splits;
    uint chunk;
    uint dvh;
    uint vrow;
    uint tile_rows;
#if defined(ROPE)
    uint rot_dim;
    uint interleaved;
    float mscale;
    uint pool_rows;
    uint q_stride;
    uint kv_stride;
#endif
} pc;
#include "attention/decode_score.glsl"

#define ATTN_WIDE 8u
#define DECODE_SINKS 16u
#define DECODE_O16 32u
const uint NO_ROW = 0xffffffffu;
// Pool rows below it are real rows (NO_ROW and decode_rope_in.glsl's NEW_ROW are markers).
const uint FIRST_MARKER = 0xfffffffeu;
#if defined(ROPE)
#include "rope/sincos.glsl"
#include "attention/decode_rope_in.glsl"
#endif

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer U4In { uvec4 v[]; };

// V rows of the tile, 16-bit pairs packed in uints: key kk's column group g (CPT columns) at
// sv[sv_at(kk, g)], swizzled so that the key threads' stores spread over the banks.
#if DMAX == 64
#define SVT uvec2
#else
#define SVT uvec4
#endif
shared vec4 sq4[BQ * DMAX / 4]; // the tile's q rows [BQ][DMAX], zero past D and past NR
shared SVT sv[BK * CG];
shared vec4 sp4[BQ * BK / 4];   // probabilities [BQ][BK]
shared float spart[NSG * BQ];   // each subgroup's tile maxima [subgroup][row]
shared uint slast;

uint sv_at(uint key, uint g) {
    return key * CG + (g ^ (key & (CG - 1u)));
}

// Two 16-bit values of a packed word, widened.
vec2 unpack2(uint w) {
#if defined(DT_F16)
    return unpackHalf2x16(w);
#else
    return uintBitsToFloat(uvec2(w << 16, w & 0xffff0000u));
#endif
}

vec4 unpack4(uvec2 w) {
    return vec4(unpack2(w.x), unpack2(w.y));
}

#if defined(ROPE)
// Code of x, a value of the pools' type already (rnd): its stored bits.
uint code16(float x) {
#if defined(DT_F16)
    return f16_bits(x);
#else
    return uint(bf16_bits(x));
#endif
}

// Word i of this thread's half of the new key (snk), or of its value (snv), packed as the
// pools hold it: what a load of the stored row gives.
uvec4 pack_new(bool value, uint h, uint i) {
    uvec4 w;
    [[unroll]] for (uint u = 0; u < 4; u++) {
        uint c = h * 64u + i * 8u + 2u * u;
        vec2 x = value ? vec2(snv[c], snv[c + 1u]) : vec2(snk[c], snk[c + 1u]);
        w[u] = code16(x.x) | (code16(x.y) << 16);
    }
    return w;
}
#endif

// o[i] = x, and its 16-bit twin when asked (DECODE_O16).
void store_o(uint i, float x) {
    pc.o.v[i] = x;
    if ((pc.flags & DECODE_O16) != 0u) {
        st(pc.o16, i, x);
    }
}

// Block id of key j of row b from the table (-1 past the table's columns). Any j within the
// columns may be read: entries past a row's length are stale but in the buffer.
int table_entry(uint b, uint j) {
    return j < pc.max_blocks * pc.block_size ? pc.table.v[b * pc.max_blocks + j / pc.block_size] : -1;
}

// Pool row of key j (block id blk) of a row whose keys are [lo, hi): NO_ROW outside them or for
// a block outside the pool, the NEW_ROW marker for the new key (`new_j`, ROPE).
uint pool_row(int blk, uint j, ivec2 keys, uint new_j) {
    if (int(j) < keys.x || int(j) >= keys.y) {
        return NO_ROW;
    }
    if (j == new_j) {
        return FIRST_MARKER; // NEW_ROW
    }
    return blk >= 0 && uint(blk) < pc.num_blocks ? uint(blk) * pc.block_size + j % pc.block_size : NO_ROW;
}

// This thread's half (h) of the K and V rows of pool row `row` for kv head hk; zeros past D and
// for a marker row.
void load_kv(uint row, uint hk, uint h, out uvec4 kr[HC], out uvec4 vr[HC]) {
    uint base = (row * pc.hkv + hk) * pc.d + h * 64u;
    [[unroll]] for (uint i = 0; i < HC; i++) {
        kr[i] = uvec4(0u);
        vr[i] = uvec4(0u);
        if (row < FIRST_MARKER && h * 64u + i * 8u < pc.d && (PROBE & 1u) == 0u) {
            kr[i] = U4In(uint64_t(pc.k) + uint64_t(base + i * 8u) * 2ul).v[0];
            vr[i] = U4In(uint64_t(pc.v) + uint64_t(base + i * 8u) * 2ul).v[0];
        }
    }
}

// Query head of tile row r (query i = r / G, head hk * G + r % G).
uint head_of(uint r, uint hk, uint G) {
    return hk * G + (r - (r / G) * G);
}

// s[rr] = score of this thread's key j for tile row rr (MASKED where it does not see it).
void score_key(uvec4 kr[HC], uint h, uint row, uint j, uvec3 rows, int first_q, out float s[BQ]) {
    uint r0 = rows.x, nr = rows.y, hk = rows.z;
    uint G = pc.hq / pc.hkv;
    vec4 k4[2 * HC];
    [[unroll]] for (uint i = 0; i < HC; i++) {
        k4[2 * i] = unpack4(kr[i].xy);
        k4[2 * i + 1] = unpack4(kr[i].zw);
    }
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        s[rr] = MASKED;
        if (rr < nr) {
            float a = 0.0;
            [[unroll]] for (uint i = 0; i < 2 * HC; i++) {
                a += dot(sq4[rr * (DMAX / 4) + h * 16u + i], k4[i]);
            }
#if TPK == 2
            a += subgroupShuffleXor(a, 1u);
#endif
            uint r = r0 + rr;
            int qpos = first_q + int(r / G);
            if (row != NO_ROW && dec_visible(qpos, int(j))) {
                s[rr] = dec_score(a, head_of(r, hk, G), qpos, int(j));
            }
        }
    }
}

// Each subgroup's maxima of the tile's scores, per row, into spart.
void subgroup_maxima(float s[BQ], uint nr) {
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        if (rr < nr) {
            float m = subgroupMax(s[rr]);
            if (subgroupElect()) {
                spart[gl_SubgroupID * BQ + rr] = m;
            }
        }
    }
}

// After barrier A: the running maxima m of every row (the tile's folded in), this thread's
// key's probabilities into sp4, and the rescale factor e^(m_old - m_new) of its output row.
float probabilities(float s[BQ], uint nr, uint kk, uint h, uint orow, inout float m[BQ]) {
    float alpha = 1.0;
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        if (rr < nr) {
            float tm = MASKED;
            for (uint g = 0; g < gl_NumSubgroups; g++) {
                tm = max(tm, spart[g * BQ + rr]);
            }
            float mn = max(m[rr], tm);
            if (rr == orow) {
                alpha = exp(m[rr] - mn);
            }
            m[rr] = mn;
            if (h == 0u) {
                uint e = rr * BK + kk;
                sp4[e / 4][e % 4] = s[rr] <= MASKED ? 0.0 : exp(s[rr] - mn);
            }
        }
    }
    return alpha;
}

// This thread's half of its key's V row into sv.
void stage_v(uvec4 vr[HC], uint kk, uint h) {
    [[unroll]] for (uint i = 0; i < HC; i++) {
#if TPK == 1
        sv[sv_at(kk, 2 * i)] = vr[i].xy;
        sv[sv_at(kk, 2 * i + 1)] = vr[i].zw;
#else
        sv[sv_at(kk, h * HC + i)] = vr[i];
#endif
    }
}

// After barrier B: acc += sum over this thread's keys of the tile (the groups of 4 keys
// part, part + KP, ...) of p[orow][key] v[key][columns of cg], and l += sum p (acc and l
// rescaled by alpha first).
void accumulate(uvec3 role, uint kp, float alpha, inout vec4 acc[CV], inout float l) {
    uint orow = role.x, cg = role.y;
    l *= alpha;
    [[unroll]] for (uint c = 0; c < CV; c++) acc[c] *= alpha;
    for (uint k4 = role.z; k4 < BK / 4; k4 += kp) {
        vec4 p = sp4[orow * (BK / 4) + k4];
        l += (p.x + p.y) + (p.z + p.w);
        [[unroll]] for (uint u = 0; u < 4; u++) {
            SVT w = sv[sv_at(4 * k4 + u, cg)];
#if CV == 1
            acc[0] += p[u] * unpack4(w);
#else
            acc[0] += p[u] * unpack4(w.xy);
            acc[1] += p[u] * unpack4(w.zw);
#endif
        }
    }
}

// Tile row r's query: (query index i, head h, o row (b, i, h), lse row (b, h, i)).
uvec4 row_ids(uint b, uint r, uint hk) {
    uint G = pc.hq / pc.hkv;
    uint i = r / G;
    uint h = head_of(r, hk, G);
    return uvec4(i, h, (b * pc.tq + i) * pc.hq + h, (b * pc.hq + h) * pc.tq + i);
}

// This thread's output columns: o (and lse) when unsplit, else its split's partials.
void write_rows(uvec4 id, uint split, uint cg, vec4 acc[CV], float m, float l) {
    uint DV = pc.dvh;
    uint c0 = cg * CPT;
    if (pc.splits == 1u) {
        // The sink joins the denominator once, so only an unsplit call folds it here.
        float a = (pc.flags & DECODE_SINKS) != 0u ? attn_fold_sink(pc.sinks.v[id.y], m, l) : 1.0;
        if (c0 < DV) {
            [[unroll]] for (uint c = 0; c < CPT; c++) {
                store_o(id.z * DV + c0 + c, l > 0.0 ? acc[c / 4][c % 4] * a / l : 0.0);
            }
        }
        if (cg == 0u) {
            pc.lse.v[id.w] = l > 0.0 ? m + log(l) : MASKED;
        }
        return;
    }
    F32Coh work = F32Coh(uint64_t(pc.work));
    uint at = id.w * pc.splits + split;
    if (c0 < DV) {
        [[unroll]] for (uint c = 0; c < CPT; c++) {
            work.v[at * DV + c0 + c] = acc[c / 4][c % 4];
        }
    }
    if (cg == 0u) {
        uint ml = gl_NumWorkGroups.z * pc.hq * pc.tq * pc.splits * DV;
        work.v[ml + 2u * at] = m;
        work.v[ml + 2u * at + 1u] = l;
    }
}

// Counts this workgroup's split done; true in the tile's last one (which resets the counter).
bool last_split() {
    uint tile = gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y;
    memoryBarrierBuffer(); // this workgroup's partials before its count
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        uint done = atomicAdd(pc.counters.v[tile], 1u);
        slast = done == pc.splits - 1u ? 1u : 0u;
        if (done == pc.splits - 1u) {
            atomicExchange(pc.counters.v[tile], 0u);
        }
    }
    barrier();
    memoryBarrierBuffer(); // the other splits' partials after their counts
    return slast != 0u;
}

// The S partials of this thread's row and columns merged into o (and lse), MS splits at a time:
// M = max_s m_s, L = sum_s l_s e^(m_s - M), o = sum_s acc_s e^(m_s - M) / L, lse = M + log L
// (a sink as one more partial with m = s_h, l = 1, acc = 0).
void merge(uvec4 id, uint cg) {
    uint S = pc.splits;
    uint DV = pc.dvh;
    uint c0 = cg * CPT;
    uint ml = gl_NumWorkGroups.z * pc.hq * pc.tq * S * DV;
    F32Coh work = F32Coh(uint64_t(pc.work));
    float M = MASKED;
    float L = 0.0;
    vec4 A[CV];
    [[unroll]] for (uint c = 0; c < CV; c++) A[c] = vec4(0.0);
    for (uint s0 = 0; s0 < S; s0 += MS) {
        float ms[MS];
        float ls[MS];
        vec4 as[MS][CV];
        [[unroll]] for (uint u = 0; u < MS; u++) {
            uint at = id.w * S + s0 + u;
            bool here = s0 + u < S;
            ms[u] = here ? work.v[ml + 2u * at] : MASKED;
            ls[u] = here ? work.v[ml + 2u * at + 1u] : 0.0;
            [[unroll]] for (uint c = 0; c < CPT; c++) {
                as[u][c / 4][c % 4] = here && c0 < DV ? work.v[at * DV + c0 + c] : 0.0;
            }
        }
        float mc = M;
        [[unroll]] for (uint u = 0; u < MS; u++) mc = max(mc, ms[u]);
        float a = exp(M - mc);
        L *= a;
        [[unroll]] for (uint c = 0; c < CV; c++) A[c] *= a;
        [[unroll]] for (uint u = 0; u < MS; u++) {
            float w = ms[u] <= MASKED ? 0.0 : exp(ms[u] - mc);
            L += ls[u] * w;
            [[unroll]] for (uint c = 0; c < CV; c++) A[c] += as[u][c] * w;
        }
        M = mc;
    }
    float a = (pc.flags & DECODE_SINKS) != 0u ? attn_fold_sink(pc.sinks.v[id.y], M, L) : 1.0;
    if (c0 < DV) {
        [[unroll]] for (uint c = 0; c < CPT; c++) {
            store_o(id.z * DV + c0 + c, L > 0.0 ? A[c / 4][c % 4] * a / L : 0.0);
        }
    }
    if (cg == 0u) {
        pc.lse.v[id.w] = L > 0.0 ? M + log(L) : MASKED;
    }
}

// The q tile's elements e .. e + EPT - 1 (EPT = BQ DMAX / NT, in one row), zero past D and NR.
#define EPT (BQ * DMAX / NT)
void load_q(uint b, uint r0, uint nr, uint hk, out float x[EPT]) {
    uint e = gl_LocalInvocationID.x * EPT;
    uint rr = e / DMAX;
    uint dd = e - rr * DMAX;
    uvec4 id = row_ids(b, r0 + rr, hk);
#if defined(ROPE)
    int pos = pc.pos.v[b];
#endif
    [[unroll]] for (uint u = 0; u < EPT; u++) {
        x[u] = 0.0;
        if (rr < nr && dd + u < pc.d) {
#if defined(ROPE)
            // Tq = 1: tile row r is query head id.y of token b, rotated as it is read.
            x[u] = rope_elem(pc.q, b * pc.q_stride + id.y * pc.d, dd + u, pos);
#else
            x[u] = pc.q.v[id.z * pc.d + dd + u];
#endif
        }
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint split = gl_WorkGroupID.x;
    uint b = gl_WorkGroupID.z;
    uint G = pc.hq / pc.hkv;
    uint TR = pc.tile_rows;
    uint rtiles = (G * pc.tq + TR - 1) / TR;
    uint hk = gl_WorkGroupID.y / rtiles;
    uint r0 = (gl_WorkGroupID.y - hk * rtiles) * TR;
    uint nr = min(TR, G * pc.tq - r0);
    // Key kk and half h from the thread's place in its subgroup, so that the two threads of a
    // d128 key are lanes 2i, 2i + 1 of one subgroup (a permutation of tid: full subgroups).
    uint kid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
    uint kk = kid / TPK;
    uint h = kid % TPK;
    // P.V roles: KP threads (adjacent lanes) share each (row, column group) of the NR rows, each
    // over a KP-th of the tile's keys, when NR <= BQ / KP (GQA 4: 2, MHA: 8), so no thread idles;
    // their sums meet by subgroup shuffles after the last tile.
    uint kp = nr <= 1u ? 8u : (nr <= 2u ? 4u : (nr <= 4u ? 2u : 1u));
    uint orow = kid / kp / CG;
    uint cg = kid / kp % CG;
    uint part = kid % kp;

    // Split s runs the key tiles t = s, s + S, s + 2S, ... (tile t: keys [t BK, (t + 1) BK))
    // from the first one that holds a key of [lo, hi), so with no window and no chunk (lo = 0)
    // its first tiles are known before the row's length: their table entries load with it.
    uint S = pc.splits;
    bool from_zero = pc.window == 0u && pc.chunk == 0u;
    int blk = from_zero ? table_entry(b, split * BK + kk) : -1;
    int blk_next = from_zero ? table_entry(b, (split + S) * BK + kk) : -1;
    // Round trip 1: the row's length (and the new token's slot), the q tile (and the table).
    int len = pc.lens.v[b];
#if defined(ROPE)
    int slot = pc.slots.v[b];
#endif
    float qx[EPT];
    load_q(b, r0, nr, hk, qx);
    // Keys of the row: [lo, hi); a table never holds more than max_blocks * BS of them.
    int hi = min(len, int(pc.max_blocks * pc.block_size));
    int first_q = len - int(pc.tq);
    int lo = pc.window != 0u ? max(0, first_q + 1 - int(pc.window)) : 0;
    if (pc.chunk != 0u && first_q >= 0) {
        lo = max(lo, int(uint(first_q) / pc.chunk * pc.chunk));
    }
    ivec2 keys = ivec2(lo, hi);
    uint tlo = uint(lo) / BK;
    uint t0 = tlo + (split + S - tlo % S) % S;
    uint new_j = NO_ROW;
#if defined(ROPE)
    // take_new_key's choice (the new key j = len - 1 is this split's when its tile is), made
    // here so the table lookups need not wait for its stores.
    bool kept = len > 0 && slot >= 0 && uint(slot) < pc.pool_rows;
    bool owns = kept && len - 1 < hi && (uint(len - 1) / BK) % S == split;
    new_j = owns ? uint(len - 1) : NO_ROW;
#endif
    if (!from_zero) {
        // Round trip 2 (windows, chunks): the first tiles' table entries.
        blk = table_entry(b, t0 * BK + kk);
        blk_next = table_entry(b, (t0 + S) * BK + kk);
    }
    // Round trip 2 (3): tile t0's K and V rows.
    uint row = pool_row(blk, t0 * BK + kk, keys, new_j);
    uint row_next = pool_row(blk_next, (t0 + S) * BK + kk, keys, new_j);
    uvec4 kr[HC];
    uvec4 vr[HC];
    load_kv(row, hk, h, kr, vr);
    [[unroll]] for (uint u = 0; u < EPT; u++) {
        uint e = tid * EPT + u;
        sq4[e / 4][e % 4] = qx[u];
    }
#if defined(ROPE)
    // [kbeg, kend) = [j, j + 1) for the owner, empty for the others.
    new_key = take_new_key(b, hk, r0 == 0u && split == 0u, owns ? new_j : 1u, owns ? new_j + 1u : 0u);
#endif
    float m[BQ];
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) m[rr] = MASKED;
    float l = 0.0;
    vec4 acc[CV];
    [[unroll]] for (uint c = 0; c < CV; c++) acc[c] = vec4(0.0);
    barrier(); // sq4 (and snk, snv) written

    for (uint t = t0; int(t * BK) < hi; t += S) {
        uint k0 = t * BK;
#if defined(ROPE)
        if (row == NEW_ROW) {
            [[unroll]] for (uint i = 0; i < HC; i++) {
                kr[i] = pack_new(false, h, i);
                vr[i] = pack_new(true, h, i);
            }
        }
#endif
        float s[BQ];
        if ((PROBE & 8u) == 0u) {
            score_key(kr, h, row, k0 + kk, uvec3(r0, nr, hk), first_q, s);
        } else {
            [[unroll]] for (uint rr = 0; rr < BQ; rr++) s[rr] = uintBitsToFloat(kr[rr % HC].x & 0x3f7fffffu);
        }
        // The next tile's K and V rows and the one after's table entries, in flight during
        // this tile's max, probabilities and P.V.
        uint j_after = (t + 2u * S) * BK + kk;
        uint row_after = pool_row(table_entry(b, j_after), j_after, keys, new_j);
        uvec4 kn[HC];
        uvec4 vn[HC];
        load_kv(row_next, hk, h, kn, vn);
        float alpha = 1.0;
        if ((PROBE & 8u) == 0u) {
            subgroup_maxima(s, nr);
            barrier(); // A: spart written; the previous tile's P.V done with sp4 and sv
            alpha = probabilities(s, nr, kk, h, orow, m);
        } else if (h == 0u) {
            [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
                uint e = rr * BK + kk;
                sp4[e / 4][e % 4] = s[rr];
            }
        }
        stage_v(vr, kk, h);
        barrier(); // B: sp4 and sv written
        if (orow < nr && (PROBE & 2u) == 0u) {
            accumulate(uvec3(orow, cg, part), kp, alpha, acc, l);
        }
        kr = kn;
        vr = vn;
        row = row_next;
        row_next = row_after;
    }

    // The KP parts of each (row, column group): lanes part = kid % KP of one subgroup.
    for (uint x = 1u; x < kp; x *= 2u) {
        l += subgroupShuffleXor(l, x);
        [[unroll]] for (uint c = 0; c < CV; c++) acc[c] += subgroupShuffleXor(acc[c], x);
    }
    bool writes = orow < nr && part == 0u;
    uvec4 id = row_ids(b, r0 + orow, hk);
    float mo = MASKED;
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        if (rr == orow) mo = m[rr];
    }
    if (writes) {
        write_rows(id, split, cg, acc, mo, l);
    }
    if (pc.splits > 1u && (PROBE & 4u) == 0u && last_split() && writes) {
        merge(id, cg);
    }
}
