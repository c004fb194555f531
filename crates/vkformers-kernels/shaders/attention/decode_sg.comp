#version 460
#include "common.glsl"
#include "dtype.glsl"
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
// Decode attention over a paged KV cache, one subgroup per workgroup: the same call as
// decode.comp (its header gives the layout, the masks, the split-KV scheme and the in-dispatch
// merge; the push block and launcher are shared), with the work cut for latency instead.
//
// Why: decode.comp's 128-thread workgroups run a serial chain per 128-key tile (table read, K
// loads, five barriers, V loads, a halving sum through shared memory) at two workgroups per SM
// (registers). On an H200 a 640-key cache took 27-33 µs a call at batch 1 and 85-102 µs at batch
// 64 (42 MB of K and V: ~400 GB/s), and at batch 64 the attention was a quarter of a decode step.
// Here a workgroup is one subgroup of SG lanes (32 on NVIDIA, 8 on lavapipe) and a key tile is SG
// keys, so there are 4x more workgroups with fewer registers each; the table read is the tile's
// only dependent load before the K and V loads, which are issued together (V does not wait for
// the scores); the tile max and sum are subgroup reductions; the only barriers are the
// workgroup's own (one subgroup: cheap); the slots' partial sums meet through shuffles once per
// split, not once per tile.
//
// Lanes, per tile of SG keys [k0, k0 + SG):
//   score: lane c owns key k0 + c: its pool row (table read), its K row (D elements, 16-byte
//     loads), the NR scores against q (shared memory); m_new = max(m, subgroupMax(s)) per row,
//     p = e^(s - m_new), l = l e^(m - m_new) + subgroupAdd(p); p goes to shared memory.
//   values: lane (slot, lk) = (lane / LK, lane % LK) owns the CPL columns lk * CPL ..  of all NR
//     rows (acc [BQ][CPL]) for the keys slot, slot + KS, ... of the tile (LK lanes cover a V row,
//     KS = SG / LK keys are read at once); the first VG keys' V rows are loaded before the scores
//     are computed.
//   m and l are uniform over the subgroup (every lane keeps a copy); after the last tile the KS
//   slots' acc meet by xor-shuffles (log2 KS rounds) and slot 0 writes o (S = 1) or the split's
//   partials, which the last split of the row tile merges (decode.comp's counters).
//
// Variants: SG (subgroup size the launcher checked), DMAX (head dim class), dtype as decode.comp.
// variant: d64_s32 DMAX=64 SG=32
// variant: d128_s32 DMAX=128 SG=32
// variant: d256_s32 DMAX=256 SG=32
// variant: d64_f16_s32 DMAX=64 SG=32 DT_F16
// variant: d128_f16_s32 DMAX=128 SG=32 DT_F16
// variant: d256_f16_s32 DMAX=256 SG=32 DT_F16
// variant: d64_bf16_s32 DMAX=64 SG=32 DT_BF16
// variant: d128_bf16_s32 DMAX=128 SG=32 DT_BF16
// variant: d256_bf16_s32 DMAX=256 SG=32 DT_BF16
// variant: d64_f16_q32_s32 DMAX=64 SG=32 DT_F16 QF32
// variant: d128_f16_q32_s32 DMAX=128 SG=32 DT_F16 QF32
// variant: d256_f16_q32_s32 DMAX=256 SG=32 DT_F16 QF32
// variant: d64_bf16_q32_s32 DMAX=64 SG=32 DT_BF16 QF32
// variant: d128_bf16_q32_s32 DMAX=128 SG=32 DT_BF16 QF32
// variant: d256_bf16_q32_s32 DMAX=256 SG=32 DT_BF16 QF32
// variant: d64_s8 DMAX=64 SG=8
// variant: d128_s8 DMAX=128 SG=8
// variant: d256_s8 DMAX=256 SG=8
// variant: d64_f16_s8 DMAX=64 SG=8 DT_F16
// variant: d128_f16_s8 DMAX=128 SG=8 DT_F16
// variant: d256_f16_s8 DMAX=256 SG=8 DT_F16
// variant: d64_bf16_s8 DMAX=64 SG=8 DT_BF16
// variant: d128_bf16_s8 DMAX=128 SG=8 DT_BF16
// variant: d256_bf16_s8 DMAX=256 SG=8 DT_BF16
// variant: d64_f16_q32_s8 DMAX=64 SG=8 DT_F16 QF32
// variant: d128_f16_q32_s8 DMAX=128 SG=8 DT_F16 QF32
// variant: d256_f16_q32_s8 DMAX=256 SG=8 DT_F16 QF32
// variant: d64_bf16_q32_s8 DMAX=64 SG=8 DT_BF16 QF32
// variant: d128_bf16_q32_s8 DMAX=128 SG=8 DT_BF16 QF32
// variant: d256_bf16_q32_s8 DMAX=256 SG=8 DT_BF16 QF32
#include "attention/attention.glsl"

#define BQ 8
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

layout(local_size_x = SG) in;
// Specialization constant 0: cost probes (`VKFORMERS_DECODE_PROBE`, wrong results; never set
// otherwise): bit 1 skips the K loads of the score pass, 2 the V pass.
layout(constant_id = 0) const uint PROBE = 0;
#include "attention/decode_common.glsl"

// Lanes per V row (LK), columns per lane (CPL, a multiple of CW), 16-byte loads per lane per V
// row (NLD), keys read at once (KS), keys per slot per tile (KPS), keys per V load group (VG),
// groups of CW elements of K whose loads are issued together (KG).
#if DMAX / CW < SG
#define LK (DMAX / CW)
#else
#define LK SG
#endif
#define CPL (DMAX / LK)
#define NLD (CPL / CW)
#define KS (SG / LK)
#define KPS (SG / KS)
#define VG 8
#define KG 8
// Splits a launcher may ask for (MAX_SPLITS of decode.rs): the merge keeps every split's
// weight in shared memory.
#define MAX_S 64

shared vec4 sq4[BQ * DMAX / 4]; // the tile's q rows, zero past D and past NR
shared float sp[BQ * SG];       // probabilities of the tile: [row][key]
shared uint srow[SG];           // pool rows of the tile's keys
shared uint slast;
shared float swt[BQ * MAX_S];   // merge: weight of split s in row rr, e^(m_s - M) a / L
shared float sml[2 * BQ * MAX_S];

// V columns c0 .. c0 + CPL of the VG keys slot + KS * (k + u) of the tile (zeros past Dv and
// for keys outside the table).
void load_vgroup(uint hk, uint slot, uint c0, uint k, out float vv[VG][CPL]) {
    [[unroll]] for (uint u = 0; u < VG; u++) {
        uint row = srow[slot + KS * (k + u)];
        [[unroll]] for (uint h = 0; h < NLD; h++) {
            float x[CW];
            if (row != NO_ROW && c0 + h * CW < pc.dvh && (PROBE & 2u) == 0u) {
                load8(pc.v, (row * pc.hkv + hk) * pc.vrow, c0 + h * CW, pc.dvh, x);
            } else {
                [[unroll]] for (uint e = 0; e < CW; e++) x[e] = 0.0;
            }
            [[unroll]] for (uint e = 0; e < CW; e++) vv[u][h * CW + e] = x[e];
        }
    }
}

// q . k of this lane's key (pool row `row`) for the NR rows of the tile.
void dots(uint hk, uint row, uint nr, out float s[BQ]) {
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        s[rr] = 0.0;
    }
    if (row == NO_ROW || (PROBE & 1u) != 0u) {
        return;
    }
    uint base = (row * pc.hkv + hk) * pc.d;
    // KG * CW elements of K per group, all loads issued before any is used (c0 + KG * CW <=
    // DMAX: DMAX is a multiple of 64, so every sq4 index is in the tile).
    for (uint c0 = 0; c0 < pc.d; c0 += KG * CW) {
        float kv[KG][CW];
        [[unroll]] for (uint g = 0; g < KG; g++) {
            if (c0 + g * CW < pc.d) {
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

// acc[rr][e] += sum over this slot's keys c of the tile of p[rr][c] V[c][c0 + e]; the first
// group's rows are `first` (loaded before the scores).
void accumulate(uint hk, uint nr, uint slot, uint c0, float first[VG][CPL], inout float acc[BQ][CPL]) {
    [[dont_unroll]] for (uint k = 0; k < KPS; k += VG) {
        float vv[VG][CPL];
        if (k == 0u) {
            vv = first;
        } else {
            load_vgroup(hk, slot, c0, k, vv);
        }
        [[unroll]] for (uint u = 0; u < VG; u++) {
            uint c = slot + KS * (k + u);
            [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
                if (rr < nr) {
                    float p = sp[rr * SG + c];
                    [[unroll]] for (uint e = 0; e < CPL; e++) acc[rr][e] += p * vv[u][e];
                }
            }
        }
    }
}

// This workgroup's rows: o and lse (S = 1), or its split's partials (acc, m, l).
void write_rows(uint b, uint hk, uint r0, uint nr, uint split, uint c0, float acc[BQ][CPL], float m[BQ], float l[BQ]) {
    uint lane = gl_LocalInvocationID.x;
    uint DV = pc.dvh;
    uint G = pc.hq / pc.hkv;
    F32Coh work = F32Coh(uint64_t(pc.work));
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        if (rr < nr) {
            uint r = r0 + rr;
            uint i = r / G;
            uint h = head_of(r, hk, G);
            uint qrow = (b * pc.hq + h) * pc.tq + i;
            float mr = m[rr];
            float lr = l[rr];
            // The sink joins the denominator once, so only an unsplit call folds it here.
            float a = (pc.flags & DECODE_SINKS) != 0u && pc.splits == 1u ? attn_fold_sink(pc.sinks.v[h], mr, lr) : 1.0;
            if (lane < LK) {
                [[unroll]] for (uint e = 0; e < CPL; e++) {
                    uint dd = c0 + e;
                    if (dd < DV) {
                        if (pc.splits == 1u) {
                            stq(pc.o, ((b * pc.tq + i) * pc.hq + h) * DV + dd, lr > 0.0 ? acc[rr][e] * a / lr : 0.0);
                        } else {
                            work.v[(qrow * pc.splits + split) * DV + dd] = acc[rr][e];
                        }
                    }
                }
            }
            if (lane == 0u) {
                if (pc.splits == 1u) {
                    pc.lse.v[qrow] = lr > 0.0 ? mr + log(lr) : MASKED;
                } else {
                    uint ml = gl_NumWorkGroups.z * pc.hq * pc.tq * pc.splits * DV;
                    work.v[ml + 2u * (qrow * pc.splits + split)] = mr;
                    work.v[ml + 2u * (qrow * pc.splits + split) + 1u] = lr;
                }
            }
        }
    }
}

// Split calls: counts this workgroup's split done; the tile's last one merges the S partials of
// its NR rows (decode.comp's merge_if_last, with every split's weight computed once in shared
// memory: M = max_s m_s, L = sum_s l_s e^(m_s - M), w_s = e^(m_s - M) a / L, o = sum_s w_s acc_s).
void merge_if_last(uint b, uint hk, uint r0, uint nr) {
    uint lane = gl_LocalInvocationID.x;
    uint tile = b * gl_NumWorkGroups.y + gl_WorkGroupID.y;
    memoryBarrierBuffer(); // this workgroup's partials before its count
    barrier();
    if (lane == 0u) {
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
    for (uint e = lane; e < nr * S; e += SG) {
        uint rr = e / S;
        uint s = e - rr * S;
        uint r = r0 + rr;
        uint qrow = (b * pc.hq + head_of(r, hk, G)) * pc.tq + r / G;
        sml[2u * e] = work.v[ml + 2u * (qrow * S + s)];
        sml[2u * e + 1u] = work.v[ml + 2u * (qrow * S + s) + 1u];
    }
    barrier();
    if (lane < nr) {
        uint r = r0 + lane;
        uint h = head_of(r, hk, G);
        uint qrow = (b * pc.hq + h) * pc.tq + r / G;
        float big = MASKED;
        for (uint s = 0; s < S; s++) {
            big = max(big, sml[2u * (lane * S + s)]);
        }
        float total = 0.0;
        for (uint s = 0; s < S; s++) {
            float m = sml[2u * (lane * S + s)];
            total += m <= MASKED ? 0.0 : sml[2u * (lane * S + s) + 1u] * exp(m - big);
        }
        float big0 = big;
        float total0 = total;
        // Partials are scaled by e^(m_s - big0); the sink rescales them all by a = e^(big0 - big).
        float a = (pc.flags & DECODE_SINKS) != 0u ? attn_fold_sink(pc.sinks.v[h], big, total) : 1.0;
        for (uint s = 0; s < S; s++) {
            float m = sml[2u * (lane * S + s)];
            swt[lane * MAX_S + s] = m <= MASKED || total <= 0.0 ? 0.0 : exp(m - big0) * a / total;
        }
        pc.lse.v[qrow] = total > 0.0 ? big + log(total) : MASKED;
    }
    barrier();
    for (uint e = lane; e < nr * DV; e += SG) {
        uint rr = e / DV;
        uint dd = e - rr * DV;
        uint r = r0 + rr;
        uint i = r / G;
        uint h = head_of(r, hk, G);
        uint qrow = (b * pc.hq + h) * pc.tq + i;
        float o = 0.0;
        for (uint s = 0; s < S; s++) {
            o += work.v[(qrow * S + s) * DV + dd] * swt[rr * MAX_S + s];
        }
        stq(pc.o, ((b * pc.tq + i) * pc.hq + h) * DV + dd, o);
    }
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint split = gl_WorkGroupID.x;
    uint b = gl_WorkGroupID.z;
    uint D = pc.d;
    uint G = pc.hq / pc.hkv;
    uint R = G * pc.tq;
    uint rtiles = (R + BQ - 1) / BQ;
    uint hk = gl_WorkGroupID.y / rtiles;
    uint r0 = (gl_WorkGroupID.y - hk * rtiles) * BQ;
    uint nr = min(BQ, R - r0);
    int first_q;
    uint kbeg, kend;
    split_range(b, split, SG, first_q, kbeg, kend);

    // The q tile, zero past D and past NR (the score pass reads every column < roundup(D, 64)).
    for (uint e = lane; e < BQ * DMAX; e += SG) {
        uint rr = e / DMAX;
        uint dd = e - rr * DMAX;
        uint r = r0 + rr;
        float x = rr < nr && dd < D ? ldq(pc.q, ((b * pc.tq + r / G) * pc.hq + head_of(r, hk, G)) * D + dd) : 0.0;
        sq4[e / 4][e % 4] = x;
    }
    uint slot = lane / LK;
    uint c0 = (lane % LK) * CPL;
    float acc[BQ][CPL];
    float m[BQ];
    float l[BQ];
    [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
        m[rr] = MASKED;
        l[rr] = 0.0;
        [[unroll]] for (uint e = 0; e < CPL; e++) acc[rr][e] = 0.0;
    }

    for (uint k0 = kbeg; k0 < kend; k0 += SG) {
        barrier(); // sq written; the previous tile's sp and srow read
        uint j = k0 + lane;
        uint row = pool_row(b, j, kend);
        srow[lane] = row;
        barrier();
        float first[VG][CPL];
        load_vgroup(hk, slot, c0, 0u, first);
        float s[BQ];
        dots(hk, row, nr, s);
        [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
            if (rr < nr) {
                uint r = r0 + rr;
                int qpos = first_q + int(r / G);
                bool vis = row != NO_ROW && dec_visible(qpos, int(j));
                float sc = vis ? dec_score(s[rr], head_of(r, hk, G), qpos, int(j)) : MASKED;
                float mn = max(m[rr], subgroupMax(sc));
                float alpha = exp(m[rr] - mn);
                float p = vis && mn > MASKED ? exp(sc - mn) : 0.0;
                l[rr] = l[rr] * alpha + subgroupAdd(p);
                m[rr] = mn;
                sp[rr * SG + lane] = p;
                [[unroll]] for (uint e = 0; e < CPL; e++) acc[rr][e] *= alpha;
            }
        }
        barrier();
        accumulate(hk, nr, slot, c0, first, acc);
    }
    // The KS slots' sums meet in every lane of a column (xor over the slot bits of the lane).
    [[unroll]] for (uint off = LK; off < SG; off *= 2u) {
        [[unroll]] for (uint rr = 0; rr < BQ; rr++) {
            if (rr < nr) {
                [[unroll]] for (uint e = 0; e < CPL; e++) acc[rr][e] += subgroupShuffleXor(acc[rr][e], off);
            }
        }
    }

    write_rows(b, hk, r0, nr, split, c0, acc, m, l);
    if (pc.splits > 1u) {
        merge_if_last(b, hk, r0, nr);
    }
}
