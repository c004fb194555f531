// gpt-oss's clamped SwiGLU, shared by its forward and backward: for gate_up rows of 2·inner
// values, gate g and up u of column j are at (2j, 2j + 1) when interleaved (gpt-oss's packed
// experts) or at (j, inner + j) (the gate-then-up halves of the other fused layouts).
//   gc = min(g, limit),  uc = clamp(u, -limit, limit)
//   out = (uc + 1) · gc · sigmoid(alpha · gc)
uint gate_at(uint r, uint j, uint inner, uint interleaved) {
    return interleaved != 0u ? r * 2u * inner + 2u * j : r * 2u * inner + j;
}

uint up_at(uint r, uint j, uint inner, uint interleaved) {
    return interleaved != 0u ? gate_at(r, j, inner, interleaved) + 1u : r * 2u * inner + inner + j;
}

float sigmoid_f(float x) {
    return 1.0 / (1.0 + exp(-x));
}
