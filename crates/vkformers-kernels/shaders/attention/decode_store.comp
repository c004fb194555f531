#version 460
#include "common.glsl"
#include "dtype.glsl"
// Writes new keys and values into the paged pools: position p of k_new, v_new [N, Hkv, D]
// goes to pool row slots[p] of k_pool, v_pool [NB * BS, Hkv, D] (row = block * BS + offset);
// slots[p] < 0 (padding, or a position a sliding-window layer does not keep) is skipped, as is
// a row outside the pool. One thread per element of [N, Hkv, D] (grid-stride).
//
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
#include "attention/attention.glsl"

layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    DIn k_new;
    DIn v_new;
    I32In slots;  // [N]
    DBuf k_pool;
    DBuf v_pool;
    uint n;          // positions N
    uint width;      // Hkv * D
    uint pool_rows;  // NB * BS
} pc;

void main() {
    FOR_EACH_INDEX(e, pc.n * pc.width) {
        uint p = e / pc.width;
        int slot = pc.slots.v[p];
        if (slot >= 0 && uint(slot) < pc.pool_rows) {
            uint at = uint(slot) * pc.width + (e - p * pc.width);
            st(pc.k_pool, at, ld(pc.k_new, e));
            st(pc.v_pool, at, ld(pc.v_new, e));
        }
    }
}
