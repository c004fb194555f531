// Shared declarations. Every kernel receives its buffers as device addresses at the start of
// its push-constant block (see vkformers-vk/src/pipeline.rs), so no binding-size limit applies.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Buf { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer F32In { float v[]; };

// Grid-stride loop over n elements: any n runs within the device's workgroup-count limit.
#define FOR_EACH_INDEX(i, n) \
    for (uint i = gl_GlobalInvocationID.x; i < (n); i += gl_NumWorkGroups.x * gl_WorkGroupSize.x)
