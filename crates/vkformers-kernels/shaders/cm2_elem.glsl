// The extensions of every NVIDIA cooperative-matrix-2 kernel with 16-bit operands, and ELEM, the
// operand type: bfloat16_t with ELEM_BF16 defined, else float16_t. Include first, before any
// declaration (attention/cm2.glsl, moe/grouped_cm2.glsl).
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#ifdef ELEM_BF16
#extension GL_EXT_bfloat16 : require
#define ELEM bfloat16_t
#else
#define ELEM float16_t
#endif
