//! f64 CPU reference of the activations, forward and backward, with an f64 `erf` accurate to
//! about 1e-15 absolute.

use super::Activation;

const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
const GELU_TANH_K: f64 = 0.797_884_560_802_865_4; // sqrt(2 / pi)
const GELU_TANH_C: f64 = 0.044715;

/// erf(x) in f64. For |x| < 3 the everywhere-positive series
/// erf(x) = 2/sqrt(pi) x exp(-x^2) sum_n (2x^2)^n / (1*3*...*(2n+1)) (no cancellation);
/// for |x| >= 3, 1 - erfc(x) with erfc from its continued fraction
/// erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))) evaluated with
/// the modified Lentz method (erfc(3) = 2.2e-5, so its relative error hardly matters).
pub fn erf(x: f64) -> f64 {
    let a = x.abs();
    if a.is_nan() {
        return f64::NAN;
    }
    let r = if a < 3.0 {
        let z = 2.0 * a * a;
        let (mut term, mut sum, mut n) = (1.0f64, 1.0f64, 0.0f64);
        while term > sum * 1e-17 {
            term *= z / (2.0 * n + 3.0);
            sum += term;
            n += 1.0;
        }
        FRAC_2_SQRT_PI * a * (-a * a).exp() * sum
    } else if a < 6.5 {
        1.0 - erfc_cf(a)
    } else {
        1.0
    };
    r.copysign(x)
}

/// erfc(x) for x >= 3 by the continued fraction (modified Lentz).
fn erfc_cf(x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut f = x;
    let mut c = x;
    let mut d = 0.0;
    for n in 1..500 {
        let a = f64::from(n) * 0.5;
        d = x + a * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = x + a / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / f
}

/// The logistic function 1 / (1 + exp(-x)).
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// f(x).
pub fn value(act: Activation, x: f64) -> f64 {
    match act {
        Activation::Silu => x * sigmoid(x),
        Activation::Gelu => 0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2)),
        Activation::GeluTanh => 0.5 * x * (1.0 + (GELU_TANH_K * (x + GELU_TANH_C * x * x * x)).tanh()),
        Activation::Relu => x.max(0.0),
        Activation::Relu2 => x.max(0.0).powi(2),
        Activation::Sigmoid => sigmoid(x),
    }
}

/// f'(x) (0 at the kink of ReLU).
pub fn derivative(act: Activation, x: f64) -> f64 {
    match act {
        Activation::Silu => {
            let s = sigmoid(x);
            s * (1.0 + x * (1.0 - s))
        }
        Activation::Gelu => {
            let phi = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            0.5 * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2)) + x * phi
        }
        Activation::GeluTanh => {
            let t = (GELU_TANH_K * (x + GELU_TANH_C * x * x * x)).tanh();
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_TANH_K * (1.0 + 3.0 * GELU_TANH_C * x * x)
        }
        Activation::Relu => {
            if x > 0.0 {
                1.0
            } else {
                0.0
            }
        }
        Activation::Relu2 => 2.0 * x.max(0.0),
        Activation::Sigmoid => {
            let s = sigmoid(x);
            s * (1.0 - s)
        }
    }
}

/// y = f(x) elementwise.
pub fn forward(act: Activation, x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| value(act, v)).collect()
}

/// dx = dy * f'(x) elementwise.
pub fn backward(act: Activation, x: &[f64], dy: &[f64]) -> Vec<f64> {
    x.iter().zip(dy).map(|(&v, &g)| g * derivative(act, v)).collect()
}
