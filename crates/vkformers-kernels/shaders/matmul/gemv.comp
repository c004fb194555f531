#version 460
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "activation/act.glsl"
// Few-row matrix product for decoding (a "GEMV" of up to MB rows at once):
//   y[i, j] = sum_k x[i, k] * W[j, k] (+ bias[j])      i < M <= MB, j < N
//   x [M, K] f32, rows ldx apart; W [N, K] row-major (nn.Linear's [out, in]), f32/f16/bf16;
//   bias [N] f32; y [M, N] f32, rows ldy apart.
// Decoding is bound by reading W, so every element of W is read once, for all M rows of x:
// each workgroup owns R consecutive rows of W (output columns j0 .. j0+R-1), its WG threads
// stride over K in chunks of 16 bytes of W (4 f32 or 8 16-bit values: one uvec4 load per row
// of W), multiply each chunk by the same K-slice of every row of x (read through the cache:
// x is small and shared by every workgroup) and keep M x R partial sums in registers.
// The partial sums are reduced with subgroupAdd, then across the subgroups of the workgroup
// in shared memory; thread t < M*R writes y[t / R, j0 + t % R].
// 16-bit W is read as 32-bit words holding two values (low half first) and widened to f32,
// so no 16-bit storage or arithmetic feature is needed. Math and accumulation are f32.
// Grid: x = row blocks of R, capped by the launcher; a grid-stride loop covers the rest.
// Groups: up to three products of the same x (q, k and v projections; gate and up) in one
// dispatch, y_p = x · W_pᵀ with W_p [N_p, K] (N_0 = N, N_1 = n1, N_2 = n2; 0 = absent): the
// row blocks of W_0, then W_1's, then W_2's, each block inside one product (one launch and one
// barrier instead of three, and the small k/v products no longer run on a few workgroups alone).
// Gated input (flags bits 4-5 = kind, one product only): x is the gate of a GLU and w1 its up,
// both f32 [M, K] rows ldx apart, and the product reads x[i, k] = f(gate[i, k]) * up[i, k]
// (f = silu, gelu, gelu_tanh for kinds 1, 2, 3; the expression of glu/forward.comp), so a gated
// MLP's down projection needs no separate GLU dispatch. Each workgroup recomputes f over its
// K-slices (K floats per row block, from the cache), which costs no memory traffic.
// Normed input (flags bit 6; no bias: the bias pointer carries the gain g): the product reads
// the RMSNorm of h = x (+ r, flags bit 9) as rms_forward.comp computes it,
//   x̂[i, k] = h[i, k] * rstd[i] * g[k],   rstd[i] = 1 / sqrt(mean_k h[i, k]^2 + eps),
// g = 1, w or 1 + w for gain modes 0, 1, 2 (flags bits 7-8; w f32 [K]), so a decoder's input
// norm (and the residual add before it) needs no dispatch of its own. r, the sum hs = x + r and
// x̂ are f32 [M, K] rows ldx apart. Every workgroup sums its rows' squares over all of K itself
// (K floats a row, from the cache); workgroup 0 alone writes hs (with r: the new residual
// stream later layers read) and, with flags bit 10, x̂ (for readers of the norm other than this
// product). No workgroup reads hs or x̂ back: they are recomputed from x and r. f32 math; the
// order of the sum of squares differs from rms_forward's.
// Prefetch (PREFETCH = 1): a decode GEMV is short, so each dependent trip to memory before its
// weights stream counts. The W of a workgroup's next chunk pair is loaded ahead: the first
// block's before the normed input's prologue (and, with it, the gain of the thread's first
// chunk pair), the next block's before the current one's reduction; the prologue issues the x
// and r loads of up to PF chunks of a row together before using them, and the bias is loaded
// at the block's start. Values, order and sums are those of PREFETCH = 0, bit for bit.
// Staged input (STAGE = 1): a workgroup computes its input rows once, x (or f(gate) * up, or x̂)
// f32 [M, KP] (KP = K rounded up to whole chunks, zeros past K), into shared memory xs, and every
// row block it does reads them there. Without it each block re-reads x (and r, or gate and up)
// from L2: with 4 rows of 16-bit W a block, x alone is half as many bytes as W, a normed input
// with a residual twice as many (x and r in the prologue and again in the products), so on an
// H100 a normed 11264 x 2048 product moved ~92 MB through L2 for 46 MB of W. A normed input's h
// chunks go to xs as the sums of squares load them and are scaled into x̂ in place once rstd is
// known (each thread its own chunks), so x and r are read once per workgroup. Same values,
// order and sums as STAGE = 0, bit for bit; with the grid capped (several blocks a workgroup)
// the input's reads are paid once for all of a workgroup's blocks.
//
// Chained (CHAIN = 1, vkformers-vk's `chain`): the dispatch is a link of a chain, started
// without a barrier behind the previous link. It loads its first block's W (and gain) as
// PREFETCH does, then waits until counter chain_wait reaches chain_count (every workgroup of the
// previous link done; 0: no wait), reads its input rows through coherent pointers (written by
// the previous links while this dispatch may already be resident: no stale cache lines), and
// counts itself done on counter chain_signal once its outputs are written. Nothing it writes
// before the wait, so the chain's rule holds. Same values as CHAIN = 0, bit for bit.
//
// variant: f32_m1 W_F32 MB=1
// variant: f32_m4 W_F32 MB=4
// variant: f32_m8 W_F32 MB=8
// variant: f32_m16 W_F32 MB=16
// variant: f16_m1 W_F16 MB=1
// variant: f16_m4 W_F16 MB=4
// variant: f16_m8 W_F16 MB=8
// variant: f16_m16 W_F16 MB=16
// variant: bf16_m1 W_BF16 MB=1
// variant: bf16_m4 W_BF16 MB=4
// variant: bf16_m8 W_BF16 MB=8
// variant: bf16_m16 W_BF16 MB=16
// The _cpu variants stop at 8 rows: the launcher gives a CPU device 9 to 16 rows as two
// dispatches, at the same cost a row (lavapipe, a bf16 normed 2048 x 2048 product: ~1 ms a row
// at 4, 8 and 16 rows), where an MB = 16 pipeline took llvmpipe ~35 s to compile (MB = 8: ~10).
// variant: f32_m1_cpu W_F32 MB=1 WG=8
// variant: f32_m4_cpu W_F32 MB=4 WG=8
// variant: f32_m8_cpu W_F32 MB=8 WG=8
// variant: f16_m1_cpu W_F16 MB=1 WG=8
// variant: f16_m4_cpu W_F16 MB=4 WG=8
// variant: f16_m8_cpu W_F16 MB=8 WG=8
// variant: bf16_m1_cpu W_BF16 MB=1 WG=8
// variant: bf16_m4_cpu W_BF16 MB=4 WG=8
// variant: bf16_m8_cpu W_BF16 MB=8 WG=8

// WG: threads per workgroup, 128 (a multiple of every subgroup
// size: 8, 32, 64) or, on CPU devices, one subgroup (NSG = 1): llvmpipe runs the subgroups of
// a workgroup one after another as coroutines switched at each barrier, which cost more than
// the loads of a 4-row block; one subgroup per workgroup needs no barrier and no shared memory.
#ifndef WG
#define WG 128
#endif
layout(local_size_x = WG) in;
#define R 4      // rows of W (output columns) per workgroup

// VEC (specialization constant 0): K is a multiple of CH, W starts on a 16-byte boundary at
// an even element, x rows are 16-byte aligned (ldx a multiple of 4): every chunk of every row
// of W is one aligned uvec4 and every K-slice of x whole vec4s. Otherwise element by element.
layout(constant_id = 0) const uint VEC = 0;
// NSG (specialization constant 1): most subgroups a workgroup can have, WG / the device's
// smallest subgroup size (the size may vary per dispatch between its minimum and maximum).
layout(constant_id = 1) const uint NSG = WG;
// PREFETCH (specialization constant 2): 1 loads ahead as the header says; 0 loads each value
// where it is first used (the A/B switch VKFORMERS_GEMV_PREFETCH).
layout(constant_id = 2) const uint PREFETCH = 1;
#define PF 4 // chunks of a row whose x and r loads the prologue issues at once (PREFETCH = 1)
// PIPE (specialization constant 3): 1 issues the W loads of a block's next chunk pair before the
// current pair's products (a row longer than 2 WG chunks, e.g. K = 5632 in 16-bit: 3 pairs, one
// trip to memory instead of three); 0 loads each pair when its turn comes (the A/B switch
// VKFORMERS_GEMV_PIPE). Same values and order of sums either way.
layout(constant_id = 3) const uint PIPE = 0;
// STAGE (specialization constant 4): 1 stages the input rows in xs as the header says (the
// launcher sets it only when M * KP floats fit beside red, and XS (constant 5) to at least that).
layout(constant_id = 4) const uint STAGE = 0;
layout(constant_id = 5) const uint XS = 1;
// CHAIN (specialization constant 6): 1 makes the dispatch a chain link as the header says.
layout(constant_id = 6) const uint CHAIN = 0;
// BACKOFF (specialization constant 7): dependent FMAs (~4 cycles each) between two polls of the
// chain's wait (every waiting workgroup polls the same counter). On the H100 any spacing was
// slower than none (docs/bench/h100-2026-12-05-j).
layout(constant_id = 7) const uint BACKOFF = 0;
// CHAIN_FENCE (specialization constant 8): 1 fences memory after the chain's wait (see
// chain_wait; the launcher's default, VKFORMERS_CHAIN_FENCE=0 for none).
layout(constant_id = 8) const uint CHAIN_FENCE = 1;
// PROBE (specialization constant 9): cost probes for `vkformers bench gemv --probe` only (wrong
// results), each bit leaving out a part of the kernel to time what is left: 1 the input (x taken
// as 1: no norm prologue, no staging and its barrier, no loads of x, r or the gain); 2 the loads
// of W (each chunk's words made from its index); 4 the reduction across subgroups (each
// subgroup's lane writes its own sums: no barriers, no shared memory). 0: the kernel.
layout(constant_id = 9) const uint PROBE = 0;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer U4In { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer V4In { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer U32In { uint v[]; };
// The input rows of a chain link, and its counters (volatile: the wait re-reads them).
layout(buffer_reference, std430, buffer_reference_align = 16) coherent readonly buffer V4Coh { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent readonly buffer F32Coh { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) volatile coherent buffer U32Vol { uint v[]; };

#if defined(W_F32)
#define CH 4              // elements of W per 16-byte chunk
#define ELEM_BYTES 4
#else
#define CH 8
#define ELEM_BYTES 2
#endif

layout(push_constant) uniform Push {
    U32In w;       // first word of W (16-bit: holds element 0 in its high half if flags bit 1)
    F32In x;
    F32In bias;
    F32Buf y;
    U32In w1;      // W_1, W_2 and their outputs (packed: rows n1, n2 apart) when n1, n2 > 0
    U32In w2;
    F32Buf y1;
    F32Buf y2;
    F32In r;       // normed input: the residual added to x before the norm (flags bit 9)
    F32Buf hs;     // normed input: x + r, written by workgroup 0 (flags bit 9)
    F32Buf xn;     // normed input: x̂, written by workgroup 0 (flags bit 10)
    U32Vol counters; // CHAIN: the chain's counters
    uint M, N, K;
    uint ldx, ldy;
    uint flags;    // bit 0: bias (product 0); bit 1 + p: W_p starts at the odd half of its first word;
                   // bits 4-5: gated input kind (w1 = up); bit 6: normed input, bits 7-8 its
                   // gain mode, bit 9: plus r, bit 10: x̂ written
    uint n1, n2;
    float eps;     // normed input: the RMSNorm's epsilon
    uint chain_wait, chain_count, chain_signal; // CHAIN: the link (see the header)
} pc;

#define NORMED_BIT (1u << 6)
#define RESIDUAL_BIT (1u << 9)
#define WRITE_XN_BIT (1u << 10)

// Per-subgroup partial sums: red[(i * R + r) * NSG + subgroup] (and the normed input's sums of
// squares, red[i * NSG + subgroup], before the first row block).
shared float red[MB * R * NSG];
// Staged input rows (STAGE): row i of x (or f(gate) * up, or x̂) at xs[i * KP], KP = chunks * CH.
shared float xs[XS];

// Normed input: rstd of each row of h, the same in every invocation of the workgroup.
float rstd_of[MB];

// One row of W: its first 32-bit word and, for 16-bit W, whether it starts in the high half.
struct Row {
    uint64_t addr;
    uint parity;
};

// Row j of the W that starts at `base` (parity: it starts at the odd half of its first word).
Row row_of(uint64_t base, uint parity, uint j) {
    const uint64_t e = uint64_t(parity) + uint64_t(j) * uint64_t(pc.K);
#if ELEM_BYTES == 4
    return Row(base + e * 4ul, 0u);
#else
    return Row(base + (e >> 1) * 4ul, uint(e & 1ul));
#endif
}

// The bits of element kk of a row of W (16-bit: in the low half), 0 past K.
uint w_bits(Row row, uint kk) {
    if (kk >= pc.K) return 0u;
#if ELEM_BYTES == 4
    return U32In(row.addr).v[kk];
#else
    const uint i = row.parity + kk;
    const uint word = U32In(row.addr).v[i >> 1];
    return (i & 1u) != 0u ? (word >> 16) : (word & 0xffffu);
#endif
}

// Chunk c (elements c*CH .. c*CH+CH-1) of a row of W as its 16 bytes (16-bit elements two to a
// word, the lower element in the low half), zeros past K: kept packed until used, half the
// registers of f32 for a chunk loaded ahead.
uvec4 load_w_chunk(Row row, uint c) {
    if ((PROBE & 2u) != 0u) return uvec4(c, c + 1u, c + 2u, c + 3u) * (uint(row.addr) & 0xffu);
    if (VEC != 0) return U4In(row.addr).v[c];
    uvec4 q;
    [[unroll]] for (uint h = 0; h < 4; h++) {
#if ELEM_BYTES == 4
        q[h] = w_bits(row, c * CH + h);
#else
        q[h] = w_bits(row, c * CH + 2 * h) | (w_bits(row, c * CH + 2 * h + 1) << 16);
#endif
    }
    return q;
}

// The CH elements of a chunk of W widened to f32.
void unpack_w_chunk(uvec4 q, out float v[CH]) {
#if defined(W_F32)
    const vec4 f = uintBitsToFloat(q);
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
#else
    [[unroll]] for (uint h = 0; h < 4; h++) {
#if defined(W_F16)
        const vec2 p = unpackHalf2x16(q[h]);
#else
        const vec2 p = uintBitsToFloat(uvec2(q[h] << 16, q[h] & 0xffff0000u));
#endif
        v[2 * h] = p.x;
        v[2 * h + 1] = p.y;
    }
#endif
}

// The same K-slice of row i of a [M, K] f32 matrix rows ldx apart, zeros past K.
void load_rows_chunk(uint64_t at, uint i, uint c, out float v[CH]) {
    const uint base = i * pc.ldx + c * CH;
    if (VEC != 0) {
        [[unroll]] for (uint q = 0; q < CH / 4; q++) {
            const vec4 f = CHAIN != 0 ? V4Coh(at).v[(base >> 2) + q] : V4In(at).v[(base >> 2) + q];
            v[4 * q] = f.x; v[4 * q + 1] = f.y; v[4 * q + 2] = f.z; v[4 * q + 3] = f.w;
        }
    } else {
        [[unroll]] for (uint e = 0; e < CH; e++) {
            const bool in_k = c * CH + e < pc.K;
            v[e] = !in_k ? 0.0 : (CHAIN != 0 ? F32Coh(at).v[base + e] : F32In(at).v[base + e]);
        }
    }
}

// Where chunk c of staged row i starts in xs: rows are KP = K rounded up to whole chunks apart.
uint staged_at(uint i, uint c) {
    return (i * ((pc.K + CH - 1) / CH) + c) * CH;
}

// Chunk c of staged row i (STAGE), as stored: zeros past K.
void load_staged(uint i, uint c, out float v[CH]) {
    const uint base = staged_at(i, c);
    [[unroll]] for (uint e = 0; e < CH; e++) v[e] = xs[base + e];
}

// Writes chunk c of staged row i (STAGE), all CH values (zeros past K included).
void store_staged(uint i, uint c, float v[CH]) {
    const uint base = staged_at(i, c);
    [[unroll]] for (uint e = 0; e < CH; e++) xs[base + e] = v[e];
}

// f(g) of a gated input of kind `glu` (1 silu, 2 gelu, 3 gelu_tanh).
float gate_act(uint glu, float g) {
    return glu == 1u ? silu_f(g) : (glu == 2u ? gelu_f(g) : gelu_tanh_f(g));
}

// Chunk c of row i of h = x (+ r) of a normed input, zeros past K.
void load_h_chunk(uint i, uint c, out float v[CH]) {
    load_rows_chunk(uint64_t(pc.x), i, c, v);
    if ((pc.flags & RESIDUAL_BIT) != 0u) {
        float u[CH];
        load_rows_chunk(uint64_t(pc.r), i, c, u);
        [[unroll]] for (uint e = 0; e < CH; e++) v[e] += u[e];
    }
}

// Chunk c of the normed input's gain g (mode 0: 1, 1: w, 2: 1 + w; w [K] = the bias pointer).
void load_gain_chunk(uint c, out float g[CH]) {
    const uint mode = (pc.flags >> 7) & 3u;
    if (mode == 0u) {
        [[unroll]] for (uint e = 0; e < CH; e++) g[e] = 1.0;
        return;
    }
    load_rows_chunk(uint64_t(pc.bias), 0u, c, g); // w as row 0 of a matrix (zeros past K)
    if (mode == 2u) {
        [[unroll]] for (uint e = 0; e < CH; e++) g[e] += 1.0;
    }
}

// Writes the elements of chunk c of a row of an [M, K] f32 output (rows ldx apart) inside K.
void store_chunk(F32Buf out_, uint i, uint c, float v[CH]) {
    [[unroll]] for (uint e = 0; e < CH; e++) {
        if (c * CH + e < pc.K) out_.v[i * pc.ldx + c * CH + e] = v[e];
    }
}

// The sum of squares of row i of h over this thread's chunks c = tid, tid + WG, ... in that
// order; workgroup 0 (`sum_out`) writes them to hs. PREFETCH issues the loads of up to PF chunks
// before the first is used (one trip to memory for K up to PF * WG * CH), same order of sums.
float sum_squares(uint i, uint tid, uint chunks, bool sum_out) {
    const uint pf = PREFETCH != 0 ? PF : 1;
    float ss = 0.0;
    for (uint c0 = tid; c0 < chunks; c0 += pf * WG) {
        float v[PF][CH];
        [[unroll]] for (uint q = 0; q < pf; q++) {
            if (c0 + q * WG < chunks) load_h_chunk(i, c0 + q * WG, v[q]);
        }
        [[unroll]] for (uint q = 0; q < pf; q++) {
            if (c0 + q * WG < chunks) {
                if (sum_out) store_chunk(pc.hs, i, c0 + q * WG, v[q]);
                if (STAGE != 0) store_staged(i, c0 + q * WG, v[q]);
                [[unroll]] for (uint e = 0; e < CH; e++) ss = fma(v[q][e], v[q][e], ss);
            }
        }
    }
    return ss;
}

// Normed input, before the first row block: rstd_of[i] of every row of h from the workgroup's
// own sum of squares over K (in the main loop's chunks; subgroupAdd, then across subgroups
// through red); workgroup 0 writes hs and x̂. Reached by every invocation (uniform control flow:
// pc.M is uniform).
void norm_prologue(uint tid, uint chunks) {
    const bool writer = gl_WorkGroupID.x == 0u;
    const bool sum_out = writer && (pc.flags & RESIDUAL_BIT) != 0u;
    [[unroll]] for (uint i = 0; i < MB; i++) {
        rstd_of[i] = 0.0;
        if (i < pc.M) {
            float ss = subgroupAdd(sum_squares(i, tid, chunks, sum_out));
            if (NSG == 1) {
                rstd_of[i] = ss;
            } else if (subgroupElect()) {
                red[i * NSG + gl_SubgroupID] = ss;
            }
        }
    }
    if (NSG != 1) {
        barrier(); // every subgroup's sums are in red (the first row block's barrier guards reuse)
        [[unroll]] for (uint i = 0; i < MB; i++) {
            if (i < pc.M) {
                for (uint s = 0; s < gl_NumSubgroups; s++) rstd_of[i] += red[i * NSG + s];
            }
        }
    }
    [[unroll]] for (uint i = 0; i < MB; i++) {
        if (i < pc.M) {
            rstd_of[i] = inversesqrt(rstd_of[i] / float(pc.K) + pc.eps);
            if (writer && (pc.flags & WRITE_XN_BIT) != 0u) {
                for (uint c = tid; c < chunks; c += WG) {
                    float v[CH], g[CH];
                    load_h_chunk(i, c, v);
                    load_gain_chunk(c, g);
                    [[unroll]] for (uint e = 0; e < CH; e++) v[e] = v[e] * rstd_of[i] * g[e];
                    store_chunk(pc.xn, i, c, v);
                }
            }
        }
    }
}

// The same K-slice of row i of x (or of f(gate) * up for a gated input, or of x̂ for a normed
// input with the gain chunk g), zeros past K, from global memory.
void load_x_global(uint i, uint c, float g[CH], out float v[CH]) {
    if ((pc.flags & NORMED_BIT) != 0u) {
        load_h_chunk(i, c, v);
        [[unroll]] for (uint e = 0; e < CH; e++) v[e] = v[e] * rstd_of[i] * g[e];
        return;
    }
    load_rows_chunk(uint64_t(pc.x), i, c, v);
    const uint glu = (pc.flags >> 4) & 3u;
    if (glu != 0u) {
        float u[CH];
        load_rows_chunk(uint64_t(pc.w1), i, c, u);
        [[unroll]] for (uint e = 0; e < CH; e++) v[e] = gate_act(glu, v[e]) * u[e];
    }
}

// load_x_global's chunk, from xs when the input is staged (g unused then: x̂ is staged).
void load_x_chunk(uint i, uint c, float g[CH], out float v[CH]) {
    if ((PROBE & 1u) != 0u) {
        [[unroll]] for (uint e = 0; e < CH; e++) v[e] = 1.0;
        return;
    }
    if (STAGE != 0) {
        load_staged(i, c, v);
    } else {
        load_x_global(i, c, g, v);
    }
}

// STAGE: the input rows into xs, then a barrier (every row block reads them). A normed input's
// h chunks are there already (sum_squares stored them): each thread scales its own into x̂, with
// the expression load_x_global uses; the gain of its first two chunks is g0, loaded before the
// norm's prologue (`ahead`, PREFETCH), so no trip to memory follows the prologue for K up to
// 2 WG chunks. Reached by every invocation (pc.M is uniform).
void stage_input(uint tid, uint chunks, bool ahead, float g0[2][CH]) {
    const bool normed = (pc.flags & NORMED_BIT) != 0u;
    [[unroll]] for (uint i = 0; i < MB; i++) {
        if (i < pc.M) {
            uint j = 0;
            for (uint c = tid; c < chunks; c += WG, j++) {
                float v[CH], g[CH];
                if (normed) {
                    load_staged(i, c, v);
                    if (ahead && j == 0u) {
                        g = g0[0];
                    } else if (ahead && j == 1u) {
                        g = g0[1];
                    } else {
                        load_gain_chunk(c, g);
                    }
                    [[unroll]] for (uint e = 0; e < CH; e++) v[e] = v[e] * rstd_of[i] * g[e];
                } else {
                    load_x_global(i, c, g, v);
                }
                store_staged(i, c, v);
            }
        }
    }
    barrier();
}

// A row block: its product p, its first row j0 in W_p and W_p's rows n. The row blocks of W_0
// come first, then W_1's, then W_2's.
struct Block {
    uint p;
    uint j0;
    uint n;
};

Block block_of(uint blk) {
    const uint b0 = (pc.N + R - 1) / R;
    const uint b1 = (pc.n1 + R - 1) / R;
    const uint p = blk < b0 ? 0u : (blk < b0 + b1 ? 1u : 2u);
    const uint j0 = (blk - (p == 0u ? 0u : (p == 1u ? b0 : b0 + b1))) * R;
    return Block(p, j0, p == 0u ? pc.N : (p == 1u ? pc.n1 : pc.n2));
}

// The R rows of W a block reads. Rows past n re-read row n - 1 (their sums are never written)
// so that the loads stay unguarded.
void rows_of(Block b, out Row rows[R]) {
    const uint64_t wbase = b.p == 0u ? uint64_t(pc.w) : (b.p == 1u ? uint64_t(pc.w1) : uint64_t(pc.w2));
    const uint parity = (pc.flags >> (1u + b.p)) & 1u;
    [[unroll]] for (uint r = 0; r < R; r++) rows[r] = row_of(wbase, parity, min(b.j0 + r, b.n - 1));
}

// The W of the chunk pair (c, c + WG) of the rows, the second zeros past the last chunk.
void load_w_pair(Row rows[R], uint c, uint chunks, out uvec4 wq[2][R]) {
    [[unroll]] for (uint r = 0; r < R; r++) wq[0][r] = load_w_chunk(rows[r], c);
    [[unroll]] for (uint r = 0; r < R; r++) {
        if (c + WG < chunks) {
            wq[1][r] = load_w_chunk(rows[r], c + WG);
        } else {
            wq[1][r] = uvec4(0u);
        }
    }
}

// acc[i][r] = x[i, :] . W[j0 + r, :] over this thread's chunks c = tid, tid + WG, ...
// Chunks go in pairs (c, c + WG) whose 2R loads of W are issued before either is used:
// decoding is bound by how many bytes are in flight, not by the FMAs. `ahead`: wq already
// holds the first pair's W (loaded ahead); g0: the normed input's gain of the first pair
// (PREFETCH), loaded ahead too.
void accumulate(Row rows[R], uint tid, uint chunks, bool ahead, uvec4 wq[2][R], float g0[2][CH],
                out float acc[MB][R]) {
    [[unroll]] for (uint i = 0; i < MB; i++) {
        [[unroll]] for (uint r = 0; r < R; r++) acc[i][r] = 0.0;
    }
    const bool normed = (pc.flags & NORMED_BIT) != 0u;
    for (uint c = tid; c < chunks; c += 2 * WG) {
        const bool two = c + WG < chunks;
        if (!ahead) load_w_pair(rows, c, chunks, wq);
        ahead = false;
        // PIPE: the next pair's loads are in flight while this pair is multiplied.
        uvec4 wn[2][R];
        const bool more = PIPE != 0 && c + 2 * WG < chunks;
        if (more) load_w_pair(rows, c + 2 * WG, chunks, wn);
        float w[2][R][CH], g[2][CH];
        [[unroll]] for (uint h = 0; h < 2; h++) {
            [[unroll]] for (uint r = 0; r < R; r++) unpack_w_chunk(wq[h][r], w[h][r]);
            if (PREFETCH != 0 && c == tid) {
                g[h] = g0[h];
            } else if (normed && STAGE == 0 && (PROBE & 1u) == 0u && (h == 0u || two)) {
                load_gain_chunk(c + h * WG, g[h]);
            }
        }
        // Rows and halves past the end are skipped by uniform branches, not `break`: a loop
        // a compiler declines to unroll would index acc and w dynamically (local memory).
        [[unroll]] for (uint i = 0; i < MB; i++) {
            if (i < pc.M) {
                [[unroll]] for (uint h = 0; h < 2; h++) {
                    if (h == 0u || two) {
                        float xv[CH];
                        load_x_chunk(i, c + h * WG, g[h], xv);
                        [[unroll]] for (uint r = 0; r < R; r++) {
                            [[unroll]] for (uint e = 0; e < CH; e++) acc[i][r] = fma(xv[e], w[h][r][e], acc[i][r]);
                        }
                    }
                }
            }
        }
        if (more) {
            wq = wn;
            ahead = true;
        }
    }
}

// y[i, j0 + r] = the workgroup's sum of acc[i][r] (+ bias[j0 + r]): over the subgroup, then
// over the subgroups of the workgroup. pc.M is uniform, so every subgroupAdd runs in uniform
// control flow. bias_r: the block's bias, loaded ahead (PREFETCH).
void reduce_store(Block b, uint tid, float acc[MB][R], float bias_r[R]) {
    const bool has_bias = (pc.flags & 1u) != 0u;
    F32Buf yp = F32Buf(b.p == 0u ? uint64_t(pc.y) : (b.p == 1u ? uint64_t(pc.y1) : uint64_t(pc.y2)));
    const uint ldy = b.p == 0u ? pc.ldy : b.n;
    if (NSG == 1 || (PROBE & 4u) != 0u) {
        // One subgroup: its sums are the workgroup's; one lane writes them.
        [[unroll]] for (uint i = 0; i < MB; i++) {
            if (i < pc.M) {
                [[unroll]] for (uint r = 0; r < R; r++) {
                    float s = subgroupAdd(acc[i][r]);
                    if (subgroupElect() && b.j0 + r < b.n) {
                        if (has_bias) s += PREFETCH != 0 ? bias_r[r] : pc.bias.v[b.j0 + r];
                        yp.v[i * ldy + b.j0 + r] = s;
                    }
                }
            }
        }
        return;
    }
    barrier(); // readers of red in the previous row block are done
    [[unroll]] for (uint i = 0; i < MB; i++) {
        if (i < pc.M) {
            [[unroll]] for (uint r = 0; r < R; r++) {
                const float s = subgroupAdd(acc[i][r]);
                if (subgroupElect()) red[(i * R + r) * NSG + gl_SubgroupID] = s;
            }
        }
    }
    barrier();
    if (tid < pc.M * R) {
        const uint j = b.j0 + tid % R;
        if (j < b.n) {
            float s = 0.0;
            for (uint g = 0; g < gl_NumSubgroups; g++) s += red[tid * NSG + g];
            if (has_bias) {
                float bj = 0.0;
                [[unroll]] for (uint r = 0; r < R; r++) {
                    if (tid % R == r) bj = bias_r[r];
                }
                s += PREFETCH != 0 ? bj : pc.bias.v[j];
            }
            yp.v[(tid / R) * ldy + j] = s;
        }
    }
}

// The bias of a block's outputs j0 .. j0 + R - 1 (0 past n), loaded at its start (PREFETCH).
void load_bias(Block b, out float bias_r[R]) {
    [[unroll]] for (uint r = 0; r < R; r++) {
        bias_r[r] = 0.0;
        if (PREFETCH != 0 && (pc.flags & 1u) != 0u && b.j0 + r < b.n) bias_r[r] = pc.bias.v[b.j0 + r];
    }
}

// Polls of the chain's wait before it gives up (a bound, so that a broken chain cannot hang the
// device: ~4 million polls are seconds; the dispatch then runs on whatever its input holds).
#define CHAIN_POLLS (1u << 22)

// CHAIN: waits until every workgroup of the previous link is done (one invocation polls; the
// workgroup's barrier holds the rest). pc.chain_count is uniform.
void chain_wait() {
    if (CHAIN == 0 || pc.chain_count == 0u) return;
    if (gl_LocalInvocationID.x == 0u) {
        for (uint n = 0; n < CHAIN_POLLS && pc.counters.v[pc.chain_wait] < pc.chain_count; n++) {
            float t = float(n);
            for (uint i = 0; i < BACKOFF; i++) t = fma(t, 0.999, 1.0);
            if (t < -1.0) n = CHAIN_POLLS; // never (t >= 0): keeps the delay from being removed
        }
    }
    // The previous links' outputs after their counts. A hypothesis for the chain's loss on the
    // H100 (untimed): on NVIDIA this fence waits for the thread's loads in flight, the W loaded
    // ahead among them, so the input's loads cannot overlap them. CHAIN_FENCE = 0 leaves it out
    // (VKFORMERS_CHAIN_FENCE=0): the input is read through coherent pointers (from L2, where the
    // previous links' outputs are before their counts: chain_signal fences them), issued after
    // the workgroup barrier that follows the poll.
    if (CHAIN_FENCE != 0) memoryBarrierBuffer();
    barrier();
}

// CHAIN: counts this workgroup done, once every invocation's outputs are written.
void chain_signal() {
    if (CHAIN == 0) return;
    memoryBarrierBuffer(); // this workgroup's outputs before its count
    barrier();
    if (gl_LocalInvocationID.x == 0u) atomicAdd(pc.counters.v[pc.chain_signal], 1u);
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint chunks = (pc.K + CH - 1) / CH;
    const uint blocks = (pc.N + R - 1) / R + (pc.n1 + R - 1) / R + (pc.n2 + R - 1) / R;
    // The W of this thread's next chunk pair when `ahead`; with PREFETCH the first block's is
    // loaded before the normed input's prologue, and so is the gain of that pair.
    uvec4 wq[2][R];
    float g0[2][CH];
    bool ahead = PREFETCH != 0 && gl_WorkGroupID.x < blocks && tid < chunks;
    if (ahead) {
        Row rows[R];
        rows_of(block_of(gl_WorkGroupID.x), rows);
        load_w_pair(rows, tid, chunks, wq);
        if ((pc.flags & NORMED_BIT) != 0u && (PROBE & 1u) == 0u) {
            [[unroll]] for (uint h = 0; h < 2; h++) {
                if (tid + h * WG < chunks) load_gain_chunk(tid + h * WG, g0[h]);
            }
        }
    }
    chain_wait();
    if ((pc.flags & NORMED_BIT) != 0u && (PROBE & 1u) == 0u) norm_prologue(tid, chunks);
    if (STAGE != 0 && (PROBE & 1u) == 0u) stage_input(tid, chunks, ahead, g0);

    for (uint blk = gl_WorkGroupID.x; blk < blocks; blk += gl_NumWorkGroups.x) {
        const Block b = block_of(blk);
        Row rows[R];
        rows_of(b, rows);
        float bias_r[R], acc[MB][R];
        load_bias(b, bias_r);
        accumulate(rows, tid, chunks, ahead, wq, g0, acc);
        // The next block's first pair is in flight while this one's sums are reduced.
        const uint next = blk + gl_NumWorkGroups.x;
        ahead = PREFETCH != 0 && next < blocks && tid < chunks;
        if (ahead) {
            rows_of(block_of(next), rows);
            load_w_pair(rows, tid, chunks, wq);
        }
        reduce_store(b, tid, acc, bias_r);
    }
    chain_signal();
}
