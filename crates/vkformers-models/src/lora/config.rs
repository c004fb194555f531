//! PEFT's `adapter_config.json` for LoRA: the fields vkformers reads and writes, with PEFT's
//! names and meanings. Options that change the math and that vkformers does not implement
//! (DoRA, per-module rank/alpha patterns, LoRA biases, layer selection) are refused with an
//! error naming the field, never ignored.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::error::{ModelError, Result};

/// Which modules get a LoRA pair (PEFT's `target_modules`).
#[derive(Clone, Debug, PartialEq)]
pub enum Targets {
    /// A module matches when its full name equals a name or ends with `.name`.
    Names(Vec<String>),
    /// A module matches when the regex matches its whole name (Python's `re.fullmatch`).
    Regex(String),
    /// Every linear module except the output head.
    AllLinear,
}

impl Targets {
    /// Parses a command-line value: `all-linear`, a comma-separated name list, or (when it has
    /// a regex metacharacter) a regex.
    pub fn parse_cli(s: &str) -> Targets {
        if s == "all-linear" {
            Targets::AllLinear
        } else if s.chars().any(|c| "*+?()[]|\\^$".contains(c)) {
            Targets::Regex(s.to_string())
        } else {
            Targets::Names(s.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect())
        }
    }
}

/// A LoRA adapter's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    pub r: usize,
    pub lora_alpha: f64,
    pub lora_dropout: f32,
    pub target_modules: Targets,
    /// Parameters adapted directly (PEFT's `target_parameters`): the packed expert tensors of an
    /// MoE layer, e.g. `experts.gate_up_proj`; a parameter matches when its full name equals an
    /// entry or ends with `.entry`.
    pub target_parameters: Vec<String>,
    /// Scale `alpha / sqrt(r)` (rsLoRA) instead of `alpha / r`.
    pub use_rslora: bool,
    /// Modules trained in full and saved whole next to the LoRA pairs.
    pub modules_to_save: Vec<String>,
    /// The base weight is stored `[in, out]` (GPT-2's Conv1D); the adapter layout is the same.
    pub fan_in_fan_out: bool,
    pub base_model_name_or_path: Option<String>,
    /// PEFT's `task_type`: `CAUSAL_LM`, `SEQ_2_SEQ_LM` for an encoder-decoder, `SEQ_CLS` /
    /// `TOKEN_CLS` for an encoder's classification head.
    pub task_type: String,
}

/// PEFT's task type of a sequence classifier (`PeftModelForSequenceClassification`).
pub const SEQ_CLS: &str = "SEQ_CLS";
/// PEFT's task type of a token classifier (`PeftModelForTokenClassification`).
pub const TOKEN_CLS: &str = "TOKEN_CLS";
/// The modules PEFT's classification wrappers add to `modules_to_save` (the new head trained
/// in full: `classifier` in BERT-likes, `score` in decoder classifiers).
pub const CLASSIFIER_MODULES: [&str; 2] = ["classifier", "score"];

impl LoraConfig {
    /// A config with PEFT's defaults for everything but rank, alpha and targets.
    pub fn new(r: usize, lora_alpha: f64, target_modules: Targets) -> Self {
        LoraConfig {
            r,
            lora_alpha,
            lora_dropout: 0.0,
            target_modules,
            target_parameters: Vec::new(),
            use_rslora: false,
            modules_to_save: Vec::new(),
            fan_in_fan_out: false,
            base_model_name_or_path: None,
            task_type: "CAUSAL_LM".into(),
        }
    }

    /// Makes this the config of a classifier of `task_type` (SEQ_CLS / TOKEN_CLS) as PEFT's
    /// wrapper does: `classifier` and `score` appended to `modules_to_save` (kept once).
    pub fn for_classifier(&mut self, task_type: &str) {
        self.task_type = task_type.to_string();
        for m in CLASSIFIER_MODULES {
            if !self.modules_to_save.iter().any(|x| x == m) {
                self.modules_to_save.push(m.to_string());
            }
        }
    }

    /// The factor of the LoRA term: `alpha / r`, or `alpha / sqrt(r)` with rsLoRA.
    pub fn scale(&self) -> f32 {
        let r = self.r as f64;
        (if self.use_rslora { self.lora_alpha / r.sqrt() } else { self.lora_alpha / r }) as f32
    }

    /// Reads `dir/adapter_config.json`.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join("adapter_config.json");
        let v = vkformers_io::read_json(&path).map_err(|e| ModelError::Config(e.to_string()))?;
        Self::from_json(&v).map_err(|e| ModelError::Config(format!("{}: {e}", path.display())))
    }

    /// Parses the JSON object of an `adapter_config.json`.
    pub fn from_json(v: &Value) -> std::result::Result<Self, String> {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        if s("peft_type") != Some("LORA") {
            let found = v.get("peft_type").map_or("missing".to_string(), Value::to_string);
            return Err(format!("peft_type is {found}; vkformers reads LoRA adapters (\"LORA\")"));
        }
        let task_type = s("task_type").unwrap_or("CAUSAL_LM").to_string();
        if !["CAUSAL_LM", "SEQ_2_SEQ_LM", SEQ_CLS, TOKEN_CLS].contains(&task_type.as_str()) {
            return Err(format!(
                "task_type `{task_type}`: vkformers runs causal LMs (CAUSAL_LM), encoder-decoders (SEQ_2_SEQ_LM) \
                 and encoder classifiers (SEQ_CLS, TOKEN_CLS)"
            ));
        }
        refuse_unsupported(v)?;
        let r = v.get("r").and_then(Value::as_u64).filter(|&r| r > 0).ok_or("`r` must be a positive integer")?;
        let target_modules = match v.get("target_modules") {
            Some(Value::String(t)) if t == "all-linear" => Targets::AllLinear,
            Some(Value::String(t)) => Targets::Regex(t.clone()),
            Some(Value::Array(a)) => Targets::Names(
                a.iter()
                    .map(|x| x.as_str().map(str::to_string).ok_or("target_modules must hold strings"))
                    .collect::<std::result::Result<_, _>>()?,
            ),
            _ => return Err("target_modules is missing; give the module names (e.g. [\"q_proj\", \"v_proj\"])".into()),
        };
        let target_parameters = match v.get("target_parameters") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_str().map(str::to_string).ok_or("target_parameters must hold strings"))
                .collect::<std::result::Result<_, _>>()?,
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return Err("target_parameters must be a list of parameter names".into()),
        };
        let modules_to_save = match v.get("modules_to_save") {
            Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
            _ => Vec::new(),
        };
        let lora_alpha = lora_alpha(v)?;
        let config = LoraConfig {
            r: r as usize,
            lora_alpha,
            lora_dropout: v.get("lora_dropout").and_then(Value::as_f64).unwrap_or(0.0) as f32,
            target_modules,
            target_parameters,
            use_rslora: v.get("use_rslora").and_then(Value::as_bool).unwrap_or(false),
            modules_to_save,
            fan_in_fan_out: v.get("fan_in_fan_out").and_then(Value::as_bool).unwrap_or(false),
            base_model_name_or_path: s("base_model_name_or_path").map(str::to_string),
            task_type,
        };
        // A scale past f32's range makes every adapted output inf or NaN.
        if !config.scale().is_finite() {
            let given = v.get("lora_alpha").map_or_else(String::new, Value::to_string);
            return Err(format!(
                "lora_alpha {given} with r {r} scales the LoRA term past f32's range; give a usual alpha (e.g. 2·r)"
            ));
        }
        Ok(config)
    }

    /// The JSON object PEFT writes, with `target_modules` as given (a resolved list for
    /// `all-linear` is passed in by the caller, as PEFT saves it).
    pub fn to_json(&self, resolved_targets: Option<&[String]>) -> Value {
        let targets = match (&self.target_modules, resolved_targets) {
            (Targets::AllLinear, Some(list)) => json!(list),
            (Targets::AllLinear, None) => json!("all-linear"),
            (Targets::Regex(r), _) => json!(r),
            (Targets::Names(n), _) => {
                let mut n = n.clone();
                n.sort();
                json!(n)
            }
        };
        // An integral alpha is written as PEFT writes it (an int), while it is exact as an i64;
        // a larger one stays a float (`as i64` would saturate and save another alpha).
        let exact_int = self.lora_alpha.fract() == 0.0 && self.lora_alpha.abs() < 2f64.powi(53);
        let alpha = if exact_int { json!(self.lora_alpha as i64) } else { json!(self.lora_alpha) };
        let mut m = Map::new();
        m.insert("alpha_pattern".into(), json!({}));
        m.insert("base_model_name_or_path".into(), json!(self.base_model_name_or_path));
        m.insert("bias".into(), json!("none"));
        m.insert("fan_in_fan_out".into(), json!(self.fan_in_fan_out));
        m.insert("inference_mode".into(), json!(true));
        m.insert("init_lora_weights".into(), json!(true));
        m.insert("layers_pattern".into(), Value::Null);
        m.insert("layers_to_transform".into(), Value::Null);
        m.insert("lora_alpha".into(), alpha);
        m.insert("lora_dropout".into(), json!(self.lora_dropout));
        m.insert(
            "modules_to_save".into(),
            if self.modules_to_save.is_empty() { Value::Null } else { json!(self.modules_to_save) },
        );
        m.insert("peft_type".into(), json!("LORA"));
        m.insert("r".into(), json!(self.r));
        m.insert("rank_pattern".into(), json!({}));
        m.insert("target_modules".into(), targets);
        let params = if self.target_parameters.is_empty() {
            Value::Null
        } else {
            let mut p = self.target_parameters.clone();
            p.sort();
            json!(p)
        };
        m.insert("target_parameters".into(), params);
        m.insert("task_type".into(), json!(self.task_type));
        m.insert("use_dora".into(), json!(false));
        m.insert("use_rslora".into(), json!(self.use_rslora));
        Value::Object(m)
    }
}

/// `lora_alpha`: a number (PEFT's default 8 when absent).
fn lora_alpha(v: &Value) -> std::result::Result<f64, String> {
    match v.get("lora_alpha") {
        None | Some(Value::Null) => Ok(8.0),
        Some(a) => a.as_f64().ok_or_else(|| format!("lora_alpha is {a}; give a number (PEFT's default is 8)")),
    }
}

/// Errors for PEFT options that would change the math and are not implemented.
fn refuse_unsupported(v: &Value) -> std::result::Result<(), String> {
    let truthy = |k: &str| match v.get(k) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    };
    for k in ["use_dora", "rank_pattern", "alpha_pattern", "layers_to_transform", "lora_bias", "exclude_modules"] {
        if truthy(k) {
            return Err(format!("`{k}` is set; vkformers supports plain LoRA without it"));
        }
    }
    match v.get("bias").and_then(Value::as_str) {
        None | Some("none") => Ok(()),
        Some(b) => Err(format!("bias `{b}`: vkformers trains LoRA with bias \"none\" only")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with_alpha(alpha: Value) -> Value {
        json!({"peft_type": "LORA", "r": 4, "lora_alpha": alpha, "target_modules": ["q_proj"]})
    }

    /// Found by the fuzz target adapter_config: an alpha of 2^64 - 1 was saved as i64::MAX.
    #[test]
    fn a_large_integral_alpha_saves_and_reads_back_unchanged() {
        let c = LoraConfig::from_json(&config_with_alpha(json!(u64::MAX))).unwrap();
        let back = LoraConfig::from_json(&c.to_json(None)).unwrap();
        assert_eq!(back.lora_alpha, c.lora_alpha);
        assert_eq!(c.to_json(None)["lora_alpha"].as_f64(), Some(u64::MAX as f64));
        let small = LoraConfig::from_json(&config_with_alpha(json!(16))).unwrap();
        assert_eq!(small.to_json(None)["lora_alpha"], json!(16), "an integral alpha is saved as an int, as PEFT does");
    }

    #[test]
    fn an_alpha_that_overflows_the_scale_or_is_no_number_is_refused() {
        let err = LoraConfig::from_json(&config_with_alpha(json!(-1e300))).unwrap_err();
        assert!(err.contains("lora_alpha -1e+300") && err.contains("f32"), "{err}");
        let err = LoraConfig::from_json(&config_with_alpha(json!("16"))).unwrap_err();
        assert!(err.contains("give a number"), "{err}");
        assert_eq!(LoraConfig::from_json(&config_with_alpha(Value::Null)).unwrap().lora_alpha, 8.0);
    }
}
