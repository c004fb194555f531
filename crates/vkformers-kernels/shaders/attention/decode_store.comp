#version 460
#include "common.glsl"
#include "dtype.glsl"
// Writes new keys and values into the paged pools: position p of k_new, v_new [N, Hkv, D]
// goes to pool row slots[p] of k_pool, v_pool [NB * BS, Hkv, D] (row = block * BS + offset);
// slots[p] < 0 (padding, or a position a sliding-window layer does not keep) is skipped, as is
// a row outside the pool. One thread per element of [N, Hkv, D] (grid-stride).
// IN32: k_new and v_new are f32 (a model's activations), rounded to the pools' 16-bit type here
// instead of by two cast dispatches before the store.
//
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
// variant: f16_in32 DT_F16 IN32
// variant: bf16_in32 DT_BF16 IN32
#include "attention/attention.glsl"

#if defined(IN32)
#define NewIn F32In
float ldn(NewIn b, uint i) { return b.v[i]; }
#else
#define NewIn DIn
float ldn(NewIn b, uint i) { return ld(b, i); }
#endif

layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    NewIn k_new;
    NewIn v_new;
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
            st(pc.k_pool, at, ldn(pc.k_new, e));
            st(pc.v_pool, at, ldn(pc.v_new, e));
        }
    }
}
