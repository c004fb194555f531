// Shared by rope/rope.comp and attention/decode_rope.comp (one expression, so both rotate bit
// for bit alike).
// sin and cos of a, in f32. Cody-Waite reduction by pi/2 with Cephes' three-part constant
// (k * C1 exact for |k| < 2^16, k * C2 for |k| < 2^12: near-exact for |a| < 6400, and beyond
// that off by about an ulp of a, as a itself is), then minimax polynomials on [-pi/4, pi/4].
// Builtin sin/cos are avoided: Vulkan only requires 2^-11 absolute error of them.
void sincos_f32(float a, out float s, out float c) {
    precise float k = floor(a * 0.636619772367581343 + 0.5);
    precise float r = ((a - k * 1.5703125) - k * 4.837512969970703125e-4) - k * 7.54978995489188216e-8;
    precise float z = r * r;
    precise float sp = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    precise float cp = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z
        - 0.5 * z + 1.0;
    int q = int(k) & 3;
    s = q == 0 ? sp : (q == 1 ? cp : (q == 2 ? -sp : -cp));
    c = q == 0 ? cp : (q == 1 ? -sp : (q == 2 ? -cp : sp));
}
