#version 460
#include "common.glsl"
#include "dtype.glsl"
#extension GL_EXT_control_flow_attributes : require
// Decode attention over a paged KV cache: few new query rows per sequence (a decode step is
// Tq = 1; speculative or chunked steps up to ~16), keys and values read through a block table.
//
//   q [B, Tq, Hq, D]; pools k [NB, BS, Hkv, D], v [NB, BS, Hkv, VROW]; table [B, MAXB] int32;
//   lens [B] int32; o [B, Tq, Hq, Dv]: values are the first Dv (pc.dvh) of a v row's VROW
//   (pc.vrow) columns: Dv = VROW = D usually; MLA's absorbed decode reads its latent [c | k_rot]
//   (D = L + Dr) as keys and its first L columns as values, from one pool (Dv = L, VROW = D)
//   key j of row b (0 <= j < lens[b]) lives at pool row table[b, j / BS] * BS + j % BS
//   query i of row b sits at position qpos = lens[b] - Tq + i (the new keys are already stored)
//   visible: j < lens[b], (causal) j <= qpos, (window W) qpos - j < W,
//   (chunk C, Llama 4) floor(j / C) == floor(qpos / C)
//   S = score(q . k_j) (scale, softcap, ALiBi as fwd.comp), o = softmax(S) v, lse = log sum exp S
//
// Split-KV ("flash decoding"): grid x = splits S. Each row's visible key range [lo, lens[b]) is
// cut into S chunks (a multiple of BK keys each); a workgroup runs the online softmax over its
// chunk only. With S = 1 it writes o and lse itself; otherwise it writes its unnormalised
// partials (acc = sum_j e^(S_j - m) v_j, m, l = sum_j e^(S_j - m)) to `work`, and the last of
// the S workgroups of a row tile to finish merges the S partials of each of its query rows:
//   M = max_s m_s;  L = sum_s l_s e^(m_s - M);  o = sum_s acc_s e^(m_s - M) / L;  lse = M + log L
// (no second dispatch, no barrier between two). "Last" is counted per (row b, grid y) tile in
// `counters` [B, grid y] uint32: each workgroup makes its partials visible (memoryBarrierBuffer,
// coherent stores), then adds 1; the one that reads S - 1 is last, resets the counter to 0 for
// the next call (every other workgroup of the tile has counted already) and reads all S
// partials through coherent loads. The counters must be 0 before the first call.
// Learned sinks (flags & DECODE_SINKS, [Hq] f32, see fwd.comp) join each row's denominator
// once: here when S = 1 (attn_fold_sink before the row is written), else in the merge.
//
// Grid y = (kv head hk, row tile): the R = G * Tq query rows (r = i * G + g, query head
// h = hk * G + g, G = Hq / Hkv) that share kv head hk go in tiles of pc.tile_rows <= BQ = 8 rows;
// NR <= tile_rows of them are real (a decode step of GQA has NR = G, often 4..8). Tiles of fewer
// rows than BQ (VKFORMERS_DECODE_TILE_ROWS) give a call more workgroups, each with less work per
// key, at the price of reading each kv head's keys once per tile; the registers stay BQ's.
// Loops over rows have the constant trip count BQ and skip rows >= NR by a uniform branch (never
// a `break`), so the register arrays indexed by row (scores, accumulators) stay in registers on
// every compiler.
// Grid z = B.
//
// Per tile of BK = NT keys:
//   1. thread c maps key k0 + c to its pool row and computes its NR scores from global K, read
//      KG * 8 elements at a time (16-byte loads when ATTN_WIDE), q from shared memory;
//   2. the tile max of each row from NP = NT / BQ partial maxima (thread (part, row) scans BK/NP
//      scores), then m_new = max(m, tile max), alpha = e^(m - m_new) per row (BQ threads);
//   3. thread c writes p[r][c] = e^(s[r] - m_new[r]);
//   4. thread t = (slot, lane) owns the 8 output columns lane * 8 .. lane * 8 + 7 of all NR rows
//      (acc [BQ][8] in registers) for the keys slot, slot + KS, ... of the tile (LK = DMAX / 8
//      lanes cover a key's row of V, KS = NT / LK keys are read at once): each key's V row is
//      read as 16-byte loads (8 keys' loads in flight per thread), and each element serves all
//      NR rows; acc and l = sum p are rescaled by alpha first.
// After the last tile the KS slots' partial (acc, l) are summed in shared memory (log2 KS
// halving rounds) and slot 0 writes o and lse (or the split's partials).
// 5 barriers per tile of BK = NT keys (128, or 64 for the _t64 variants); no subgroup
// operations; shared memory under 32 KiB (lavapipe).
// ATTN_WIDE (flags bit 3, set by the launcher when D % 8 == 0 and both pools start 16-byte
// aligned): K and V rows are read 8 elements per load; otherwise element by element.
// QF32: q and o are f32 whatever the pools' type (a model with f32 activations and a 16-bit
// cache needs no cast before or after the call).
//
// variant: d64 DMAX=64 NT=128
// variant: d128 DMAX=128 NT=128
// variant: d256 DMAX=256 NT=128
// variant: d64_f16 DMAX=64 NT=128 DT_F16
// variant: d128_f16 DMAX=128 NT=128 DT_F16
// variant: d256_f16 DMAX=256 NT=128 DT_F16
// variant: d64_bf16 DMAX=64 NT=128 DT_BF16
// variant: d128_bf16 DMAX=128 NT=128 DT_BF16
// variant: d256_bf16 DMAX=256 NT=128 DT_BF16
// variant: d64_f16_q32 DMAX=64 NT=128 DT_F16 QF32
// variant: d128_f16_q32 DMAX=128 NT=128 DT_F16 QF32
// variant: d256_f16_q32 DMAX=256 NT=128 DT_F16 QF32
// variant: d64_bf16_q32 DMAX=64 NT=128 DT_BF16 QF32
// variant: d128_bf16_q32 DMAX=128 NT=128 DT_BF16 QF32
// variant: d256_bf16_q32 DMAX=256 NT=128 DT_BF16 QF32
// _t64: tiles of 64 keys on 64 threads (head dims up to 128), for calls with few workgroups
// (batch 1 decode): twice the splits of a row, half the work and one halving round less per
// workgroup, so a short cache is spread over more SMs.
// variant: d64_t64 DMAX=64 NT=64
// variant: d64_f16_t64 DMAX=64 NT=64 DT_F16
// variant: d64_bf16_t64 DMAX=64 NT=64 DT_BF16
// variant: d64_f16_q32_t64 DMAX=64 NT=64 DT_F16 QF32
// variant: d64_bf16_q32_t64 DMAX=64 NT=64 DT_BF16 QF32
// variant: d128_t64 DMAX=128 NT=64
// variant: d128_f16_t64 DMAX=128 NT=64 DT_F16
// variant: d128_bf16_t64 DMAX=128 NT=64 DT_BF16
// variant: d128_f16_q32_t64 DMAX=128 NT=64 DT_F16 QF32
// variant: d128_bf16_q32_t64 DMAX=128 NT=64 DT_BF16 QF32
// _g4: groups of 4 loads (KG = VG = 4) instead of 8, a shorter unrolled body: what generation
// of a bf16 model runs (f32 q/o over bf16 pools). Within a decode step on an H200 (1.1B, 640
// keys) batch 64 made 11,789 against 11,005 tokens/s and batch 1 292 against 240, though the
// kernel alone times the same (83 µs at batch 64): the step's other kernels run between two
// calls, so the cost is not the kernel's own work (docs/bench/h200-2026-12-04-j/log7).
// variant: d64_bf16_q32_g4 DMAX=64 NT=128 DT_BF16 QF32 G4
// variant: d128_bf16_q32_g4 DMAX=128 NT=128 DT_BF16 QF32 G4
// _rope (ROPE): a decode step (Tq = 1) that rotates its new token and stores it itself, instead
// of decode_rope_store.comp in a dispatch before (see attention/decode_rope_in.glsl): q, the new
// k and v come unrotated in f32, so only the f32-activation variants of the 128-key tile.
// variant: d64_rope DMAX=64 NT=128 ROPE
// variant: d128_rope DMAX=128 NT=128 ROPE
// variant: d256_rope DMAX=256 NT=128 ROPE
// variant: d64_f16_q32_rope DMAX=64 NT=128 DT_F16 QF32 ROPE
// variant: d128_f16_q32_rope DMAX=128 NT=128 DT_F16 QF32 ROPE
// variant: d256_f16_q32_rope DMAX=256 NT=128 DT_F16 QF32 ROPE
// variant: d64_bf16_q32_rope DMAX=64 NT=128 DT_BF16 QF32 ROPE
// variant: d128_bf16_q32_rope DMAX=128 NT=128 DT_BF16 QF32 ROPE
// variant: d256_bf16_q32_rope DMAX=256 NT=128 DT_BF16 QF32 ROPE
// variant: d64_bf16_q32_g4_rope DMAX=64 NT=128 DT_BF16 QF32 G4 ROPE
// variant: d128_bf16_q32_g4_rope DMAX=128 NT=128 DT_BF16 QF32 G4 ROPE
#include "attention/attention.glsl"

#define BQ 8
// ROPE reads q as f32 whatever the pools' type (for f32 pools DIn is f32 already).
#if defined(QF32) || defined(ROPE)
#define QIn F32In
#define QBuf F32Buf
float ldq(QIn b, uint i) { return b.v[i]; }
void stq(QBuf b, uint i, float x) { b.v[i] = x; }
#else
#define QIn DIn
#define QBuf DBuf
float ldq(QIn b, uint i) { return ld(b, i); }
void stq(QBuf b, uint i, float x) { st(b, i, x); }
#endif

layout(local_size_x = NT) in;
// Specialization constant 0: cost probes for `vkformers bench decode --probe` (wrong results;
// never set otherwise): bit 1 skips the K loads of the score pass, 2 the V pass, 4 the halving
// sums of the slots, 8 the max and probability passes (their barriers included).
layout(constant_id = 0) const uint PROBE = 0;
// The split partials and the tile counters, read and written past the non-coherent caches a
// workgroup may read through (another workgroup of the same dispatch wrote them).
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer F32Coh { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer U32Coh { uint v[]; };
layout(push_constant) uniform Push {
    QIn q;
    DIn k;
    DIn v;
    I32In table;  // [B, max_blocks]
    I32In lens;   // [B]
    F32In slopes; // [Hq] (read when flags & ATTN_ALIBI)
    F32In sinks;  // [Hq] (read when flags & DECODE_SINKS)
    QBuf o;       // [B, Tq, Hq, Dv]
    F32Buf lse;   // [B, Hq, Tq]
    F32Buf work;  // splits > 1: acc [B, Hq, Tq, S, D], then (m, l) [B, Hq, Tq, S, 2]
    U32Coh counters;  // splits > 1: [B, grid y] finished splits of each row tile, 0 between calls
    DBuf o16;         // flags & DECODE_O16: o again in the pools' 16-bit type [B, Tq, Hq, Dv]
#if defined(ROPE)
    F32In kn;       // the new keys [B, Hkv, D] f32 unrotated, rows kv_stride apart
    F32In vn;       // the new values, likewise
    I32In pos;      // [B] the new token's rotary position
    I32In slots;    // [B] the new token's pool row (< 0: not stored)
    F32In inv_freq; // [R/2]
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
    uint tile_rows; // rows of a row tile, 1..BQ (see the grid comment)
#if defined(ROPE)
    uint rot_dim;
    uint interleaved;
    float mscale;
    uint pool_rows;  // slots at or past it are not stored
    uint q_stride;   // elements between rows of q (the packed product's width, or Hq D)
    uint kv_stride;  // ... of kn and vn
#endif
} pc;
#include "attention/decode_score.glsl"

#define ATTN_WIDE 8u
#define DECODE_SINKS 16u
// f32 o over 16-bit pools (QF32 variants): o is written a second time, rounded to the pools'
// type as the cast kernels round, into o16: the copy a tensor-core product reading o next
// (o_proj, on more rows than the GEMV takes) would otherwise make with a cast dispatch.
#define DECODE_O16 32u
#define BK NT
// Columns per thread in the output pass (one 16-byte load of 16-bit V), threads per key row,
// keys read at once (slots), keys per slot per tile.
#define CW 8
#define LK (DMAX / CW)
#define KS (NT / LK)
#define KPS (BK / KS)
// Groups of CW elements of K whose loads are issued together; keys of V likewise.
#if defined(G4)
#define KG 4
#define VG 4
#else
#define KG 8
#define VG 8
#endif
// Parts of the tile max: NP threads per row, each over BK / NP keys.
#define NP (NT / BQ)
// Pool row of a key that is not in the row's table (never read).
const uint NO_ROW = 0xffffffffu;
#if defined(ROPE)
#include "rope/sincos.glsl"
#include "attention/decode_rope_in.glsl"
#endif

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer U4In { uvec4 v[]; };

// o[i] = x, and its 16-bit twin when asked (DECODE_O16).
void store_o(uint i, float x) {
    stq(pc.o, i, x);
#if defined(QF32)
    if ((pc.flags & DECODE_O16) != 0u) {
        st(pc.o16, i, x);
    }
#endif
}

shared vec4 sq4[BQ * DMAX / 4]; // the tile's q rows, zero past D and past NR
shared float sp[BQ * BK];       // scores, then probabilities: [row][key]
shared float spart[NP * BQ];
shared float sm[BQ];
shared float salpha[BQ];
shared uint srow[BK];
// Halving sums of the slots' partials: acc [KS / 2][BQ][DMAX], l [KS / 2][BQ].
shared float red[(KS / 2) * BQ * DMAX];
shared float lred[(KS / 2) * BQ];

// Elements e .. e + 7 of a pool (e % 8 == 0, pool 16-byte aligned) widened to f32.
void load8_wide(DIn buf, uint e, out float x[CW]) {
#if defined(DT_F16) || defined(DT_BF16)
    uvec4 w = U4In(uint64_t(buf) + uint64_t(e) * 2ul).v[0];
    [[unroll]] for (uint h = 0; h < 4; h++) {
#if defined(DT_F16)
        vec2 p = unpackHalf2x16(w[h]);
#else
        vec2 p = uintBitsToFloat(uvec2(w[h] << 16, w[h] & 0xffff0000u));
#endif
        x[2 * h] = p.x;
        x[2 * h + 1] = p.y;
    }
#else
    U4In p = U4In(uint64_t(buf) + uint64_t(e) * 4ul);
    vec4 a = uintBitsToFloat(p.v[0]);
    vec4 c = uintBitsToFloat(p.v[1]);
    x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
    x[4] = c.x; x[5] = c.y; x[6] = c.z; x[7] = c.w;
#endif
}

// Columns c0 .. c0 + 7 (c0 < n) of the head row starting at element `base`: zeros past n.
void load8(DIn buf, uint base, uint c0, uint n, out float x[CW]) {
    if ((pc.flags & ATTN_WIDE) != 0u) {
        load8_wide(buf, base + c0, x);
    } else {
        [[unroll]] for (uint u = 0; u < CW; u++) {
            x[u] = c0 + u < n ? ld(buf, base + c0 + u) : 0.0;
        }
    }
}

// Pool row of key j of row b (NO_ROW at or past kend, or for a block id outside the pool).
uint pool_row(uint b, uint j, uint kend) {
    if (j >= kend) {
        return NO_ROW;
    }
    int blk = pc.table.v[b * pc.max_blocks + j / pc.block_size];
    return blk >= 0 && uint(blk) < pc.num_blocks ? uint(blk) * pc.block_size + j % pc.block_size : NO_ROW;
}

// Query head of tile row r (query i = r / G, head hk * G + r % G).
uint head_of(uint r, uint hk, uint G) {
    return hk * G + (r - (r / G) * G);
}

// Step 1: this thread's key (k0 + tid) scored against the NR query rows into sp[rr][tid].
void score_key(uint b, uint hk, uint k0, uint kend, uint r0, uint nr, int first_q) {
    uint tid = gl_LocalInvocationID.x;
    uint G = pc.hq / pc.hkv;
    uint j = k0 + tid;
    uint row = pool_row(b, j, kend);
#if defined(ROPE)
    row = row != NO_ROW && j == new_key ? NEW_ROW : row;
#endif
    srow[tid] = row;
    float s[BQ];
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        s[rr] = 0.0;
    }
    if (row != NO_ROW && (PROBE & 1u) == 0u) {
        uint base = (row * pc.hkv + hk) * pc.d;
        // KG * CW elements of K per group, all loads issued before any is used. c0 < D, and
        // c0 + KG * CW <= DMAX (DMAX is a multiple of 64), so every sq4 index is in the tile.
        for (uint c0 = 0; c0 < pc.d; c0 += KG * CW) {
            float kv[KG][CW];
            [[unroll]] for (uint g = 0; g < KG; g++) {
                if (c0 + g * CW < pc.d) {
#if defined(ROPE)
                    if (row == NEW_ROW) {
                        [[unroll]] for (uint u = 0; u < CW; u++) kv[g][u] = snk[c0 + g * CW + u];
                    } else
#endif
                    load8(pc.k, base, c0 + g * CW, pc.d, kv[g]);
                } else {
                    [[unroll]] for (uint u = 0; u < CW; u++) kv[g][u] = 0.0;
                }
            }
            [[unroll]] for (uint g = 0; g < KG; g++) {
                uint c4 = (c0 + g * CW) / 4;
                vec4 lo = vec4(kv[g][0], kv[g][1], kv[g][2], kv[g][3]);
                vec4 hi = vec4(kv[g][4], kv[g][5], kv[g][6], kv[g][7]);
                [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
                    if (rr < nr) {
                        s[rr] += dot(sq4[rr * (DMAX / 4) + c4], lo) + dot(sq4[rr * (DMAX / 4) + c4 + 1], hi);
                    }
                }
            }
        }
    }
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        if (rr < nr) {
            uint r = r0 + rr;
            int qpos = first_q + int(r / G);
            bool vis = row != NO_ROW && dec_visible(qpos, int(j));
            sp[rr * BK + tid] = vis ? dec_score(s[rr], head_of(r, hk, G), qpos, int(j)) : MASKED;
        }
    }
}

// Step 2: running max and rescale factor of every row.
void update_max(uint nr) {
    uint tid = gl_LocalInvocationID.x;
    uint rr = tid % BQ;
    uint part = tid / BQ;
    if (rr < nr) {
        float m = MASKED;
        for (uint c = part * (BK / NP); c < (part + 1u) * (BK / NP); c++) {
            m = max(m, sp[rr * BK + c]);
        }
        spart[part * BQ + rr] = m;
    }
    barrier();
    if (tid < nr) {
        float m_old = sm[tid];
        float m = m_old;
        for (uint p = 0; p < NP; p++) {
            m = max(m, spart[p * BQ + tid]);
        }
        salpha[tid] = exp(m_old - m);
        sm[tid] = m;
    }
}

// Step 3: p = e^(s - m) of this thread's key (0 for a key outside the table).
void probabilities(uint nr) {
    uint tid = gl_LocalInvocationID.x;
    bool here = srow[tid] != NO_ROW;
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        if (rr < nr) {
            float m = sm[rr];
            sp[rr * BK + tid] = here && m > MASKED ? exp(sp[rr * BK + tid] - m) : 0.0;
        }
    }
}

// Step 4: acc[rr][e] += sum over this slot's keys c of p[rr][c] * V[c][c0 + e], l[rr] += p.
void accumulate(uint hk, uint nr, uint slot, uint c0, inout float acc[BQ][CW], inout float lsum[BQ]) {
    bool live = c0 < pc.dvh;
    // Not unrolled: a group's body is already 8 keys x 8 rows x 8 columns (lavapipe compiles a
    // fully unrolled d256 body for tens of seconds); acc and vv keep constant indices inside.
    [[dont_unroll]] for (uint k = 0; k < KPS; k += VG) {
        float vv[VG][CW];
        [[unroll]] for (uint u = 0; u < VG; u++) {
            uint row = srow[slot + KS * (k + u)];
#if defined(ROPE)
            if (live && row == NEW_ROW) {
                [[unroll]] for (uint e = 0; e < CW; e++) vv[u][e] = snv[c0 + e];
            } else
#endif
            if (live && row != NO_ROW) {
                load8(pc.v, (row * pc.hkv + hk) * pc.vrow, c0, pc.dvh, vv[u]);
            } else {
                [[unroll]] for (uint e = 0; e < CW; e++) vv[u][e] = 0.0;
            }
        }
        [[unroll]] for (uint u = 0; u < VG; u++) {
            uint c = slot + KS * (k + u);
            [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
                if (rr < nr) {
                    float p = sp[rr * BK + c];
                    lsum[rr] += p;
                    [[unroll]] for (uint e = 0; e < CW; e++) acc[rr][e] += p * vv[u][e];
                }
            }
        }
    }
}

// Sum of the KS slots' (acc, l) into slot 0, in halving rounds through shared memory.
void reduce_slots(uint nr, uint slot, uint lane, inout float acc[BQ][CW], inout float lsum[BQ]) {
    uint c0 = lane * CW;
    [[dont_unroll]] for (uint half_ = KS / 2; half_ > 0u; half_ /= 2u) {
        barrier();
        if (slot >= half_ && slot < 2u * half_) {
            uint at = slot - half_;
            [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
                if (rr < nr) {
                    [[unroll]] for (uint e = 0; e < CW; e++) red[(at * BQ + rr) * DMAX + c0 + e] = acc[rr][e];
                    if (lane == 0u) lred[at * BQ + rr] = lsum[rr];
                }
            }
        }
        barrier();
        if (slot < half_) {
            [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
                if (rr < nr) {
                    [[unroll]] for (uint e = 0; e < CW; e++) acc[rr][e] += red[(slot * BQ + rr) * DMAX + c0 + e];
                    lsum[rr] += lred[slot * BQ + rr];
                }
            }
        }
    }
}

// This workgroup's result rows: o and lse (S = 1), or its split's partials (acc, m, l).
void write_rows(uint b, uint hk, uint r0, uint nr, uint split, uint c0, uint lane, float acc[BQ][CW], float lsum[BQ]) {
    uint DV = pc.dvh;
    uint G = pc.hq / pc.hkv;
    F32Coh work = F32Coh(uint64_t(pc.work));
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        if (rr < nr) {
            uint r = r0 + rr;
            uint i = r / G;
            uint h = head_of(r, hk, G);
            uint qrow = (b * pc.hq + h) * pc.tq + i;
            float l = lsum[rr];
            float m = sm[rr];
            // The sink joins the denominator once, so only an unsplit call folds it here.
            float a = (pc.flags & DECODE_SINKS) != 0u && pc.splits == 1u ? attn_fold_sink(pc.sinks.v[h], m, l) : 1.0;
            [[unroll]] for (uint e = 0; e < CW; e++) {
                uint dd = c0 + e;
                if (dd < DV) {
                    if (pc.splits == 1u) {
                        store_o(((b * pc.tq + i) * pc.hq + h) * DV + dd, l > 0.0 ? acc[rr][e] * a / l : 0.0);
                    } else {
                        work.v[(qrow * pc.splits + split) * DV + dd] = acc[rr][e];
                    }
                }
            }
            if (lane == 0u) {
                if (pc.splits == 1u) {
                    pc.lse.v[qrow] = l > 0.0 ? m + log(l) : MASKED;
                } else {
                    uint ml = gl_NumWorkGroups.z * pc.hq * pc.tq * pc.splits * DV;
                    work.v[ml + 2u * (qrow * pc.splits + split)] = sm[rr];
                    work.v[ml + 2u * (qrow * pc.splits + split) + 1u] = l;
                }
            }
        }
    }
}

shared uint slast;
// Per tile row: the merge's max M (the partials' scale), denominator L and sink factor.
shared float smax[BQ];
shared float stotal[BQ];
shared float ssink[BQ];

// Split calls: counts this workgroup's split done; the tile's last one merges the S partials
// of its NR rows into o and lse (the math of the module comment, and of a sink as one more
// partial with m = s_h, l = 1, acc = 0).
void merge_if_last(uint b, uint hk, uint r0, uint nr) {
    uint tid = gl_LocalInvocationID.x;
    uint tile = b * gl_NumWorkGroups.y + gl_WorkGroupID.y;
    memoryBarrierBuffer(); // this workgroup's partials before its count
    barrier();
    if (tid == 0u) {
        uint done = atomicAdd(pc.counters.v[tile], 1u);
        slast = done == pc.splits - 1u ? 1u : 0u;
        if (done == pc.splits - 1u) {
            atomicExchange(pc.counters.v[tile], 0u);
        }
    }
    barrier();
    if (slast == 0u) {
        return;
    }
    memoryBarrierBuffer(); // the other splits' partials after their counts
    uint S = pc.splits;
    uint DV = pc.dvh;
    uint G = pc.hq / pc.hkv;
    uint ml = gl_NumWorkGroups.z * pc.hq * pc.tq * S * DV;
    F32Coh work = F32Coh(uint64_t(pc.work));
    if (tid < nr) {
        uint r = r0 + tid;
        uint h = head_of(r, hk, G);
        uint qrow = (b * pc.hq + h) * pc.tq + r / G;
        float big = MASKED;
        for (uint s = 0; s < S; s++) {
            big = max(big, work.v[ml + 2u * (qrow * S + s)]);
        }
        float total = 0.0;
        float big0 = big;
        for (uint s = 0; s < S; s++) {
            float m = work.v[ml + 2u * (qrow * S + s)];
            total += m <= MASKED ? 0.0 : work.v[ml + 2u * (qrow * S + s) + 1u] * exp(m - big0);
        }
        // Partials are scaled by e^(m_s - big0); the sink rescales them all by a = e^(big0 - big).
        float a = (pc.flags & DECODE_SINKS) != 0u ? attn_fold_sink(pc.sinks.v[h], big, total) : 1.0;
        smax[tid] = big0;
        stotal[tid] = total;
        ssink[tid] = a;
        pc.lse.v[qrow] = total > 0.0 ? big + log(total) : MASKED;
    }
    barrier();
    for (uint e = tid; e < nr * DV; e += NT) {
        uint rr = e / DV;
        uint dd = e - rr * DV;
        uint r = r0 + rr;
        uint i = r / G;
        uint h = head_of(r, hk, G);
        uint qrow = (b * pc.hq + h) * pc.tq + i;
        float acc = 0.0;
        for (uint s = 0; s < S; s++) {
            float m = work.v[ml + 2u * (qrow * S + s)];
            acc += m <= MASKED ? 0.0 : work.v[(qrow * S + s) * DV + dd] * exp(m - smax[rr]);
        }
        float total = stotal[rr];
        store_o(((b * pc.tq + i) * pc.hq + h) * DV + dd, total > 0.0 ? acc * ssink[rr] / total : 0.0);
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint split = gl_WorkGroupID.x;
    uint b = gl_WorkGroupID.z;
    uint D = pc.d;
    uint G = pc.hq / pc.hkv;
    uint R = G * pc.tq;
    uint TR = pc.tile_rows;
    uint rtiles = (R + TR - 1) / TR;
    uint hk = gl_WorkGroupID.y / rtiles;
    uint r0 = (gl_WorkGroupID.y - hk * rtiles) * TR;
    uint nr = min(TR, R - r0);

    // Keys of the row: [lo, hi); a table never holds more than max_blocks * BS of them.
    int hi = min(pc.lens.v[b], int(pc.max_blocks * pc.block_size));
    int first_q = pc.lens.v[b] - int(pc.tq);
    int lo = pc.window != 0u ? max(0, first_q + 1 - int(pc.window)) : 0;
    if (pc.chunk != 0u && first_q >= 0) {
        // The first query's chunk starts at the first key any row of the tile can see.
        lo = max(lo, int(uint(first_q) / pc.chunk * pc.chunk));
    }
    int n = max(hi - lo, 0);
    int per = ((n + int(pc.splits) - 1) / int(pc.splits) + BK - 1) / BK * BK;
    uint kbeg = uint(lo + int(split) * per);
    uint kend = uint(max(min(hi, lo + int(split + 1u) * per), lo));

    // The q tile, zero past D and past NR (the score pass reads every column < roundup(D, 64)).
    for (uint e = tid; e < BQ * DMAX; e += NT) {
        uint rr = e / DMAX;
        uint dd = e - rr * DMAX;
        uint r = r0 + rr;
#if defined(ROPE)
        // Tq = 1: tile row r is query head head_of(r) of token b, rotated as it is read.
        float x = rr < nr && dd < D ? rope_elem(pc.q, b * pc.q_stride + head_of(r, hk, G) * D, dd, pc.pos.v[b]) : 0.0;
#else
        float x = rr < nr && dd < D ? ldq(pc.q, ((b * pc.tq + r / G) * pc.hq + head_of(r, hk, G)) * D + dd) : 0.0;
#endif
        sq4[e / 4][e % 4] = x;
    }
#if defined(ROPE)
    new_key = take_new_key(b, hk, r0 == 0u && split == 0u, kbeg, kend);
#endif
    if (tid < BQ) {
        sm[tid] = MASKED;
    }
    uint slot = tid / LK;
    uint lane = tid % LK;
    uint c0 = lane * CW;
    float acc[BQ][CW];
    float lsum[BQ];
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        lsum[rr] = 0.0;
        [[unroll]] for (uint e = 0; e < CW; e++) acc[rr][e] = 0.0;
    }

    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        barrier(); // sq written; the previous tile's sp and srow read
        score_key(b, hk, k0, kend, r0, nr, first_q);
        barrier();
        if ((PROBE & 8u) == 0u) {
            update_max(nr);
            barrier();
            probabilities(nr);
            barrier();
        }
        [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
            if (rr < nr) {
                float a = salpha[rr];
                lsum[rr] *= a;
                [[unroll]] for (uint e = 0; e < CW; e++) acc[rr][e] *= a;
            }
        }
        if ((PROBE & 2u) == 0u) {
            accumulate(hk, nr, slot, c0, acc, lsum);
        }
    }
    if ((PROBE & 4u) == 0u) {
        reduce_slots(nr, slot, lane, acc, lsum);
    }

    if (slot == 0u && c0 < pc.dvh) {
        write_rows(b, hk, r0, nr, split, c0, lane, acc, lsum);
    }
    if (pc.splits > 1u) {
        merge_if_last(b, hk, r0, nr);
    }
}
