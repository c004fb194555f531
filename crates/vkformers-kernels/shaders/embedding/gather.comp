#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "embedding/embedding.glsl"
// Embedding forward (gather): out[n, d] = W[ids[n], d]     W [V, D], ids [N] int32, out [N, D]
// An id outside [0, V) gives a row of zeros (nothing out of bounds is read).
// W and out are in the variant's storage type (f32, f16, bf16): a 16-bit copy is exact.
// _wide (OUT_F32): a 16-bit table gathered into f32 rows (exact too), so inference keeps the
// table in the model's type (half the bytes) and the decoder's f32 residual stream needs no cast.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
// variant: f16_wide DT_F16 OUT_F32
// variant: bf16_wide DT_BF16 OUT_F32
layout(local_size_x = 256) in;
#if defined(OUT_F32)
#define OutBuf F32Buf
void st_out(OutBuf b, uint i, float x) { b.v[i] = x; }
#else
#define OutBuf DBuf
void st_out(OutBuf b, uint i, float x) { st(b, i, x); }
#endif
layout(push_constant) uniform Push {
    DIn w;
    I32In ids;
    OutBuf out_;
    uint n_tokens;
    uint vocab;
    uint D;
} pc;

void main() {
    FOR_EACH_INDEX(e, pc.n_tokens * pc.D) {
        uint n = e / pc.D;
        uint d = e - n * pc.D;
        int id = valid_id(pc.ids, n, pc.vocab);
        st_out(pc.out_, e, id >= 0 ? ld(pc.w, uint(id) * pc.D + d) : 0.0);
    }
}
