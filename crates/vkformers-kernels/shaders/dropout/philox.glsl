// Philox4x32-10 (Salmon et al., SC'11), the counter-based RNG of the dropout kernels; the Rust
// twin is `dropout::reference::philox4x32_10` and the two agree bit for bit.
//
// Stream: element index idx (64-bit) of seed s draws word (idx & 3) of
//   philox4x32_10(counter = (lo(idx >> 2), hi(idx >> 2), 0, 0), key = (lo(s), hi(s)))
// and uniform(s, idx) = (word >> 8) * 2^-24 in [0, 1) (exact in f32).
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Buf { uint v[]; };

uvec4 philox4x32_10(uvec4 c, uvec2 k) {
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k += uvec2(0x9E3779B9u, 0xBB67AE85u);
        }
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, c.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
        c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}

// The four words of the 4-aligned block `blk` (element indices 4 blk .. 4 blk + 3).
uvec4 philox_block(uint64_t blk, uvec2 seed) {
    return philox4x32_10(uvec4(uint(blk), uint(blk >> 32), 0u, 0u), seed);
}

float philox_uniform(uint word) { return float(word >> 8) * (1.0 / 16777216.0); }

// Loops over the 4-aligned blocks covering element indices [offset, offset + n), one block per
// invocation (grid-stride): `i` is the element index relative to `offset` (i in [0, n)) and `w`
// the random word for offset + i. BODY uses i and w.
#define FOR_EACH_RANDOM_WORD(seed_lo, seed_hi, off_lo, off_hi, n, BODY)                          \
    {                                                                                            \
        uint64_t off_ = (uint64_t(off_hi) << 32) | uint64_t(off_lo);                             \
        uint64_t lead_ = off_ & 3ul;                                                             \
        uint64_t blocks_ = (lead_ + uint64_t(n) + 3ul) >> 2;                                     \
        uint64_t stride_ = uint64_t(gl_NumWorkGroups.x * gl_WorkGroupSize.x);                    \
        for (uint64_t b_ = gl_GlobalInvocationID.x; b_ < blocks_; b_ += stride_) {               \
            uvec4 r_ = philox_block((off_ >> 2) + b_, uvec2(seed_lo, seed_hi));                  \
            for (uint k_ = 0; k_ < 4; k_++) {                                                    \
                uint64_t pos_ = b_ * 4ul + uint64_t(k_);                                         \
                if (pos_ < lead_ || pos_ - lead_ >= uint64_t(n)) continue;                       \
                uint i = uint(pos_ - lead_);                                                     \
                uint w = r_[k_];                                                                 \
                BODY                                                                             \
            }                                                                                    \
        }                                                                                        \
    }
