#version 460
#include "common.glsl"
#include "dtype.glsl"
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
// h = hk * G + g, G = Hq / Hkv) that share kv head hk go in tiles of BQ rows, so GQA/MQA read
// each key and value once per tile, not once per query head. Grid z = B.
// Per key tile of BK keys (staged in shared memory as in fwd.comp): pool rows of the tile from
// the table; K tile; BQ x BK scores; running max; V tile; P = exp(S - m); sums and accumulators
// (output slot o = tid + NT * s -> row o / D, dim o % D).
// No subgroup operations; shared memory stays under 32 KiB (lavapipe) in every variant.
//
// variant: d64 DMAX=64 BQ=16 BK=32 NT=128
// variant: d128 DMAX=128 BQ=16 BK=16 NT=128
// variant: d256 DMAX=256 BQ=8 BK=16 NT=128
// variant: d64_f16 DMAX=64 BQ=16 BK=32 NT=128 DT_F16
// variant: d128_f16 DMAX=128 BQ=16 BK=16 NT=128 DT_F16
// variant: d256_f16 DMAX=256 BQ=8 BK=16 NT=128 DT_F16
// variant: d64_bf16 DMAX=64 BQ=16 BK=32 NT=128 DT_BF16
// variant: d128_bf16 DMAX=128 BQ=16 BK=16 NT=128 DT_BF16
// variant: d256_bf16 DMAX=256 BQ=8 BK=16 NT=128 DT_BF16
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

const uint SLOTS = (BQ * DMAX + NT - 1) / NT;
// Pool row of a key that is not in the row's table (never read).
const uint NO_ROW = 0xffffffffu;

shared float sq[BQ * DS];
shared float skv[BK * DS];
shared float ss[BQ * BK];
shared float sm[BQ];
shared float sl[BQ];
shared float salpha[BQ];
shared uint srow[BK];

// Pool rows of keys [j0, j0 + BK) of row b (NO_ROW past kend or for a block id outside the pool).
void map_tile(uint b, uint j0, uint kend) {
    for (uint c = gl_LocalInvocationID.x; c < BK; c += NT) {
        uint j = j0 + c;
        uint row = NO_ROW;
        if (j < kend) {
            int blk = pc.table.v[b * pc.max_blocks + j / pc.block_size];
            if (blk >= 0 && uint(blk) < pc.num_blocks) {
                row = uint(blk) * pc.block_size + j % pc.block_size;
            }
        }
        srow[c] = row;
    }
}

// Loads the K or V rows of the tile (kv head hk) into skv; zeros where there is no key.
void load_tile(DIn src, uint hk) {
    uint D = pc.d;
    for (uint e = gl_LocalInvocationID.x; e < BK * D; e += NT) {
        uint c = e / D;
        uint dd = e - c * D;
        uint row = srow[c];
        skv[c * DS + dd] = row != NO_ROW ? ld(src, (row * pc.hkv + hk) * D + dd) : 0.0;
    }
}

// Writes the result of tile row rr (query i, head h): o and lse, or this split's partials.
void finish_row(uint b, uint split, uint rr, uint i, uint h, float acc_value, uint dd) {
    uint qrow = (b * pc.hq + h) * pc.tq + i;
    float l = sl[rr];
    if (pc.splits == 1u) {
        st(pc.o, ((b * pc.tq + i) * pc.hq + h) * pc.d + dd, l > 0.0 ? acc_value / l : 0.0);
    } else {
        pc.work.v[(qrow * pc.splits + split) * pc.d + dd] = acc_value;
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
        uint h = hk * G + (r - i * G);
        sq[rr * DS + dd] = r < R ? ld(pc.q, ((b * pc.tq + i) * pc.hq + h) * D + dd) : 0.0;
    }
    for (uint rr = tid; rr < BQ; rr += NT) {
        sm[rr] = MASKED;
        sl[rr] = 0.0;
    }
    float acc[SLOTS];
    for (uint s = 0; s < SLOTS; s++) {
        acc[s] = 0.0;
    }

    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        barrier();
        map_tile(b, k0, kend);
        barrier();
        load_tile(pc.k, hk);
        barrier();
        for (uint e = tid; e < BQ * BK; e += NT) {
            uint rr = e / BK;
            uint c = e - rr * BK;
            uint r = r0 + rr;
            uint i = r / G;
            int qpos = first_q + int(i);
            int j = int(k0 + c);
            float s = MASKED;
            if (r < R && srow[c] != NO_ROW && dec_visible(qpos, j)) {
                float dot_qk = 0.0;
                for (uint dd = 0; dd < D; dd++) {
                    dot_qk += sq[rr * DS + dd] * skv[c * DS + dd];
                }
                s = dec_score(dot_qk, hk * G + (r - i * G), qpos, j);
            }
            ss[e] = s;
        }
        barrier();
        for (uint rr = tid; rr < BQ; rr += NT) {
            float m_old = sm[rr];
            float m = m_old;
            for (uint c = 0; c < BK; c++) {
                m = max(m, ss[rr * BK + c]);
            }
            salpha[rr] = exp(m_old - m);
            sm[rr] = m;
        }
        load_tile(pc.v, hk);
        barrier();
        for (uint e = tid; e < BQ * BK; e += NT) {
            float m = sm[e / BK];
            ss[e] = m <= MASKED ? 0.0 : exp(ss[e] - m);
        }
        barrier();
        for (uint rr = tid; rr < BQ; rr += NT) {
            float sum = 0.0;
            for (uint c = 0; c < BK; c++) {
                sum += ss[rr * BK + c];
            }
            sl[rr] = sl[rr] * salpha[rr] + sum;
        }
        for (uint s = 0; s < SLOTS; s++) {
            uint o = tid + NT * s;
            if (o < BQ * D) {
                uint rr = o / D;
                uint dd = o - rr * D;
                float a = acc[s] * salpha[rr];
                for (uint c = 0; c < BK; c++) {
                    a += ss[rr * BK + c] * skv[c * DS + dd];
                }
                acc[s] = a;
            }
        }
    }
    barrier();
    for (uint s = 0; s < SLOTS; s++) {
        uint o = tid + NT * s;
        uint rr = o / D;
        uint r = r0 + rr;
        if (o < BQ * D && r < R) {
            uint i = r / G;
            finish_row(b, split, rr, i, hk * G + (r - i * G), acc[s], o - rr * D);
        }
    }
    for (uint rr = tid; rr < BQ; rr += NT) {
        uint r = r0 + rr;
        if (r < R) {
            uint i = r / G;
            uint qrow = (b * pc.hq + hk * G + (r - i * G)) * pc.tq + i;
            float l = sl[rr];
            if (pc.splits == 1u) {
                pc.lse.v[qrow] = l > 0.0 ? sm[rr] + log(l) : MASKED;
            } else {
                uint ml = gl_NumWorkGroups.z * pc.hq * pc.tq * pc.splits * D;
                pc.work.v[ml + 2u * (qrow * pc.splits + split)] = sm[rr];
                pc.work.v[ml + 2u * (qrow * pc.splits + split) + 1u] = l;
            }
        }
    }
}
