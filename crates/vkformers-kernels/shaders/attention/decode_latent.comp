#version 460
#include "common.glsl"
#include "dtype.glsl"
#extension GL_EXT_control_flow_attributes : require
// Multi-head latent attention's absorbed decode over a paged latent cache whose rows are wider
// than decode.comp's 256 columns (DeepSeek-V2/V3, Kimi-K2: 512 + 64 = 576; MiniCPM3: 288).
//
//   q [B, Tq, Hq, D]; pool [NB·BS, D] holds one latent row [c | k_rot] per position (one key
//   "head" shared by every query head); the values are each row's first Dv (pc.dvh) columns, c.
//   table [B, MAXB] int32, lens [B] int32 as decode.comp: key j of row b lives at pool row
//   table[b, j / BS] · BS + j % BS; query i of row b sits at qpos = lens[b] − Tq + i.
//   o [B, Tq, Hq, Dv]; lse [B, Hq, Tq] (f32). Masks and scores as decode.comp (decode_score.glsl:
//   causal, window, chunk, softcap, ALiBi; no sinks).
//
// Every query head reads the same latent row, so a workgroup serves QR = 16 query rows at once
// (rows r = i · Hq + h of the R = Tq · Hq rows of a sequence, in tiles of QR) and reads each key
// tile once for all of them: per tile of BK = 8 keys,
//   1. the tile's latent rows go to shared memory sk [BK][DMAX / 4] (vec4s; zeros past D, and for
//      keys outside the row or the split). LATENT_WIDE (flags bit 5, set by the launcher when
//      D % 8 == 0 and the pool starts 16-byte aligned, unless VKFORMERS_LATENT_WIDE=0): each
//      thread issues its GPT 16-byte loads of the *next* tile right after the current one is in
//      shared memory, so they are in flight during this tile's math (software pipelining; the
//      raw words wait in registers and are widened on the store). Otherwise (odd widths) each
//      thread loads 4 elements a step, one table read per 4 elements.
//   2. thread (p, s) (tid = p · SL + s, SL = 16 slices) holds query rows p · RPT + t (RPT = 2)
//      as vec4 chunks c · SL + s (in registers, DMAX / 4 / SL of them a row) and dots them with
//      the BK keys: each shared read of a key chunk serves RPT rows. The SL partial dots of each
//      (row, key) are summed through shared memory by thread r · BK + key, which applies the mask
//      and the score (QR · BK = NT: one score a thread);
//   3. thread (p, s) runs the online softmax of its rows over the tile (the SL threads of a row
//      the same, from the shared scores) and adds p · c to its output chunks c · SL + s, read
//      from the same shared rows (8 threads of a row read 8 consecutive vec4s, 128 bytes: no bank
//      conflicts). Chunks whose first column is past D (dots) or Dv (values: k_rot) are skipped.
// 4 barriers a tile. Shared memory: BK · DMAX + QR · BK · SL + QR · BK floats (27 KiB at
// DMAX = 576, under lavapipe's 32 KiB). No subgroup operations. q: LATENT_QWIDE (bit 6; D % 8 == 0
// and q 16-byte aligned) reads a chunk of 4 q values in one load, else element by element.
//
// Split-KV: grid x = splits S. Each row's visible key range [lo, lens[b]) is cut into S chunks
// (multiples of BK keys), one per workgroup; with S = 1 the workgroup writes o and lse, else its
// unnormalised partials to `work` (acc = Σ e^(s − m) c [B, R, S, Dv], then (m, l) [B, R, S, 2]),
// and the MERGE variant (a second dispatch, one workgroup per (row, b)) combines them:
//   M = max_s m_s;  L = Σ_s l_s e^(m_s − M);  o = Σ_s acc_s e^(m_s − M) / L;  lse = M + log L.
// Grid y = row tiles, z = B. QF32: q and o are f32 whatever the pool's type.
//
// variant: d320 DMAX=320
// variant: d576 DMAX=576
// variant: d320_f16 DMAX=320 DT_F16
// variant: d576_f16 DMAX=576 DT_F16
// variant: d320_bf16 DMAX=320 DT_BF16
// variant: d576_bf16 DMAX=576 DT_BF16
// variant: d320_f16_q32 DMAX=320 DT_F16 QF32
// variant: d576_f16_q32 DMAX=576 DT_F16 QF32
// variant: d320_bf16_q32 DMAX=320 DT_BF16 QF32
// variant: d576_bf16_q32 DMAX=576 DT_BF16 QF32
// The merge of the splits, o stored as f32 / f16 / bf16.
// variant: merge MERGE DMAX=8
// variant: merge_f16 MERGE DMAX=8 DT_F16
// variant: merge_bf16 MERGE DMAX=8 DT_BF16
#include "attention/attention.glsl"

#if defined(QF32)
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

#define NT 128
#define QR 16
// Query rows per thread (each shared read of a key serves RPT rows), slices of a row.
#define RPT 2
#define SL (NT * RPT / QR)
#define BK 8
// vec4 chunks of a row, and of a thread's slice of it.
#define C4 (DMAX / 4)
#define CS (C4 / SL)
#define LATENT_WIDE 32u
#define LATENT_QWIDE 64u
// Elements of one 16-byte load of the pool, and such loads per row and per thread per tile.
#if defined(DT_F16) || defined(DT_BF16)
#define EPG 8
#else
#define EPG 4
#endif
#define GPR (DMAX / EPG)
#define GPT ((BK * GPR + NT - 1) / NT)

layout(local_size_x = NT) in;
layout(push_constant) uniform Push {
    QIn q;        // [B, Tq, Hq, D]
    DIn pool;     // [NB · BS, D]
    I32In table;  // [B, max_blocks]
    I32In lens;   // [B]
    F32In slopes; // [Hq] (read when flags & ATTN_ALIBI)
    QBuf o;       // [B, Tq, Hq, Dv]
    F32Buf lse;   // [B, Hq, Tq]
    F32Buf work;  // splits > 1: acc [B, R, S, Dv], then (m, l) [B, R, S, 2]
    uint tq;
    uint hq;
    uint d;
    uint dvh;
    uint flags;
    uint window;
    float scale;
    float softcap;
    uint block_size;
    uint max_blocks;
    uint num_blocks;
    uint splits;
    uint chunk;
} pc;
#include "attention/decode_score.glsl"

// Pool row of a key that is not in the row's table or the split (never read).
const uint NO_ROW = 0xffffffffu;

#if defined(MERGE)
// Most splits (MAX_SPLITS of decode_latent.rs).
#define MAXS 64
shared float sw[MAXS]; // e^(m_s − M) of each split (0 for an empty one)

// One workgroup per (query row, b): the S partials of the row into o and lse.
void main() {
    uint tid = gl_LocalInvocationID.x;
    uint r = gl_WorkGroupID.x;
    uint b = gl_WorkGroupID.y;
    uint R = pc.tq * pc.hq;
    uint S = pc.splits;
    uint DV = pc.dvh;
    uint row = b * R + r;
    uint ml = gl_NumWorkGroups.y * R * S * DV;
    float big = MASKED;
    for (uint s = 0; s < S; s++) {
        big = max(big, pc.work.v[ml + 2u * (row * S + s)]);
    }
    // One exp a split (thread s), not one a split per output column.
    if (tid < S) {
        float m = pc.work.v[ml + 2u * (row * S + tid)];
        sw[tid] = m <= MASKED ? 0.0 : exp(m - big);
    }
    barrier();
    float total = 0.0;
    for (uint s = 0; s < S; s++) {
        total += sw[s] == 0.0 ? 0.0 : pc.work.v[ml + 2u * (row * S + s) + 1u] * sw[s];
    }
    for (uint e = tid; e < DV; e += NT) {
        float acc = 0.0;
        for (uint s = 0; s < S; s++) {
            acc += sw[s] == 0.0 ? 0.0 : pc.work.v[(row * S + s) * DV + e] * sw[s];
        }
        stq(pc.o, row * DV + e, total > 0.0 ? acc / total : 0.0);
    }
    if (tid == 0u) {
        uint i = r / pc.hq;
        uint h = r - i * pc.hq;
        pc.lse.v[(b * pc.hq + h) * pc.tq + i] = total > 0.0 ? big + log(total) : MASKED;
    }
}
#else
shared vec4 sk[BK * C4];           // the tile's latent rows
shared float spart[QR * BK * SL];  // partial dots [row][key][slice]
shared float ss[QR * BK];          // scores [row][key]
shared uint srow[BK];

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer U4In { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer U2In { uvec2 v[]; };

// Two 16-bit values of a word (low half first) widened to f32.
vec2 unpack2(uint w) {
#if defined(DT_F16)
    return unpackHalf2x16(w);
#else
    return uintBitsToFloat(uvec2(w << 16, w & 0xffff0000u));
#endif
}

// Pool row of key j of row b (NO_ROW at or past kend, or for a block id outside the pool).
uint pool_row(uint b, uint j, uint kend) {
    if (j >= kend) {
        return NO_ROW;
    }
    int blk = pc.table.v[b * pc.max_blocks + j / pc.block_size];
    return blk >= 0 && uint(blk) < pc.num_blocks ? uint(blk) * pc.block_size + j % pc.block_size : NO_ROW;
}

// Step 1, wide: this thread's GPT 16-byte loads of keys k0 .. k0 + BK − 1 (load g of the tile:
// key g / GPR, elements EPG · (g % GPR) ..), raw; zeros (0.0 in every type) for keys outside
// [.., kend) and columns past D. All GPT are independent: issued back to back.
void fetch_wide(uint b, uint k0, uint kend, out uvec4 raw[GPT]) {
    uint tid = gl_LocalInvocationID.x;
    [[unroll]] for (uint i = 0; i < GPT; i++) {
        uint g = tid + i * NT;
        uint j = g / GPR;
        uint col = (g - j * GPR) * EPG;
        uint row = g < BK * GPR ? pool_row(b, k0 + j, kend) : NO_ROW;
        raw[i] = uvec4(0u);
        if (row != NO_ROW && col < pc.d) {
            uint64_t at = uint64_t(pc.pool) + uint64_t(row * pc.d + col) * uint64_t(EPG == 8 ? 2 : 4);
            raw[i] = U4In(at).v[0];
        }
    }
}

// Step 1, wide: the fetched words widened into sk (load g fills EPG / 4 consecutive chunks).
void store_wide(uvec4 raw[GPT]) {
    uint tid = gl_LocalInvocationID.x;
    [[unroll]] for (uint i = 0; i < GPT; i++) {
        uint g = tid + i * NT;
        if (g < BK * GPR) {
            uint j = g / GPR;
            uint at = j * C4 + (g - j * GPR) * (EPG / 4);
#if EPG == 8
            sk[at] = vec4(unpack2(raw[i].x), unpack2(raw[i].y));
            sk[at + 1u] = vec4(unpack2(raw[i].z), unpack2(raw[i].w));
#else
            sk[at] = uintBitsToFloat(raw[i]);
#endif
        }
    }
}

// Step 1, element path (any D, any alignment): chunk e of the tile (key e / C4) four elements
// at a time, zeros past D and for keys outside [.., kend).
void load_tile(uint b, uint k0, uint kend) {
    uint tid = gl_LocalInvocationID.x;
    for (uint e = tid; e < BK * C4; e += NT) {
        uint j = e / C4;
        uint col = (e - j * C4) * 4u;
        uint row = pool_row(b, k0 + j, kend);
        vec4 x = vec4(0.0);
        if (row != NO_ROW) {
            [[unroll]] for (uint u = 0; u < 4; u++) {
                x[u] = col + u < pc.d ? ld(pc.pool, row * pc.d + col + u) : 0.0;
            }
        }
        sk[e] = x;
    }
}

// Columns col .. col + 3 of the query row starting at element `base` (zeros past D).
vec4 load_q4(uint base, uint col) {
    if ((pc.flags & LATENT_QWIDE) != 0u) {
        if (col >= pc.d) {
            return vec4(0.0);
        }
#if defined(QF32) || !(defined(DT_F16) || defined(DT_BF16))
        return uintBitsToFloat(U4In(uint64_t(pc.q) + uint64_t(base + col) * 4ul).v[0]);
#else
        uvec2 w = U2In(uint64_t(pc.q) + uint64_t(base + col) * 2ul).v[0];
        return vec4(unpack2(w.x), unpack2(w.y));
#endif
    }
    vec4 x;
    [[unroll]] for (uint u = 0; u < 4; u++) {
        x[u] = col + u < pc.d ? ldq(pc.q, base + col + u) : 0.0;
    }
    return x;
}

// Step 2b: thread (row rr, key jj) sums its SL partial dots into the masked, scaled score.
void score(uint r0, uint nr, uint k0, int first_q) {
    uint tid = gl_LocalInvocationID.x;
    uint rr = tid / BK;
    uint jj = tid - rr * BK;
    float dot_qk = 0.0;
    // Slices in a rotated order: thread t starts at slice t % SL, so the 32 threads of a
    // subgroup read 32 different banks (in order, SL words apart, they would share 2).
    [[unroll]] for (uint s = 0; s < SL; s++) {
        dot_qk += spart[tid * SL + ((s + tid) & (SL - 1u))];
    }
    uint r = r0 + rr;
    int qpos = first_q + int(r / pc.hq);
    int j = int(k0 + jj);
    bool vis = rr < nr && srow[jj] != NO_ROW && dec_visible(qpos, j);
    ss[tid] = vis ? dec_score(dot_qk, r - (r / pc.hq) * pc.hq, qpos, j) : MASKED;
}

// Row `row` (= b · R + r) of this thread's rows (t): its output columns and lse, or with splits
// its unnormalised partials (acc, then m and l) in `work`.
void store_row(uint row, uint r, uint split, uint sl, vec4 acc[RPT * CS], uint t, float m, float l) {
    uint DV = pc.dvh;
    if (pc.splits == 1u) {
        vec4 inv = vec4(l > 0.0 ? 1.0 / l : 0.0);
        [[unroll]] for (uint c = 0; c < CS; c++) {
            vec4 x = acc[t * CS + c] * inv;
            [[unroll]] for (uint u = 0; u < 4; u++) {
                uint col = (c * SL + sl) * 4u + u;
                if (col < DV) {
                    stq(pc.o, row * DV + col, x[u]);
                }
            }
        }
        if (sl == 0u) {
            uint i = r / pc.hq;
            pc.lse.v[(gl_WorkGroupID.z * pc.hq + (r - i * pc.hq)) * pc.tq + i] = l > 0.0 ? m + log(l) : MASKED;
        }
    } else {
        uint S = pc.splits;
        [[unroll]] for (uint c = 0; c < CS; c++) {
            [[unroll]] for (uint u = 0; u < 4; u++) {
                uint col = (c * SL + sl) * 4u + u;
                if (col < DV) {
                    pc.work.v[(row * S + split) * DV + col] = acc[t * CS + c][u];
                }
            }
        }
        if (sl == 0u) {
            uint ml = gl_NumWorkGroups.z * pc.tq * pc.hq * S * DV;
            pc.work.v[ml + 2u * (row * S + split)] = m;
            pc.work.v[ml + 2u * (row * S + split) + 1u] = l;
        }
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint split = gl_WorkGroupID.x;
    uint b = gl_WorkGroupID.z;
    uint D = pc.d;
    uint DV = pc.dvh;
    uint R = pc.tq * pc.hq;
    uint r0 = gl_WorkGroupID.y * QR;
    uint nr = min(QR, R - r0);
    // This thread's rows rp · RPT + t (t < RPT) of the tile, and its slice.
    uint rp = tid / SL;
    uint sl = tid - rp * SL;

    // Keys of the row: [lo, hi); a table never holds more than max_blocks · BS of them.
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

    // Query chunks c · SL + sl of the thread's rows, q[t · CS + c] (zero past D and past the
    // real rows); acc likewise.
    vec4 q[RPT * CS];
    vec4 acc[RPT * CS];
    float m[RPT];
    float l[RPT];
    [[unroll]] for (uint t = 0; t < RPT; t++) {
        uint rr = rp * RPT + t;
        uint qbase = (b * R + r0 + rr) * D;
        [[unroll]] for (uint c = 0; c < CS; c++) {
            q[t * CS + c] = rr < nr ? load_q4(qbase, (c * SL + sl) * 4u) : vec4(0.0);
            acc[t * CS + c] = vec4(0.0);
        }
        m[t] = MASKED;
        l[t] = 0.0;
    }

    bool wide = (pc.flags & LATENT_WIDE) != 0u;
    uvec4 raw[GPT];
    if (wide) {
        fetch_wide(b, kbeg, kend, raw);
    }
    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        barrier(); // the previous tile's sk and ss read
        if (wide) {
            store_wide(raw);
        } else {
            load_tile(b, k0, kend);
        }
        if (tid < BK) {
            srow[tid] = pool_row(b, k0 + tid, kend);
        }
        barrier();
        if (wide && k0 + BK < kend) {
            // The next tile's loads, in flight while this tile's math runs.
            fetch_wide(b, k0 + BK, kend, raw);
        }
        // Keys not unrolled (the chunk loops are, for the register arrays' constant indices):
        // lavapipe compiles a body of BK x DMAX / 4 / SL products per key loop for a long time.
        // Chunks whose first column (slice 0) is past D hold zeros for every slice: skipped (a
        // branch on c alone, the same for all threads).
        [[dont_unroll]] for (uint j = 0; j < BK; j++) {
            float part[RPT];
            [[unroll]] for (uint t = 0; t < RPT; t++) {
                part[t] = 0.0;
            }
            [[unroll]] for (uint c = 0; c < CS; c++) {
                if (c * SL * 4u < D) {
                    vec4 k = sk[j * C4 + c * SL + sl];
                    [[unroll]] for (uint t = 0; t < RPT; t++) {
                        part[t] += dot(q[t * CS + c], k);
                    }
                }
            }
            [[unroll]] for (uint t = 0; t < RPT; t++) {
                spart[((rp * RPT + t) * BK + j) * SL + sl] = part[t];
            }
        }
        barrier();
        score(r0, nr, k0, first_q);
        barrier();
        [[unroll]] for (uint t = 0; t < RPT; t++) {
            uint rr = rp * RPT + t;
            float tmax = m[t];
            [[unroll]] for (uint j = 0; j < BK; j++) {
                tmax = max(tmax, ss[rr * BK + j]);
            }
            float alpha = exp(m[t] - tmax);
            l[t] *= alpha;
            [[unroll]] for (uint c = 0; c < CS; c++) {
                acc[t * CS + c] *= alpha;
            }
            m[t] = tmax;
        }
        // The value columns: chunks whose first column is at or past Dv (k_rot, zeros) skipped.
        [[dont_unroll]] for (uint j = 0; j < BK; j++) {
            float p[RPT];
            [[unroll]] for (uint t = 0; t < RPT; t++) {
                p[t] = m[t] > MASKED ? exp(ss[(rp * RPT + t) * BK + j] - m[t]) : 0.0;
                l[t] += p[t];
            }
            [[unroll]] for (uint c = 0; c < CS; c++) {
                if (c * SL * 4u < DV) {
                    vec4 v = sk[j * C4 + c * SL + sl];
                    [[unroll]] for (uint t = 0; t < RPT; t++) {
                        acc[t * CS + c] += p[t] * v;
                    }
                }
            }
        }
    }

    [[unroll]] for (uint t = 0; t < RPT; t++) {
        uint rr = rp * RPT + t;
        if (rr < nr) {
            store_row(b * R + r0 + rr, r0 + rr, split, sl, acc, t, m[t], l[t]);
        }
    }
}
#endif
