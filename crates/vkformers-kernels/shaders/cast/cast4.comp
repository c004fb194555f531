#version 460
#include "common.glsl"
// cast.comp four elements a thread: 16-byte f32 loads and 8-byte 16-bit stores (or the
// reverse), for views whose length is a multiple of 4 elements and whose offsets are 16-byte
// aligned. One element a thread moves 4 + 2 bytes per load/store pair, which ran at ~1.2 TB/s
// on an H200 (a 4096 x 2048 activation: 42 µs); four a thread lets the memory system stream.
// Same rounding as cast.comp (bf16: to nearest even; f16: the hardware conversion `st` uses),
// so the two are interchangeable bit for bit. n4 = n / 4.
// variant: to_f16 DT_F16 TO
// variant: to_bf16 DT_BF16 TO
// variant: from_f16 DT_F16 FROM
// variant: from_bf16 DT_BF16 FROM
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4Buf { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Vec4In { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Half4Buf { uvec2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Half4In { uvec2 v[]; };

#ifdef DT_BF16
uint bits16(float x) { return uint(bf16_bits(x)); }
float from16(uint b) { return uintBitsToFloat(b << 16); }
#else
uint bits16(float x) { return uint(float16BitsToUint16(float16_t(x))); }
float from16(uint b) { return float(uint16BitsToFloat16(uint16_t(b))); }
#endif

#ifdef TO
layout(push_constant) uniform Push { Vec4In x; Half4Buf out_; uint n4; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n4) {
        vec4 a = pc.x.v[i];
        pc.out_.v[i] = uvec2(bits16(a.x) | (bits16(a.y) << 16), bits16(a.z) | (bits16(a.w) << 16));
    }
}
#else
layout(push_constant) uniform Push { Half4In x; Vec4Buf out_; uint n4; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n4) {
        uvec2 w = pc.x.v[i];
        pc.out_.v[i] = vec4(from16(w.x & 0xffffu), from16(w.x >> 16), from16(w.y & 0xffffu), from16(w.y >> 16));
    }
}
#endif
