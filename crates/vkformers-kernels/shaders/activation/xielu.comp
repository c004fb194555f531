#version 460
#include "common.glsl"
// xIELU (Apertus' MLP activation), with learned scalars a_p, a_n (stored raw, through softplus)
// and constants beta, eps:
//   ap = softplus(a_p), an = beta + softplus(a_n)
//   y = ap x^2 + beta x                              x > 0
//   y = an (expm1(min(x, eps)) - x) + beta x         x <= 0
// Backward (dy given): dx = dy (2 ap x + beta) for x > 0, else
//   dy (an (e' - 1) + beta), e' = exp(x) for x < eps, 0 for x > eps, exp(eps) / 2 at x = eps
//   (torch.minimum splits the gradient of a tie);
// and per element the terms whose sums are the scalars' gradients before softplus' chain rule:
//   gp[i] = dy x^2 (x > 0, else 0),  gn[i] = dy (expm1(min(x, eps)) - x) (x <= 0, else 0).
// x, y, dy, dx, gp, gn [n] f32; a_p, a_n, beta, eps [1] f32 (device values, no host read).
// variant: forward XIELU_FORWARD
// variant: backward
layout(local_size_x = 256) in;
#ifdef XIELU_FORWARD
layout(push_constant) uniform Push { F32In x; F32In a_p; F32In a_n; F32In beta; F32In eps; F32Buf y; uint n; } pc;
#else
layout(push_constant) uniform Push {
    F32In x; F32In a_p; F32In a_n; F32In beta; F32In eps; F32In dy; F32Buf dx; F32Buf gp; F32Buf gn; uint n;
} pc;
#endif

// log(1 + e^u) without overflow: u for u > 20 (e^-20 is below f32's precision at 20).
float softplus(float u) { return u > 20.0 ? u : log(1.0 + exp(u)); }

// e^u - 1 for u <= 0 without cancellation near 0: Taylor's series to u^8 for |u| < 0.5
// (remainder below |u|^9 / 9! < 6e-9 of |expm1(u)| >= 0.39 |u|), exp(u) - 1 beyond.
float expm1_neg(float u) {
    if (u < -0.5) {
        return exp(u) - 1.0;
    }
    float s = 1.0 / 40320.0;
    s = s * u + 1.0 / 5040.0;
    s = s * u + 1.0 / 720.0;
    s = s * u + 1.0 / 120.0;
    s = s * u + 1.0 / 24.0;
    s = s * u + 1.0 / 6.0;
    s = s * u + 0.5;
    s = s * u + 1.0;
    return s * u;
}

void main() {
    float beta = pc.beta.v[0];
    float eps = pc.eps.v[0];
    float ap = softplus(pc.a_p.v[0]);
    float an = beta + softplus(pc.a_n.v[0]);
    FOR_EACH_INDEX(i, pc.n) {
        float x = pc.x.v[i];
        float neg = expm1_neg(min(x, eps)) - x;
#ifdef XIELU_FORWARD
        pc.y.v[i] = x > 0.0 ? ap * x * x + beta * x : an * neg + beta * x;
#else
        float dy = pc.dy.v[i];
        float de = x < eps ? exp(x) : (x == eps ? 0.5 * exp(eps) : 0.0);
        pc.dx.v[i] = dy * (x > 0.0 ? 2.0 * ap * x + beta : an * (de - 1.0) + beta);
        pc.gp.v[i] = x > 0.0 ? dy * x * x : 0.0;
        pc.gn.v[i] = x > 0.0 ? 0.0 : dy * neg;
#endif
    }
}
