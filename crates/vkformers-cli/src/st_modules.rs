//! A sentence-transformers folder: `modules.json` (Transformer → Pooling → Normalize), the
//! pooling module's `config.json` and `sentence_bert_config.json`, read as
//! `SentenceTransformer(DIR)` reads them. A plain model folder (no `modules.json`) gets
//! sentence-transformers' fallback: mean pooling, no normalisation.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use serde_json::Value;

/// How token vectors become one sentence vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    Mean,
    Cls,
    Max,
    LastToken,
}

/// What `embed` runs.
#[derive(Clone, Debug, PartialEq)]
pub struct SentenceModel {
    /// The transformer's folder (config.json, weights, tokenizer).
    pub transformer: PathBuf,
    pub pooling: PoolMode,
    pub normalize: bool,
    /// `max_seq_length`: longer inputs are truncated.
    pub max_seq_length: Option<usize>,
    pub lowercase: bool,
}

impl SentenceModel {
    pub fn read(dir: &Path) -> anyhow::Result<SentenceModel> {
        let mut m = SentenceModel {
            transformer: dir.to_path_buf(),
            pooling: PoolMode::Mean,
            normalize: false,
            max_seq_length: None,
            lowercase: false,
        };
        let modules_path = dir.join("modules.json");
        if !modules_path.exists() {
            return Ok(m);
        }
        let modules = vkformers_io::read_json(&modules_path)?;
        let list = modules.as_array().with_context(|| format!("{}: not a list of modules", modules_path.display()))?;
        for module in list {
            let kind = module["type"].as_str().unwrap_or_default();
            let path = dir.join(module["path"].as_str().unwrap_or_default());
            match kind.rsplit('.').next().unwrap_or_default() {
                "Transformer" => {
                    m.transformer = path.clone();
                    let cfg = read_optional(&path.join("sentence_bert_config.json"))?;
                    m.max_seq_length = cfg["max_seq_length"].as_u64().map(|v| v as usize);
                    m.lowercase = cfg["do_lower_case"].as_bool().unwrap_or(false);
                }
                "Pooling" => m.pooling = pooling(&vkformers_io::read_json(path.join("config.json"))?, &path)?,
                "Normalize" => m.normalize = true,
                other => bail!(
                    "{}: the sentence-transformers module `{other}` is not supported yet (supported: Transformer, \
                     Pooling, Normalize)",
                    modules_path.display()
                ),
            }
        }
        Ok(m)
    }
}

fn read_optional(path: &Path) -> anyhow::Result<Value> {
    if path.exists() {
        Ok(vkformers_io::read_json(path)?)
    } else {
        Ok(Value::Null)
    }
}

/// The one pooling mode the config turns on (`pooling_mode_*_token(s)`, or `pooling_mode`).
fn pooling(cfg: &Value, dir: &Path) -> anyhow::Result<PoolMode> {
    if let Some(mode) = cfg["pooling_mode"].as_str() {
        return named(mode, dir);
    }
    let on = |k: &str| cfg[k].as_bool().unwrap_or(false);
    let modes = [
        ("pooling_mode_mean_tokens", Some(PoolMode::Mean)),
        ("pooling_mode_cls_token", Some(PoolMode::Cls)),
        ("pooling_mode_max_tokens", Some(PoolMode::Max)),
        ("pooling_mode_lasttoken", Some(PoolMode::LastToken)),
        ("pooling_mode_mean_sqrt_len_tokens", None),
        ("pooling_mode_weightedmean_tokens", None),
    ];
    let chosen: Vec<&(&str, Option<PoolMode>)> = modes.iter().filter(|(k, _)| on(k)).collect();
    match chosen.as_slice() {
        [(_, Some(mode))] => Ok(*mode),
        [(key, None)] => bail!("{}: `{key}` is not supported yet (mean, cls, max, lasttoken are)", dir.display()),
        [] => bail!("{}: no pooling mode is on", dir.display()),
        _ => bail!("{}: several pooling modes at once (concatenated) are not supported yet", dir.display()),
    }
}

fn named(mode: &str, dir: &Path) -> anyhow::Result<PoolMode> {
    Ok(match mode {
        "mean" => PoolMode::Mean,
        "cls" => PoolMode::Cls,
        "max" => PoolMode::Max,
        "lasttoken" => PoolMode::LastToken,
        other => bail!("{}: pooling mode `{other}` is not supported yet", dir.display()),
    })
}

/// Pools `hidden [B·T, D]` (host) under `mask [B·T]` (right padding): max over real tokens
/// (sentence-transformers sets padded positions to -1e9 first), or the last real token.
pub fn pool_host(hidden: &[f32], mask: &[i32], (b, t): (usize, usize), mode: PoolMode) -> Vec<f32> {
    let d = hidden.len() / (b * t).max(1);
    let mut out = vec![0f32; b * d];
    for row in 0..b {
        let m = &mask[row * t..(row + 1) * t];
        let v = &mut out[row * d..(row + 1) * d];
        let token = |i: usize| &hidden[(row * t + i) * d..(row * t + i + 1) * d];
        match mode {
            PoolMode::Max => {
                v.fill(-1e9);
                for i in (0..t).filter(|&i| m[i] != 0) {
                    v.iter_mut().zip(token(i)).for_each(|(a, &x)| *a = a.max(x));
                }
            }
            PoolMode::LastToken => {
                let last = m.iter().rposition(|&x| x != 0).unwrap_or(0);
                v.copy_from_slice(token(last));
            }
            PoolMode::Cls => v.copy_from_slice(token(0)),
            PoolMode::Mean => {
                // The sum over real tokens, then / max(count, 1e-9), as sentence-transformers.
                let n = m.iter().filter(|&&x| x != 0).count() as f32;
                for i in (0..t).filter(|&i| m[i] != 0) {
                    v.iter_mut().zip(token(i)).for_each(|(a, &x)| *a += x);
                }
                v.iter_mut().for_each(|a| *a /= n.max(1e-9));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_and_last_token_skip_padding() {
        // Two rows of T=3, D=2; row 1 has one padded position holding large values.
        let h = [1.0, -5.0, 3.0, 0.0, 2.0, 1.0, /* row 1 */ -1.0, 4.0, -2.0, 6.0, 9.0, 9.0];
        let mask = [1, 1, 1, 1, 1, 0];
        assert_eq!(pool_host(&h, &mask, (2, 3), PoolMode::Max), vec![3.0, 1.0, -1.0, 6.0]);
        assert_eq!(pool_host(&h, &mask, (2, 3), PoolMode::LastToken), vec![2.0, 1.0, -2.0, 6.0]);
        assert_eq!(pool_host(&h, &mask, (2, 3), PoolMode::Mean), vec![2.0, -4.0 / 3.0, -1.5, 5.0]);
    }

    #[test]
    fn pooling_config_modes() {
        let dir = Path::new("x");
        let cfg = serde_json::json!({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false});
        assert_eq!(pooling(&cfg, dir).unwrap(), PoolMode::Cls);
        let cfg = serde_json::json!({"pooling_mode_lasttoken": true});
        assert_eq!(pooling(&cfg, dir).unwrap(), PoolMode::LastToken);
        let both = serde_json::json!({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true});
        assert!(pooling(&both, dir).unwrap_err().to_string().contains("several"));
        let sqrt = serde_json::json!({"pooling_mode_mean_sqrt_len_tokens": true});
        assert!(pooling(&sqrt, dir).unwrap_err().to_string().contains("not supported yet"));
    }
}
