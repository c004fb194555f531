//! Inverse frequencies of rotary embeddings for every `rope_type` transformers knows, computed
//! on the host once per model (the kernel takes `inv_freq [R/2]` and a cos/sin multiplier).
//!
//! default:  inv_freq[i] = 1 / base^(2i/R)   (in f32, as transformers computes it)
//! linear:   default / factor
//! dynamic:  default (NTK rescaling only starts beyond max_position_embeddings)
//! llama3:   long wavelengths / factor, short ones kept, a smooth blend between
//! yarn:     blend of interpolated and extrapolated frequencies by a linear ramp over dims,
//!           cos/sin multiplied by the attention factor (0.1·ln(factor) + 1 by default)
//! longrope: default / short_factor[i] (sequences up to the original context; beyond it
//!           default / long_factor[i], see `long_inv_freq`), cos/sin multiplied by
//!           sqrt(1 + ln(scale) / ln(original_max_position_embeddings))

use serde_json::Value;

use crate::error::{ModelError, Result};

/// Rotary scaling parameters as found in `rope_scaling` / `rope_parameters`.
#[derive(Clone, Debug, Default)]
pub struct RopeParams {
    pub rope_type: String,
    pub theta: f64,
    pub factor: f64,
    pub scaling: Value,
}

/// `(inv_freq [rotary_dim/2], mscale)` for `rotary_dim` rotated dims.
pub fn inv_freq(p: &RopeParams, rotary_dim: usize, max_positions: usize) -> Result<(Vec<f32>, f32)> {
    // The rotated width comes from config numbers (head_dim × partial_rotary_factor); no real
    // head is wider than this, and a hostile value must not size a host allocation.
    if rotary_dim > MAX_ROTARY_DIM {
        return Err(ModelError::Config(format!(
            "the rotary dimension {rotary_dim} (head_dim × partial_rotary_factor) exceeds {MAX_ROTARY_DIM}"
        )));
    }
    let base = default_inv_freq(p.theta, rotary_dim);
    match p.rope_type.as_str() {
        "default" | "" | "dynamic" => Ok((base, 1.0)),
        "linear" => Ok((base.iter().map(|f| (f64::from(*f) / p.factor) as f32).collect(), 1.0)),
        "llama3" => llama3(p, &base),
        "yarn" => yarn(p, rotary_dim, max_positions),
        "longrope" => longrope(p, rotary_dim, max_positions),
        other => Err(ModelError::Unsupported(format!("rope_type `{other}`"))),
    }
}

/// `1 / base^(2i/R)` with the exponent and power in f32, as `torch.arange(0, R, 2).float() / R`.
/// The widest rotated head dimension accepted.
const MAX_ROTARY_DIM: usize = 1 << 14;

fn default_inv_freq(theta: f64, dim: usize) -> Vec<f32> {
    (0..dim / 2).map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / dim as f32)).collect()
}

fn field(p: &RopeParams, name: &str) -> Option<f64> {
    p.scaling.get(name).and_then(Value::as_f64)
}

fn need(p: &RopeParams, name: &str) -> Result<f64> {
    field(p, name).ok_or_else(|| ModelError::Config(format!("rope_scaling of type `{}` needs `{name}`", p.rope_type)))
}

fn llama3(p: &RopeParams, base: &[f32]) -> Result<(Vec<f32>, f32)> {
    let (low, high) = (need(p, "low_freq_factor")?, need(p, "high_freq_factor")?);
    let old = need(p, "original_max_position_embeddings")?;
    let (low_wavelen, high_wavelen) = (old / low, old / high);
    let out = base
        .iter()
        .map(|&f| {
            let f = f64::from(f);
            let wavelen = 2.0 * std::f64::consts::PI / f;
            let v = if wavelen > low_wavelen {
                f / p.factor
            } else if wavelen < high_wavelen {
                f
            } else {
                let smooth = (old / wavelen - low) / (high - low);
                (1.0 - smooth) * f / p.factor + smooth * f
            };
            v as f32
        })
        .collect();
    Ok((out, 1.0))
}

/// YaRN's `get_mscale`: `0.1·m·ln(scale) + 1` above scale 1. DeepSeek's attention also
/// multiplies its softmax scale by the square of this with `m = mscale_all_dim`.
pub(crate) fn yarn_mscale(scale: f64, m: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * m * scale.ln() + 1.0
    }
}

fn yarn(p: &RopeParams, dim: usize, max_positions: usize) -> Result<(Vec<f32>, f32)> {
    let factor = p.factor;
    let original = field(p, "original_max_position_embeddings").unwrap_or(max_positions as f64);
    let attention = match (field(p, "attention_factor"), field(p, "mscale"), field(p, "mscale_all_dim")) {
        (Some(a), _, _) => a,
        // transformers tests `if mscale and mscale_all_dim`: a zero in either means the default.
        (None, Some(m), Some(ma)) if m != 0.0 && ma != 0.0 => yarn_mscale(factor, m) / yarn_mscale(factor, ma),
        _ => yarn_mscale(factor, 1.0),
    };
    let (beta_fast, beta_slow) = (field(p, "beta_fast").unwrap_or(32.0), field(p, "beta_slow").unwrap_or(1.0));
    let correction =
        |rot: f64| (dim as f64 * (original / (rot * 2.0 * std::f64::consts::PI)).ln()) / (2.0 * p.theta.ln());
    let truncate = p.scaling.get("truncate").and_then(Value::as_bool).unwrap_or(true);
    let (mut low, mut high) = (correction(beta_fast), correction(beta_slow));
    if truncate {
        low = low.floor();
        high = high.ceil();
    }
    let (low, mut high) = (low.max(0.0), high.min(dim as f64 - 1.0));
    if low == high {
        high += 0.001;
    }
    let out = (0..dim / 2)
        .map(|i| {
            let pos_freq = p.theta.powf((2 * i) as f64 / dim as f64);
            let (extrapolated, interpolated) = (1.0 / pos_freq, 1.0 / (factor * pos_freq));
            let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
            let keep = 1.0 - ramp;
            (interpolated * (1.0 - keep) + extrapolated * keep) as f32
        })
        .collect();
    Ok((out, attention as f32))
}

/// LongRoPE's per-frequency factors `name` (`short_factor` or `long_factor`), one per frequency.
fn longrope_factors(p: &RopeParams, name: &str, dim: usize) -> Result<Vec<f64>> {
    let f: Vec<f64> = p
        .scaling
        .get(name)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .ok_or_else(|| ModelError::Config(format!("longrope needs `{name}`")))?;
    if f.len() != dim / 2 {
        return Err(ModelError::Config(format!("longrope {name} has {} values for {} frequencies", f.len(), dim / 2)));
    }
    Ok(f)
}

/// For LongRoPE, `(inv_freq [rotary_dim/2] with the long factors, original context)`: used by a
/// forward whose sequence (largest position id + 1) exceeds the original context, as
/// transformers' `longrope_frequency_update`. `None` for every other rope type.
pub fn long_inv_freq(p: &RopeParams, dim: usize, max_positions: usize) -> Result<Option<(Vec<f32>, usize)>> {
    if p.rope_type != "longrope" {
        return Ok(None);
    }
    let long = longrope_factors(p, "long_factor", dim)?;
    let original = field(p, "original_max_position_embeddings").unwrap_or(max_positions as f64);
    let out = (0..dim / 2).map(|i| (1.0 / (long[i] * p.theta.powf((2 * i) as f64 / dim as f64))) as f32).collect();
    Ok(Some((out, original as usize)))
}

fn longrope(p: &RopeParams, dim: usize, max_positions: usize) -> Result<(Vec<f32>, f32)> {
    let short = longrope_factors(p, "short_factor", dim)?;
    let original = field(p, "original_max_position_embeddings").unwrap_or(max_positions as f64);
    // transformers uses `factor` where given, else max / original positions.
    let scale = field(p, "factor").unwrap_or(max_positions as f64 / original);
    let attention = field(p, "attention_factor").unwrap_or(if scale <= 1.0 {
        1.0
    } else {
        (1.0 + scale.ln() / original.ln()).sqrt()
    });
    let out = (0..dim / 2).map(|i| (1.0 / (short[i] * p.theta.powf((2 * i) as f64 / dim as f64))) as f32).collect();
    Ok((out, attention as f32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(t: &str, scaling: Value) -> RopeParams {
        RopeParams {
            rope_type: t.into(),
            theta: 10000.0,
            factor: scaling.get("factor").and_then(Value::as_f64).unwrap_or(1.0),
            scaling,
        }
    }

    #[test]
    fn default_and_linear() {
        let (f, m) = inv_freq(&params("default", Value::Null), 8, 64).unwrap();
        assert_eq!((f.len(), m), (4, 1.0));
        assert_eq!(f[0], 1.0);
        assert!((f64::from(f[1]) - 0.1).abs() < 1e-7 && (f64::from(f[3]) - 1e-3).abs() < 1e-9);
        let (l, _) = inv_freq(&params("linear", serde_json::json!({"factor": 4.0})), 8, 64).unwrap();
        assert!((l[1] - f[1] / 4.0).abs() < 1e-9);
    }

    #[test]
    fn llama3_scales_only_long_wavelengths() {
        let s = serde_json::json!({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16});
        let (f, _) = inv_freq(&params("llama3", s), 8, 64).unwrap();
        let (d, _) = inv_freq(&params("default", Value::Null), 8, 64).unwrap();
        // Wavelength 2π lies between 16/4 and 16/1: blended with s = (16/2π − 1)/(4 − 1).
        let s = (16.0 / (2.0 * std::f64::consts::PI) - 1.0) / 3.0;
        assert!((f64::from(f[0]) - ((1.0 - s) / 8.0 + s)).abs() < 1e-7);
        // Wavelength 2π·1000 > 16: divided by 8.
        assert!((f[3] - d[3] / 8.0).abs() < 1e-12);
    }

    #[test]
    fn unknown_type_is_an_error_naming_it() {
        let e = inv_freq(&params("wibble", Value::Null), 8, 64).unwrap_err().to_string();
        assert!(e.contains("wibble"), "{e}");
    }
}
