// Buffer types of the mixture-of-experts kernels: int32 expert ids, slot indices and offsets.
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer I32In { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32Buf { int v[]; };
