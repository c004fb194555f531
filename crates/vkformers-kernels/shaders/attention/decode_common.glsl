// Shared by the paged decode kernels (decode.comp, decode_sg.comp): the push block (one layout,
// one launcher), the coherent views of the split work buffer and counters, and the pool-row,
// head and 16-byte load helpers. Include after attention/attention.glsl and the QIn / QBuf
// definitions.

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
} pc;
#include "attention/decode_score.glsl"

#define ATTN_WIDE 8u
#define DECODE_SINKS 16u
// Elements of one 16-byte load of a 16-bit pool (two of an f32 pool).
#define CW 8
// Pool row of a key that is not in the row's table (never read).
const uint NO_ROW = 0xffffffffu;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer U4In { uvec4 v[]; };

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

// The row's keys [lo, hi) and this split's part [kbeg, kend) of them, in chunks that are a
// multiple of `tile` keys; first_q is the position of the first new query (lens[b] - Tq).
void split_range(uint b, uint split, uint tile, out int first_q, out uint kbeg, out uint kend) {
    // Keys of the row: [lo, hi); a table never holds more than max_blocks * BS of them.
    int hi = min(pc.lens.v[b], int(pc.max_blocks * pc.block_size));
    first_q = pc.lens.v[b] - int(pc.tq);
    int lo = pc.window != 0u ? max(0, first_q + 1 - int(pc.window)) : 0;
    if (pc.chunk != 0u && first_q >= 0) {
        // The first query's chunk starts at the first key any row of the tile can see.
        lo = max(lo, int(uint(first_q) / pc.chunk * pc.chunk));
    }
    int n = max(hi - lo, 0);
    int per = ((n + int(pc.splits) - 1) / int(pc.splits) + int(tile) - 1) / int(tile) * int(tile);
    kbeg = uint(lo + int(split) * per);
    kend = uint(max(min(hi, lo + int(split + 1u) * per), lo));
}
