//! Value parsers that refuse out-of-range numbers when the command line is parsed, so a typo
//! like `--beta1 2` or `--batch-size 0` fails at once with clap's message naming the flag
//! (`invalid value '2' for '--beta1 <BETA1>': must be in [0, 1)`) instead of deep inside a run
//! or, worse, silently training with it.

fn number<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.trim().parse().map_err(|_| format!("expected {what}"))
}

fn float(s: &str) -> Result<f64, String> {
    let v: f64 = number(s, "a number")?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err("must be a finite number".into())
    }
}

/// A count of at least 1 (batch sizes, accumulation, steps, epochs, ranks).
pub fn at_least_one(s: &str) -> Result<usize, String> {
    let v: i128 = number(s, "a whole number")?;
    usize::try_from(v).ok().filter(|&v| v >= 1).ok_or_else(|| "must be at least 1".into())
}

/// [`at_least_one`] for step and epoch counts.
pub fn at_least_one_u64(s: &str) -> Result<u64, String> {
    at_least_one(s).map(|v| v as u64)
}

/// A count of 0 or more (`--top-k -1` gets this message rather than a parse error).
pub fn count(s: &str) -> Result<usize, String> {
    let v: i128 = number(s, "a whole number")?;
    usize::try_from(v).map_err(|_| "must be 0 or more".into())
}

/// A number in [0, 1): AdamW's betas, dropout.
pub fn unit_open(s: &str) -> Result<f64, String> {
    let v = float(s)?;
    if (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err("must be in [0, 1)".into())
    }
}

/// [`unit_open`] as f32 (LoRA dropout).
pub fn unit_open_f32(s: &str) -> Result<f32, String> {
    unit_open(s).map(|v| v as f32)
}

/// A probability in (0, 1] (top-p).
pub fn probability(s: &str) -> Result<f64, String> {
    let v = float(s)?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err("must be in (0, 1]".into())
    }
}

/// A number in [0, 1] (min-p).
pub fn unit_closed(s: &str) -> Result<f64, String> {
    let v = float(s)?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err("must be in [0, 1]".into())
    }
}

/// A number above 0 (epsilon, repetition penalty).
pub fn positive(s: &str) -> Result<f64, String> {
    let v = float(s)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err("must be greater than 0".into())
    }
}

/// A number of 0 or more (learning rates, weight decay, temperature).
pub fn non_negative(s: &str) -> Result<f64, String> {
    let v = float(s)?;
    if v >= 0.0 {
        Ok(v)
    } else {
        Err("must be 0 or more".into())
    }
}

/// [`non_negative`] as f32 (the gradient-norm clip, where 0 disables it).
pub fn non_negative_f32(s: &str) -> Result<f32, String> {
    non_negative(s).map(|v| v as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(at_least_one("3"), Ok(3));
        assert!(at_least_one("0").unwrap_err().contains("at least 1"));
        assert!(at_least_one("-2").is_err());
        assert_eq!(count("0"), Ok(0));
        assert!(count("-1").unwrap_err().contains("0 or more"));
        assert!(unit_open("1").is_err() && unit_open("0").is_ok() && unit_open("0.999").is_ok());
        assert!(probability("0").is_err() && probability("1").is_ok() && probability("1.01").is_err());
        assert!(positive("0").is_err() && positive("1e-8").is_ok());
        assert!(non_negative("-5").is_err() && non_negative("0").is_ok());
        assert!(non_negative("nan").is_err() && non_negative("inf").is_err());
    }
}
