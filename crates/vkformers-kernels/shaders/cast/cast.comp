#version 460
#include "common.glsl"
// out[i] = x[i] converted between f32 and the variant's storage type (f16, or bf16 rounded to
// nearest even): `to_*` narrows f32 master weights into compute copies, `from_*` widens.
// variant: to_f16 DT_F16 TO
// variant: to_bf16 DT_BF16 TO
// variant: from_f16 DT_F16 FROM
// variant: from_bf16 DT_BF16 FROM
#include "dtype.glsl"
layout(local_size_x = 256) in;
#ifdef TO
layout(push_constant) uniform Push { F32In x; DBuf out_; uint n; } pc;
void main() { FOR_EACH_INDEX(i, pc.n) { st(pc.out_, i, pc.x.v[i]); } }
#else
layout(push_constant) uniform Push { DIn x; F32Buf out_; uint n; } pc;
void main() { FOR_EACH_INDEX(i, pc.n) { pc.out_.v[i] = ld(pc.x, i); } }
#endif
