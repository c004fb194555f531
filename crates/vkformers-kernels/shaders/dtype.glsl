// Storage type of an op's tensors, chosen per variant: DT_F16, DT_BF16, or f32 (default).
// Math is always f32: `ld` widens on load, `st` rounds on store (bf16: round to nearest even).
// Include after common.glsl; buffers of the storage type are `DIn` (read with `ld`) and
// `DBuf` (written with `st`; to read one, use `ld(DIn(uint64_t(buf)), i)`).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#if defined(DT_F16)
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(buffer_reference, std430, buffer_reference_align = 2) buffer DBuf { float16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer DIn { float16_t v[]; };
float ld(DIn b, uint i) { return float(b.v[i]); }
void st(DBuf b, uint i, float x) { b.v[i] = float16_t(x); }
#elif defined(DT_BF16)
layout(buffer_reference, std430, buffer_reference_align = 2) buffer DBuf { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer DIn { uint16_t v[]; };
float ld(DIn b, uint i) { return uintBitsToFloat(uint(b.v[i]) << 16); }
uint16_t bf16_bits(float x) {
    uint u = floatBitsToUint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
void st(DBuf b, uint i, float x) { b.v[i] = bf16_bits(x); }
#else
layout(buffer_reference, std430, buffer_reference_align = 4) buffer DBuf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer DIn { float v[]; };
float ld(DIn b, uint i) { return b.v[i]; }
void st(DBuf b, uint i, float x) { b.v[i] = x; }
#endif
