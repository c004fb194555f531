#version 460
// The tensor-core ceiling of this driver, for `vkformers bench mma-peak`: each workgroup loads
// its A and B tiles once and then chains ITERS multiply-adds into its accumulators, so the
// time is the multiply-add throughput alone (no operand traffic). Its output is acc after the
// chain (written so the compiler cannot drop the work) and is not a product of anything.
//   CM2: one workgroup-scope BM x BN accumulator, A BM x BK, B BK x BN (VK_NV_cooperative_matrix2).
//   otherwise: each subgroup of 32 holds FM x FN 16x16 accumulators and FM A / FN B fragments
//   (VK_KHR_cooperative_matrix), the shape the hand-staged GEMM's inner loop has.
// FLOPs a workgroup: ITERS * 2 * BM * BN * BK (CM2) or ITERS * subgroups * FM * FN * 2 * 16³.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_bfloat16 : require
// variant: cm2 CM2 BM=128 BN=128 BK=32 THREADS=256
// variant: cm2_t128 CM2 BM=128 BN=128 BK=64 THREADS=128
// variant: cm2_wide CM2 BM=128 BN=256 BK=32 THREADS=256
// variant: khr FM=4 FN=2 THREADS=256
// variant: khr44 FM=4 FN=4 THREADS=256
#ifdef CM2
#extension GL_NV_cooperative_matrix2 : require
#endif
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer EIn { bfloat16_t v[]; };
layout(local_size_x = THREADS) in;
layout(push_constant) uniform Push {
    EIn a;
    F32Buf c;
    uint iters;
} pc;

void main() {
#ifdef CM2
    coopmat<bfloat16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ma;
    coopmat<bfloat16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> mb;
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    coopMatLoad(ma, pc.a.v, 0, BK, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(mb, pc.a.v, 0, BN, gl_CooperativeMatrixLayoutRowMajor);
    for (uint i = 0; i < pc.iters; i++) {
        acc = coopMatMulAdd(ma, mb, acc);
    }
    coopMatStore(acc, pc.c.v, gl_WorkGroupID.x * BM * BN, BN, gl_CooperativeMatrixLayoutRowMajor);
#else
    coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> fa[FM];
    coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> fb[FN];
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[FM][FN];
    [[unroll]] for (uint i = 0; i < FM; i++) coopMatLoad(fa[i], pc.a.v, i * 256, 16, gl_CooperativeMatrixLayoutRowMajor);
    [[unroll]] for (uint j = 0; j < FN; j++) coopMatLoad(fb[j], pc.a.v, j * 256, 16, gl_CooperativeMatrixLayoutRowMajor);
    [[unroll]] for (uint i = 0; i < FM; i++)
        [[unroll]] for (uint j = 0; j < FN; j++) acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    for (uint it = 0; it < pc.iters; it++) {
        [[unroll]] for (uint i = 0; i < FM; i++)
            [[unroll]] for (uint j = 0; j < FN; j++) acc[i][j] = coopMatMulAdd(fa[i], fb[j], acc[i][j]);
    }
    uint base = (gl_WorkGroupID.x * (THREADS / 32) + gl_SubgroupID) * FM * FN * 256;
    [[unroll]] for (uint i = 0; i < FM; i++)
        [[unroll]] for (uint j = 0; j < FN; j++) coopMatStore(acc[i][j], pc.c.v, base + (i * FN + j) * 256, 16, gl_CooperativeMatrixLayoutRowMajor);
#endif
}
