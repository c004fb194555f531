// A 16-bit twin of an f32 output (`OUT16` variants of norm, rope and glu kernels): the op also
// writes its f32 result rounded to f16 or bf16, the copy a 16-bit product reads under autocast,
// so no cast/cast4 dispatch (4 bytes read + 2 written per element) runs between the two.
// Rounding is cast/cast4's, bit for bit: bf16 to nearest even (quiet NaN kept), f16 by the
// hardware conversion. `twin` (push constant) is 1 for f16, 2 for bf16.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(buffer_reference, std430, buffer_reference_align = 2) buffer TwinBuf { uint16_t v[]; };
uint16_t twin_bits(float x, uint twin) {
    if (twin == 1u) {
        return float16BitsToUint16(float16_t(x));
    }
    uint u = floatBitsToUint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
void st_twin(TwinBuf b, uint i, float x, uint twin) { b.v[i] = twin_bits(x, twin); }
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer TwinIn { uint16_t v[]; };
// A 16-bit value written by st_twin, widened (exact).
float ld_twin(TwinIn b, uint i, uint twin) {
    uint bits = uint(b.v[i]);
    return twin == 1u ? float(uint16BitsToFloat16(uint16_t(bits))) : uintBitsToFloat(bits << 16);
}
