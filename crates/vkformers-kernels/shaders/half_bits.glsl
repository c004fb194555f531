// f32 -> 16-bit codes in plain 32-bit integer math (no 16-bit types or features needed), both
// rounding to nearest even as the cast kernels store: `bf16_code` as `st` does for bf16,
// `f16_code` as the hardware conversion `float16_t(x)` does (inf from 65520 up, subnormals in
// units of 2^-24). Shared by dtype.glsl and the GEMMs' 16-bit C stores.
#ifndef HALF_BITS_GLSL
#define HALF_BITS_GLSL
uint bf16_code(float x) {
    uint u = floatBitsToUint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;  // quiet NaN
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
uint f16_code(float x) {
    uint u = floatBitsToUint(x);
    uint sign = (u >> 16) & 0x8000u;
    uint a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;                 // NaN
    if (a >= 0x477ff000u) return sign | 0x7c00u;                // >= 65520 rounds to inf
    if (a >= 0x38800000u) {                                      // normal: rebias, round 13 bits
        uint r = a - 0x38000000u;
        return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
    }
    return sign | uint(roundEven(uintBitsToFloat(a) * 16777216.0)); // subnormal: units of 2^-24
}
#endif
