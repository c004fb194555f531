#version 460
#include "common.glsl"
#include "dropout/philox.glsl"
// out[i] = the Philox word of element offset + i for seed (see philox.glsl), out [n] uint32.
// Exposes the raw stream (tests compare it bit for bit with the Rust reference).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    U32Buf out_;
    uint n;
    uint seed_lo;
    uint seed_hi;
    uint offset_lo;
    uint offset_hi;
} pc;

void main() {
    FOR_EACH_RANDOM_WORD(pc.seed_lo, pc.seed_hi, pc.offset_lo, pc.offset_hi, pc.n, pc.out_.v[i] = w;)
}
