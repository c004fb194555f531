// Storage type of an op's tensors, chosen per variant: DT_F16, DT_BF16, or f32 (default).
// Math is always f32: `ld` widens on load, `st` rounds on store (bf16: round to nearest even);
// `rnd(x)` is x as `st` stores it, read back.
// Include after common.glsl; buffers of the storage type are `DIn` (read with `ld`) and
// `DBuf` (written with `st`; to read one written by an earlier dispatch, use
// `ld(DIn(uint64_t(buf)), i)`. Never read back through `DIn` what the same dispatch wrote:
// NVIDIA may serve read-only buffers from a non-coherent cache, so the value is stale; keep
// the value, rounded by `rnd`, instead).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#include "half_bits.glsl"
#if defined(DT_F16)
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(buffer_reference, std430, buffer_reference_align = 2) buffer DBuf { float16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer DIn { float16_t v[]; };
float ld(DIn b, uint i) { return float(b.v[i]); }
void st(DBuf b, uint i, float x) { b.v[i] = float16_t(x); }
// The 16 bits `st` stores for x (for stores of several values packed in one word).
uint st_bits(float x) { return uint(float16BitsToUint16(float16_t(x))); }
// x rounded to f16 (to nearest even), as integer code: the compiler (Mesa's NIR) folds a
// float -> f16 -> float round trip away.
uint f16_bits(float x) { return f16_code(x); }
float rnd(float x) { return float(uint16BitsToFloat16(uint16_t(f16_bits(x)))); }
#elif defined(DT_BF16)
layout(buffer_reference, std430, buffer_reference_align = 2) buffer DBuf { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer DIn { uint16_t v[]; };
float ld(DIn b, uint i) { return uintBitsToFloat(uint(b.v[i]) << 16); }
uint16_t bf16_bits(float x) { return uint16_t(bf16_code(x)); }
void st(DBuf b, uint i, float x) { b.v[i] = bf16_bits(x); }
uint st_bits(float x) { return uint(bf16_bits(x)); }
float rnd(float x) { return uintBitsToFloat(uint(bf16_bits(x)) << 16); }
#else
layout(buffer_reference, std430, buffer_reference_align = 4) buffer DBuf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer DIn { float v[]; };
float ld(DIn b, uint i) { return b.v[i]; }
void st(DBuf b, uint i, float x) { b.v[i] = x; }
float rnd(float x) { return x; }
#endif
