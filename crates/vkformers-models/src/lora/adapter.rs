//! A LoRA adapter on the host: its config and tensors under PEFT's key names and layouts
//! (`base_model.model.<module>.lora_A.weight [r, in]`, `lora_B.weight [out, r]`, and whole
//! `base_model.model.<tensor>` for `modules_to_save`), read from and written to
//! `adapter_model.safetensors`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rand::{Rng, SeedableRng};

use crate::error::{ModelError, Result};
use crate::lora::config::{LoraConfig, Targets};
use crate::lora::modules::LinearModule;
use crate::moe::lora::ExpertParam;
use crate::weights::HostTensor;

/// File name of the adapter weights.
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";
/// File name of the adapter config.
pub const ADAPTER_CONFIG: &str = "adapter_config.json";

/// The key of a module's A or B matrix.
pub fn lora_key(module: &str, which: char) -> String {
    format!("base_model.model.{module}.lora_{which}.weight")
}

/// The key of a whole tensor saved through `modules_to_save`.
pub fn saved_key(tensor: &str) -> String {
    format!("base_model.model.{tensor}")
}

/// An adapter: config + tensors by PEFT key.
#[derive(Clone, Debug)]
pub struct Adapter {
    pub config: LoraConfig,
    pub tensors: BTreeMap<String, HostTensor>,
}

impl Adapter {
    /// Reads `adapter_config.json` and `adapter_model.safetensors` from `dir`.
    pub fn load(dir: &Path) -> Result<Adapter> {
        let config = LoraConfig::read(dir)?;
        let path = dir.join(ADAPTER_WEIGHTS);
        if !path.is_file() {
            let hint = if dir.join("adapter_model.bin").is_file() {
                " (it has adapter_model.bin: re-save it with safe_serialization=True)"
            } else {
                ""
            };
            return Err(ModelError::Weights(format!("{} not found{hint}", path.display())));
        }
        let file = vkformers_io::ModelWeights::open_file(&path).map_err(|e| ModelError::Weights(e.to_string()))?;
        let mut tensors = BTreeMap::new();
        for info in file.tensors() {
            let data = file.tensor_f32(&info.name).map_err(|e| ModelError::Weights(e.to_string()))?;
            let t = HostTensor { name: info.name.clone(), shape: info.shape.clone(), data };
            tensors.insert(info.name, t);
        }
        Ok(Adapter { config, tensors })
    }

    /// A fresh adapter as PEFT initialises one: per module, `A [r, in]` kaiming-uniform with
    /// a = sqrt(5) (as `nn.Linear`: U(−1/sqrt(in), 1/sqrt(in))) and `B [out, r]` zero, so the
    /// model starts equal to the base. Deterministic in `seed`.
    pub fn init(config: LoraConfig, modules: &[LinearModule], seed: u64) -> Adapter {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut tensors = BTreeMap::new();
        let r = config.r;
        for m in modules {
            let bound = 1.0 / (m.in_features as f32).sqrt();
            let a: Vec<f32> = (0..r * m.in_features).map(|_| rng.random_range(-bound..bound)).collect();
            let (ka, kb) = (lora_key(&m.name, 'A'), lora_key(&m.name, 'B'));
            tensors.insert(ka.clone(), HostTensor { name: ka, shape: vec![r, m.in_features], data: a });
            let b = vec![0.0; m.out_features * r];
            tensors.insert(kb.clone(), HostTensor { name: kb, shape: vec![m.out_features, r], data: b });
        }
        Adapter { config, tensors }
    }

    /// PEFT's init of packed expert parameters' pairs (`ParamWrapper`: `A` an
    /// `nn.Linear(in, E·r)` weight, kaiming-uniform, `B [out, E·r]` zero).
    pub fn init_experts(&mut self, params: &[ExpertParam], seed: u64) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x0065_7870_6572_7473);
        let r = self.config.r;
        for p in params {
            let er = p.experts * r;
            let bound = 1.0 / (p.in_features as f32).sqrt();
            let a: Vec<f32> = (0..er * p.in_features).map(|_| rng.random_range(-bound..bound)).collect();
            let (ka, kb) = (lora_key(&p.module, 'A'), lora_key(&p.module, 'B'));
            self.tensors.insert(ka.clone(), HostTensor { name: ka, shape: vec![er, p.in_features], data: a });
            let b = vec![0.0; p.out_features * er];
            self.tensors.insert(kb.clone(), HostTensor { name: kb, shape: vec![p.out_features, er], data: b });
        }
    }

    /// A packed expert parameter's `(A [E·r, in], B [out, E·r])`, checked against its shape.
    pub fn expert_pair(&self, p: &ExpertParam) -> Result<(&HostTensor, &HostTensor)> {
        let er = p.experts * self.config.r;
        Ok((
            self.get(lora_key(&p.module, 'A'), [er, p.in_features])?,
            self.get(lora_key(&p.module, 'B'), [p.out_features, er])?,
        ))
    }

    fn get(&self, k: String, shape: [usize; 2]) -> Result<&HostTensor> {
        let t = self.tensors.get(&k).ok_or_else(|| {
            ModelError::Weights(format!("adapter has no `{k}` (is it for another model or target_parameters?)"))
        })?;
        if t.shape != shape {
            return Err(ModelError::Weights(format!("adapter `{k}` is {:?}, the model needs {shape:?}", t.shape)));
        }
        Ok(t)
    }

    /// A module's `(A, B)`, checked against its shape.
    pub fn pair(&self, m: &LinearModule) -> Result<(&HostTensor, &HostTensor)> {
        let get = |k: String, shape: [usize; 2]| -> Result<&HostTensor> {
            let t = self.tensors.get(&k).ok_or_else(|| {
                ModelError::Weights(format!("adapter has no `{k}` (is it for another model or target_modules?)"))
            })?;
            if t.shape != shape {
                return Err(ModelError::Weights(format!("adapter `{k}` is {:?}, the model needs {shape:?}", t.shape)));
            }
            Ok(t)
        };
        let r = self.config.r;
        Ok((get(lora_key(&m.name, 'A'), [r, m.in_features])?, get(lora_key(&m.name, 'B'), [m.out_features, r])?))
    }

    /// Writes `adapter_config.json` and `adapter_model.safetensors` (f32) into `dir`, each
    /// atomically. `all-linear` is saved as the resolved module list, as PEFT saves it.
    pub fn save(&self, dir: &Path, modules: &[LinearModule]) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| ModelError::Weights(format!("{}: {e}", dir.display())))?;
        let resolved: Vec<String> = modules.iter().map(|m| m.name.clone()).collect();
        let resolved = matches!(self.config.target_modules, Targets::AllLinear).then_some(resolved.as_slice());
        write_safetensors(&dir.join(ADAPTER_WEIGHTS), self.tensors.values())?;
        vkformers_io::write_json_atomic(dir.join(ADAPTER_CONFIG), &self.config.to_json(resolved))
            .map_err(|e| ModelError::Weights(e.to_string()))
    }
}

/// Writes f32 tensors to one safetensors file (metadata `{"format": "pt"}`), atomically.
pub fn write_safetensors<'t>(path: &Path, tensors: impl Iterator<Item = &'t HostTensor>) -> Result<()> {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .map(|t| (t.name.clone(), t.shape.clone(), t.data.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views = bytes
        .iter()
        .map(|(n, s, b)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).map(|v| (n.clone(), v))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| ModelError::Weights(format!("{}: {e}", path.display())))?;
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    let data = safetensors::tensor::serialize(views, Some(meta))
        .map_err(|e| ModelError::Weights(format!("{}: {e}", path.display())))?;
    vkformers_io::write_atomic(path, |w| w.write_all(&data)).map_err(|e| ModelError::Weights(e.to_string()))
}
