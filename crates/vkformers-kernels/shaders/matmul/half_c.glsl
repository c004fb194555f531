// The 16-bit C store of the portable GEMM (gemm.comp), in 32-bit words so that the kernel needs
// no 16-bit storage feature. A thread owns runs of 4 adjacent columns of a row: two values of
// a run that share a word are written together by one plain store; a value whose word-mate
// belongs to another thread (C starting at an odd element, an odd ldc) or to no one (the
// column past an odd N, the row padding) takes its half alone, by an atomic AND then OR, which
// leave the other half as it is whatever order the two threads' atomics run in.
#include "half_bits.glsl"

layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Words { uint v[]; };

// `x` as a 16-bit code: kind 1 f16, 2 bf16 (rounded to nearest even).
uint c16_code(float x, uint kind) {
    return kind == 2u ? bf16_code(x) : f16_code(x);
}

// Stores run[0 .. count - 1] (count 1..4) as the 16-bit elements e .. e + count - 1 of `w`.
void store_half_run(U32Words w, uint e, vec4 run, uint count, uint kind) {
    [[unroll]] for (uint q = 0; q < 4; q++) {
        const uint eq = e + q;
        const bool even = (eq & 1u) == 0u;
        if (q >= count || (!even && q > 0)) continue;  // past the run, or stored with q - 1
        const uint bits = c16_code(run[q], kind);
        if (even && q + 1 < count) {
            w.v[eq >> 1] = bits | (c16_code(run[q + 1], kind) << 16);
        } else {
            const uint shift = even ? 0u : 16u;
            atomicAnd(w.v[eq >> 1], ~(0xffffu << shift));
            atomicOr(w.v[eq >> 1], bits << shift);
        }
    }
}
