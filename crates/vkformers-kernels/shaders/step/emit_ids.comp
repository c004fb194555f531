#version 460
#include "common.glsl"
// A replayed decode step's chosen ids [B] u32, copied where the host reads them: slot
// c % S of a ring [S, B] in host-visible memory, c being a count of the step's runs kept on
// the device ([1] u32, incremented here). The host knows which run is which (it submitted
// them), so it reads run k's ids from slot k % S once run k has completed, while run k + 1
// writes the next slot. One workgroup: every thread reads the count before thread 0 advances it.
layout(local_size_x = 64) in;
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer U32In { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Buf { uint v[]; };
layout(push_constant) uniform Push {
    U32In ids;      // [B]
    U32Buf ring;    // [S, B]
    U32Buf count;   // [1]
    uint rows;      // B
    uint slots;     // S
} pc;

void main() {
    uint slot = pc.count.v[0] % pc.slots;
    for (uint b = gl_LocalInvocationID.x; b < pc.rows; b += gl_WorkGroupSize.x) {
        pc.ring.v[slot * pc.rows + b] = pc.ids.v[b];
    }
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        pc.count.v[0] += 1u;
    }
}
