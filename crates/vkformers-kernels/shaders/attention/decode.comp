#version 460
#include "common.glsl"
#include "dtype.glsl"
#extension GL_EXT_control_flow_attributes : require
// Decode attention over a paged KV cache: few new query rows per sequence (a decode step is
// Tq = 1; speculative or chunked steps up to ~16), keys and values read through a block table.
//
//   q [B, Tq, Hq, D]; pools k, v [NB, BS, Hkv, D]; table [B, MAXB] int32; lens [B] int32
//   key j of row b (0 <= j < lens[b]) lives at pool row table[b, j / BS] * BS + j % BS
//   query i of row b sits at position qpos = lens[b] - Tq + i (the new keys are already stored)
//   visible: j < lens[b], (causal) j <= qpos, (window W) qpos - j < W
//   S = score(q . k_j) (scale, softcap, ALiBi as fwd.comp), o = softmax(S) v, lse = log sum exp S
//
// Split-KV ("flash decoding"): grid x = splits S. Each row's visible key range [lo, lens[b]) is
// cut into S chunks (a multiple of BK keys each); a workgroup runs the online softmax over its
// chunk only. With S = 1 it writes o and lse itself; otherwise it writes its unnormalised
// partials (acc = sum_j e^(S_j - m) v_j, m, l = sum_j e^(S_j - m)) to `work` and
// decode_combine.comp merges the S partials of each query row:
//   M = max_s m_s;  L = sum_s l_s e^(m_s - M);  o = sum_s acc_s e^(m_s - M) / L;  lse = M + log L.
//
// Grid y = (kv head hk, row tile): the R = G * Tq query rows (r = i * G + g, query head
// h = hk * G + g, G = Hq / Hkv) that share kv head hk go in tiles of up to BQ rows; NR <= BQ of
// them are real (a decode step of GQA has NR = G, often 3..8), and every loop over rows stops
// at NR, so small groups cost no idle rows. Grid z = B.
//
// Per tile of BK = NT keys (one key per thread):
//   1. thread c maps key k0 + c to its pool row and computes its NR scores from global K
//      (each K element read once per workgroup, q from shared memory): s[r] in registers;
//   2. the tile max of each row from NP = NT / BQ partial maxima (thread (part, row) scans BK/NP
//      scores), then m_new = max(m, tile max), alpha = e^(m - m_new) per row (BQ threads);
//   3. thread c writes p[r][c] = e^(s[r] - m_new[r]);
//   4. output element (r, d) += sum_c p[r][c] v_c[d], after scaling by alpha[r]: thread t owns
//      column d = t % DT (DT = min(D, NT) wide) of rows t / DT + RS * s (RS = NT / DT) and, for
//      D > NT, columns d + NT too, so each V element it loads serves all its rows; the threads of
//      column 0 also keep l[r] = l[r] alpha + sum_c p[r][c].
// 5 barriers per 128 keys; no subgroup operations; shared memory under 32 KiB (lavapipe).
// Steps 1 and 4 issue their global loads in groups (KU elements of K, VU keys of V) before
// using them: one dependent load per loop step made a 576-key call take ~157 µs on an H200.
//
// variant: d64 DMAX=64 BQ=16 NT=128
// variant: d128 DMAX=128 BQ=16 NT=128
// variant: d256 DMAX=256 BQ=8 NT=128
// variant: d64_f16 DMAX=64 BQ=16 NT=128 DT_F16
// variant: d128_f16 DMAX=128 BQ=16 NT=128 DT_F16
// variant: d256_f16 DMAX=256 BQ=8 NT=128 DT_F16
// variant: d64_bf16 DMAX=64 BQ=16 NT=128 DT_BF16
// variant: d128_bf16 DMAX=128 BQ=16 NT=128 DT_BF16
// variant: d256_bf16 DMAX=256 BQ=8 NT=128 DT_BF16
#include "attention/attention.glsl"

layout(local_size_x = NT) in;
layout(push_constant) uniform Push {
    DIn q;
    DIn k;
    DIn v;
    I32In table;  // [B, max_blocks]
    I32In lens;   // [B]
    F32In slopes; // [Hq] (read when flags & ATTN_ALIBI)
    DBuf o;       // [B, Tq, Hq, D] (splits == 1)
    F32Buf lse;   // [B, Hq, Tq] (splits == 1)
    F32Buf work;  // splits > 1: acc [B, Hq, Tq, S, D], then (m, l) [B, Hq, Tq, S, 2]
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
} pc;
#include "attention/decode_score.glsl"

#define BK NT
// Output columns per thread pass (DT), row step (RS), rows (RPT) and columns (CPT) per thread.
#define DT (DMAX < NT ? DMAX : NT)
#define RS (NT / DT)
#define RPT ((BQ + RS - 1) / RS)
#define CPT (DMAX / DT)
// Elements of K (score pass) and keys of V (output pass) whose loads are issued together.
#define KU 16
#define VU 8
// Parts of the tile max: NP threads per row, each over BK / NP keys.
#define NP (NT / BQ)
// Pool row of a key that is not in the row's table (never read).
const uint NO_ROW = 0xffffffffu;

shared float sq[BQ * DS];
shared float sp[BQ * BK];   // scores, then probabilities: [row][key]
shared float spart[NP * BQ];
shared float sm[BQ];
shared float salpha[BQ];
shared float sl[BQ];
shared uint srow[BK];

// Pool row of key j of row b (NO_ROW at or past kend, or for a block id outside the pool).
uint pool_row(uint b, uint j, uint kend) {
    if (j >= kend) {
        return NO_ROW;
    }
    int blk = pc.table.v[b * pc.max_blocks + j / pc.block_size];
    return blk >= 0 && uint(blk) < pc.num_blocks ? uint(blk) * pc.block_size + j % pc.block_size : NO_ROW;
}

// Query head of tile row rr (query i = r / G, head hk * G + r % G).
uint head_of(uint r, uint hk, uint G) {
    return hk * G + (r - (r / G) * G);
}

// Step 1: this thread's key (k0 + tid) scored against the NR query rows into sp[rr][tid].
void score_key(uint b, uint hk, uint k0, uint kend, uint r0, uint nr, int first_q) {
    uint tid = gl_LocalInvocationID.x;
    uint G = pc.hq / pc.hkv;
    uint j = k0 + tid;
    uint row = pool_row(b, j, kend);
    srow[tid] = row;
    float s[BQ];
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        s[rr] = 0.0;
    }
    if (row != NO_ROW) {
        // KU elements of K per group, loaded before any is used, so a thread has KU loads in
        // flight instead of one (a loop of dependent single loads ran at ~0.5 µs a step).
        uint base = (row * pc.hkv + hk) * pc.d;
        for (uint d0 = 0; d0 < pc.d; d0 += KU) {
            float kv[KU];
            [[unroll]] for (uint u = 0; u < KU; u++) {
                kv[u] = d0 + u < pc.d ? ld(pc.k, base + d0 + u) : 0.0;
            }
            // Columns past D: sq is not written there (0 * a stale NaN would be NaN).
            [[unroll]] for (uint u = 0; u < KU; u++) {
                if (d0 + u >= pc.d) break;
                [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
                    if (rr >= nr) break;
                    s[rr] += sq[rr * DS + d0 + u] * kv[u];
                }
            }
        }
    }
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        if (rr >= nr) break;
        uint r = r0 + rr;
        int qpos = first_q + int(r / G);
        bool vis = row != NO_ROW && dec_visible(qpos, int(j));
        sp[rr * BK + tid] = vis ? dec_score(s[rr], head_of(r, hk, G), qpos, int(j)) : MASKED;
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

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint split = gl_WorkGroupID.x;
    uint b = gl_WorkGroupID.z;
    uint D = pc.d;
    uint G = pc.hq / pc.hkv;
    uint R = G * pc.tq;
    uint rtiles = (R + BQ - 1) / BQ;
    uint hk = gl_WorkGroupID.y / rtiles;
    uint r0 = (gl_WorkGroupID.y - hk * rtiles) * BQ;
    uint nr = min(BQ, R - r0);

    // Keys of the row: [lo, hi); a table never holds more than max_blocks * BS of them.
    int hi = min(pc.lens.v[b], int(pc.max_blocks * pc.block_size));
    int first_q = pc.lens.v[b] - int(pc.tq);
    int lo = pc.window != 0u ? max(0, first_q + 1 - int(pc.window)) : 0;
    int n = max(hi - lo, 0);
    int per = ((n + int(pc.splits) - 1) / int(pc.splits) + BK - 1) / BK * BK;
    uint kbeg = uint(lo + int(split) * per);
    uint kend = uint(max(min(hi, lo + int(split + 1u) * per), lo));

    for (uint e = tid; e < BQ * D; e += NT) {
        uint rr = e / D;
        uint dd = e - rr * D;
        uint r = r0 + rr;
        uint i = r / G;
        sq[rr * DS + dd] = rr < nr ? ld(pc.q, ((b * pc.tq + i) * pc.hq + head_of(r, hk, G)) * D + dd) : 0.0;
    }
    if (tid < BQ) {
        sm[tid] = MASKED;
    }
    // Thread's output columns col0 + DT * cc and rows row0 + RS * s.
    uint col0 = tid % DT;
    uint row0 = tid / DT;
    float acc[CPT][RPT];
    float lsum[RPT];
    [[unroll]] for (uint s = 0; s < RPT; s++) {
        lsum[s] = 0.0;
        [[unroll]] for (uint cc = 0; cc < CPT; cc++) {
            acc[cc][s] = 0.0;
        }
    }

    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        barrier(); // sq written; the previous tile's sp and srow read
        score_key(b, hk, k0, kend, r0, nr, first_q);
        barrier();
        update_max(nr);
        barrier();
        if (srow[tid] != NO_ROW) {
            [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
                if (rr >= nr) break;
                float m = sm[rr];
                sp[rr * BK + tid] = m <= MASKED ? 0.0 : exp(sp[rr * BK + tid] - m);
            }
        } else {
            [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
                if (rr >= nr) break;
                sp[rr * BK + tid] = 0.0;
            }
        }
        barrier();
        [[unroll]] for (uint s = 0; s < RPT; s++) {
            uint rr = row0 + RS * s;
            float a = rr < nr ? salpha[rr] : 0.0;
            lsum[s] *= a;
            [[unroll]] for (uint cc = 0; cc < CPT; cc++) {
                acc[cc][s] *= a;
            }
        }
        // Keys in groups of VU: the group's V elements are loaded first (VU loads in flight per
        // thread), then used. Keys past the tile's end or outside the table have p = 0 and
        // load 0, so whole groups run without a guard per key.
        uint nk = min(BK, kend - k0);
        for (uint c0 = 0; c0 < nk; c0 += VU) {
            float vv[VU][CPT];
            [[unroll]] for (uint u = 0; u < VU; u++) {
                uint row = srow[c0 + u];
                uint base = (row * pc.hkv + hk) * D;
                [[unroll]] for (uint cc = 0; cc < CPT; cc++) {
                    uint dd = col0 + DT * cc;
                    vv[u][cc] = row != NO_ROW && dd < D ? ld(pc.v, base + dd) : 0.0;
                }
            }
            [[unroll]] for (uint u = 0; u < VU; u++) {
                [[unroll]] for (uint s = 0; s < RPT; s++) {
                    uint rr = row0 + RS * s;
                    if (rr >= nr) break;
                    float p = sp[rr * BK + c0 + u];
                    lsum[s] += p;
                    [[unroll]] for (uint cc = 0; cc < CPT; cc++) {
                        acc[cc][s] += p * vv[u][cc];
                    }
                }
            }
        }
    }
    // Column-0 threads hold each row's l.
    barrier();
    if (col0 == 0u) {
        [[unroll]] for (uint s = 0; s < RPT; s++) {
            uint rr = row0 + RS * s;
            if (rr < BQ) {
                sl[rr] = lsum[s];
            }
        }
    }
    barrier();
    [[unroll]] for (uint s = 0; s < RPT; s++) {
        uint rr = row0 + RS * s;
        if (rr >= nr) break;
        uint r = r0 + rr;
        uint i = r / G;
        uint h = head_of(r, hk, G);
        uint qrow = (b * pc.hq + h) * pc.tq + i;
        float l = sl[rr];
        [[unroll]] for (uint cc = 0; cc < CPT; cc++) {
            uint dd = col0 + DT * cc;
            if (dd < D) {
                if (pc.splits == 1u) {
                    st(pc.o, ((b * pc.tq + i) * pc.hq + h) * D + dd, l > 0.0 ? acc[cc][s] / l : 0.0);
                } else {
                    pc.work.v[(qrow * pc.splits + split) * D + dd] = acc[cc][s];
                }
            }
        }
    }
    if (tid < nr) {
        uint r = r0 + tid;
        uint i = r / G;
        uint qrow = (b * pc.hq + head_of(r, hk, G)) * pc.tq + i;
        float l = sl[tid];
        if (pc.splits == 1u) {
            pc.lse.v[qrow] = l > 0.0 ? sm[tid] + log(l) : MASKED;
        } else {
            uint ml = gl_NumWorkGroups.z * pc.hq * pc.tq * pc.splits * D;
            pc.work.v[ml + 2u * (qrow * pc.splits + split)] = sm[tid];
            pc.work.v[ml + 2u * (qrow * pc.splits + split) + 1u] = l;
        }
    }
}
