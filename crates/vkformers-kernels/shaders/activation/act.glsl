// Pointwise activations f(x) and their derivatives f'(x), in f32. Shared by activation/ and glu/.
// A kernel picks one pair with the defines ACT_F=<name>_f ACT_D=<name>_d.

// c0 t^9 + c1 t^8 + ... + c9 by Horner's rule, as ((c0 t + c1) t + c2) t + ...: one product and
// one sum a coefficient, in this order (erfcx's two fits below).
float horner9(float t, float c0, float c1, float c2, float c3, float c4, float c5, float c6, float c7, float c8,
              float c9) {
    return ((((((((c0 * t + c1) * t + c2) * t + c3) * t + c4) * t + c5) * t + c6) * t + c7) * t + c8) * t + c9;
}

// erf(x) for f32, absolute error below 2e-7 everywhere:
//   |x| < 1:      x * P(x^2), the Taylor series of erf truncated after x^23 (alternating, no exp);
//   1 <= |x| < 4: 1 - exp(-x^2) * erfcx(|x|), erfcx(x) = exp(x^2) erfc(x) fitted by a degree-9
//                 Chebyshev polynomial on [1, 2] and on [2, 4] (relative error < 1e-7; erfc(x)
//                 <= 0.16 there, so exp's few-ulp error stays below 1e-8 absolute);
//   |x| >= 4:     +-1 (erfc(4) = 1.5e-8 is below half an ulp of 1).
float erf_f32(float x) {
    float a = abs(x);
    float r;
    if (a < 1.0) {
        float z = a * a;
        float p = -1.229055530e-09;
        p = p * z + 1.480719282e-08;
        p = p * z - 1.636584469e-07;
        p = p * z + 1.646211437e-06;
        p = p * z - 1.492565036e-05;
        p = p * z + 1.205533298e-04;
        p = p * z - 8.548327023e-04;
        p = p * z + 5.223977625e-03;
        p = p * z - 2.686617065e-02;
        p = p * z + 1.128379167e-01;
        p = p * z - 3.761263890e-01;
        p = p * z + 1.128379167e+00;
        r = a * p;
    } else if (a < 4.0) {
        float p;
        if (a < 2.0) {
            float t = 2.0 * a - 3.0; // [1, 2] -> [-1, 1]
            p = horner9(t, -1.516427548e-07, 9.302666719e-07, -5.161474437e-06, 2.941950723e-05,
                -1.608155118e-04, 8.361022630e-04, -4.116362385e-03, 1.903775765e-02, -8.181145891e-02,
                3.215854165e-01);
        } else {
            float t = a - 3.0; // [2, 4] -> [-1, 1]
            p = horner9(t, -1.433460605e-06, 5.935722079e-06, -2.078340201e-05, 8.284357596e-05,
                -3.242170295e-04, 1.223296457e-03, -4.479414537e-03, 1.588433871e-02, -5.437226084e-02,
                1.790011518e-01);
        }
        r = 1.0 - exp(-a * a) * p;
    } else {
        r = 1.0;
    }
    return x < 0.0 ? -r : r;
}

// sigmoid(x) = 1 / (1 + exp(-x)); exp overflowing to +inf gives exactly 0.
float sigmoid_f(float x) { return 1.0 / (1.0 + exp(-x)); }
float sigmoid_d(float x) { float s = sigmoid_f(x); return s * (1.0 - s); }

// silu(x) = x sigmoid(x); silu'(x) = s (1 + x (1 - s)).
float silu_f(float x) { return x * sigmoid_f(x); }
float silu_d(float x) { float s = sigmoid_f(x); return s * (1.0 + x * (1.0 - s)); }

// gelu(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); gelu'(x) = Phi(x) + x phi(x),
// phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
float gelu_f(float x) { return 0.5 * x * (1.0 + erf_f32(x * 0.70710678118654752)); }
float gelu_d(float x) {
    return 0.5 * (1.0 + erf_f32(x * 0.70710678118654752)) + x * 0.39894228040143268 * exp(-0.5 * x * x);
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): finite for every u (exp overflow gives exactly +-1).
float tanh_safe(float u) { return 1.0 - 2.0 / (exp(2.0 * u) + 1.0); }

// gelu_tanh(x) = 0.5 x (1 + tanh(k (x + c x^3))), k = sqrt(2 / pi), c = 0.044715 (PyTorch's
// approximate='tanh'); derivative 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2).
float gelu_tanh_f(float x) {
    float t = tanh_safe(0.79788456080286536 * (x + 0.044715 * x * x * x));
    return 0.5 * x * (1.0 + t);
}
float gelu_tanh_d(float x) {
    float t = tanh_safe(0.79788456080286536 * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.79788456080286536 * (1.0 + 3.0 * 0.044715 * x * x);
}

// relu(x) = max(x, 0); relu'(x) = [x > 0].
float relu_f(float x) { return max(x, 0.0); }
float relu_d(float x) { return x > 0.0 ? 1.0 : 0.0; }

// relu2(x) = max(x, 0)^2; relu2'(x) = 2 max(x, 0).
float relu2_f(float x) { float r = max(x, 0.0); return r * r; }
float relu2_d(float x) { return 2.0 * max(x, 0.0); }

// erf itself, for the accuracy test of erf_f32.
float erf_d(float x) { return 1.1283791670955126 * exp(-x * x); }
