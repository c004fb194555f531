// Buffer types of the embedding kernels: int32 token ids and uint32 counting-sort scratch.
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer I32In { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer U32In { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer U32Buf { uint v[]; };

// The id of token n if it is a valid row of the table, else -1 (no row is read or written).
int valid_id(I32In ids, uint n, uint vocab) {
    int id = ids.v[n];
    return (id >= 0 && uint(id) < vocab) ? id : -1;
}
