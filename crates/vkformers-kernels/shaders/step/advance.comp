#version 460
#include "common.glsl"
// A replayed decode step's last act on its KV-cache inputs: makes them the next step's. One
// group's step tables are int32 [P | B·MB | B | B] (the cache's one upload a step: P position
// ids, P = B for the group that carries them else 0; the block table [B, MB]; the lengths after
// the step [B]; each row's store slot [B]), for a step of one new token a row. The next step
// stores its token at position p = lens[b] (the length before it), so:
//   pos[b] = p (when P > 0);  lens[b] = p + 1;
//   slot[b] = table[b, p / BS] * BS + p % BS   (-1 where the table holds no block there, or
//   p / BS >= MB: the store skips a -1 slot)
// The host holds every block the replays reach before it records the step (the table does not
// change between replays), so the slot is always in a held block.
layout(local_size_x = 64) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32Buf { int v[]; };
layout(push_constant) uniform Push {
    I32Buf ints;
    uint rows;        // B
    uint prefix;      // P: 0 or B
    uint max_blocks;  // MB
    uint block_size;  // BS
} pc;

void main() {
    FOR_EACH_INDEX(b, pc.rows) {
        uint lens_at = pc.prefix + pc.rows * pc.max_blocks;
        int p = pc.ints.v[lens_at + b];
        if (pc.prefix > 0u) {
            pc.ints.v[b] = p;
        }
        pc.ints.v[lens_at + b] = p + 1;
        uint i = uint(p) / pc.block_size;
        int blk = i < pc.max_blocks ? pc.ints.v[pc.prefix + b * pc.max_blocks + i] : -1;
        pc.ints.v[lens_at + pc.rows + b] = blk >= 0 ? blk * int(pc.block_size) + p % int(pc.block_size) : -1;
    }
}
