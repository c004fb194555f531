#version 460
#include "common.glsl"
// `norm/col_sum` for few columns and many blocks (the norm backwards' weight gradients:
// 1024 blocks of D = 2048 columns), with the same sum bit for bit:
//   out[d] = (accumulate ? out[d] : 0) + sum_{b < blocks} partial[b, d]     partial [blocks, D] f32
// added in increasing b from 0. col_sum's one thread per column gives D = 2048 only 8
// workgroups, each thread a chain of `blocks` dependent loads (37 µs on the H200 for 1024
// blocks, 45 of them in a 1.1B Llama step). Here a workgroup owns 32 columns (64 workgroups for
// D = 2048): all 256 threads load a tile of 128 blocks x 32 columns into shared memory (16
// independent, coalesced loads each), then 32 threads add their column's 128 values in order.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
#include "dtype.glsl"
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In partial;
    DBuf out_;
    uint blocks;
    uint D;
    uint accumulate;
} pc;

#define COLS 32u
#define ROWS 128u
shared float tile[ROWS][COLS];

void main() {
    uint t = gl_LocalInvocationID.x;
    uint c = t % COLS;
    uint r0 = t / COLS; // 0..7
    for (uint base = gl_WorkGroupID.x * COLS; base < pc.D; base += gl_NumWorkGroups.x * COLS) {
        uint d = base + c;
        float s = 0.0;
        for (uint b0 = 0; b0 < pc.blocks; b0 += ROWS) {
            barrier(); // the previous tile has been added
            [[unroll]] for (uint k = 0; k < ROWS / 8u; k++) {
                uint r = r0 + 8u * k;
                uint b = b0 + r;
                tile[r][c] = (b < pc.blocks && d < pc.D) ? pc.partial.v[b * pc.D + d] : 0.0;
            }
            barrier();
            if (t < COLS) {
                uint n = min(ROWS, pc.blocks - b0);
                if (n == ROWS) {
                    [[unroll]] for (uint r = 0; r < ROWS; r++) {
                        s += tile[r][t];
                    }
                } else {
                    for (uint r = 0; r < n; r++) {
                        s += tile[r][t];
                    }
                }
            }
        }
        if (t < COLS && d < pc.D) {
            st(pc.out_, d, pc.accumulate != 0u ? ld(DIn(uint64_t(pc.out_)), d) + s : s);
        }
    }
}
