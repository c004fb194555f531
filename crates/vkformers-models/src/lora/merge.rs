//! Folding an adapter into the base weights on the host (`vkformers merge-lora`), as PEFT's
//! `merge_and_unload`: `W' = W + scale · B A` for a weight stored `[out, in]`, and
//! `W' = W + scale · (B A)ᵀ` for a Conv1D weight stored `[in, out]`; packed expert parameters
//! (`target_parameters`) get `scale · B_e A_e` per expert, in the packed or per-expert stored
//! tensors; `modules_to_save` tensors replace the base's. No device is needed.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use vkformers_io::{ModelWeights, SaveTensor};

use crate::archs::spec_from_config;
use crate::error::{ModelError, Result};
use crate::lora::adapter::{lora_key, saved_key, Adapter};
use crate::moe::lora::{expert_delta, expert_params_of_spec};

fn io(e: vkformers_io::IoError) -> ModelError {
    ModelError::Weights(e.to_string())
}

/// `w += scale · B A` (or its transpose for `[in, out]` storage), summed in f64 and rounded once.
/// `b [out, r]`, `a [r, in]`.
fn add_delta(w: &mut [f32], b: &[f32], a: &[f32], (out, r, inp): (usize, usize, usize), scale: f64, transposed: bool) {
    for o in 0..out {
        for i in 0..inp {
            let d: f64 = (0..r).map(|k| f64::from(b[o * r + k]) * f64::from(a[k * inp + i])).sum();
            let at = if transposed { i * out + o } else { o * inp + i };
            w[at] = (f64::from(w[at]) + scale * d) as f32;
        }
    }
}

/// The stored tensors of `model_dir` with `adapter` merged in, by stored name and dtype.
pub fn merged_tensors(model_dir: &Path, adapter: &Adapter) -> Result<Vec<(vkformers_io::TensorInfo, Vec<f32>)>> {
    let config = vkformers_io::read_json(model_dir.join("config.json")).map_err(io)?;
    let spec = spec_from_config(&config)?;
    let file = ModelWeights::open(model_dir).map_err(io)?;
    let stored: BTreeSet<String> = file.tensors().into_iter().map(|t| t.name).collect();
    let (mut expert_deltas, expert_keys) = expert_deltas(&spec, adapter, &stored)?;
    let r = adapter.config.r;
    let scale = adapter.config.scale() as f64;
    let mut used: BTreeSet<String> = expert_keys.into_iter().collect();
    let mut out = Vec::new();
    for info in file.tensors() {
        let mut data = file.tensor_f32(&info.name).map_err(io)?;
        // A packed stack stored as `<module>.weight` (JetMoE's `input_linear.weight`) has its
        // expert delta; its module's LoRA pair is that of the experts, not a Linear's.
        let expert = expert_deltas.remove(&info.name);
        let is_expert = expert.is_some();
        if let Some(d) = expert {
            if d.len() != data.len() {
                return Err(ModelError::Weights(format!(
                    "`{}`: {} values, its expert delta {}",
                    info.name,
                    data.len(),
                    d.len()
                )));
            }
            data.iter_mut().zip(d).for_each(|(w, d)| *w = (f64::from(*w) + d) as f32);
        }
        if let Some(t) = adapter.tensors.get(&saved_key(&info.name)) {
            data.clone_from(&t.data);
            used.insert(t.name.clone());
        }
        if let Some(module) = info.name.strip_suffix(".weight").filter(|_| !is_expert) {
            let module = spec.module_path(module);
            let (ka, kb) = (lora_key(&module, 'A'), lora_key(&module, 'B'));
            if let (Some(a), Some(b)) = (adapter.tensors.get(&ka), adapter.tensors.get(&kb)) {
                let transposed = spec.weight_map.iter().any(|e| e.hf == info.name && e.transpose);
                let (out_f, in_f) = (b.shape[0], a.shape[1]);
                let want = if transposed { [in_f, out_f] } else { [out_f, in_f] };
                if info.shape != want || a.shape[0] != r || b.shape[1] != r {
                    return Err(ModelError::Weights(format!(
                        "`{}` is {:?}; the adapter's A {:?} and B {:?} need {want:?}",
                        info.name, info.shape, a.shape, b.shape
                    )));
                }
                add_delta(&mut data, &b.data, &a.data, (out_f, r, in_f), scale, transposed);
                used.extend([ka, kb]);
            }
        }
        out.push((info, data));
    }
    if let Some(name) = expert_deltas.keys().next() {
        return Err(ModelError::Weights(format!("expert tensor `{name}` not found in {}", model_dir.display())));
    }
    if let Some(unused) = adapter.tensors.keys().find(|k| !used.contains(*k)) {
        return Err(ModelError::Weights(format!(
            "adapter tensor `{unused}` has no matching weight in {} (is the adapter for another model?)",
            model_dir.display()
        )));
    }
    Ok(out)
}

/// Writes the merged model folder `out_dir`: weights in their stored dtypes, `config.json`,
/// tokenizer and generation files. Every file is written atomically.
pub fn merge_to_folder(model_dir: &Path, adapter_dir: &Path, out_dir: &Path) -> Result<usize> {
    let adapter = Adapter::load(adapter_dir)?;
    let tensors = merged_tensors(model_dir, &adapter)?;
    let save: Vec<SaveTensor<'_>> = tensors
        .iter()
        .map(|(info, data)| {
            let dtype = if vkformers_io::is_float(info.dtype) { info.dtype } else { vkformers_io::Dtype::F32 };
            SaveTensor::f32(info.name.clone(), dtype, &info.shape, data)
        })
        .collect();
    std::fs::create_dir_all(out_dir).map_err(|e| ModelError::Weights(format!("{}: {e}", out_dir.display())))?;
    vkformers_io::save_safetensors(out_dir, &save, vkformers_io::DEFAULT_MAX_SHARD_BYTES).map_err(io)?;
    let config = vkformers_io::read_json(model_dir.join("config.json")).map_err(io)?;
    vkformers_io::write_json_atomic(out_dir.join("config.json"), &config).map_err(io)?;
    vkformers_io::copy_tokenizer_files(model_dir, out_dir).map_err(io)?;
    Ok(adapter.tensors.len())
}

/// Deltas to add to stored tensors, by stored name.
type Deltas = HashMap<String, Vec<f64>>;

/// The deltas of the packed expert parameters an adapter targets, by stored tensor name (the
/// packed tensor itself, or each per-expert tensor of its join: the stack's rows in part order),
/// and the adapter keys they use.
fn expert_deltas(
    spec: &crate::spec::ModelSpec,
    adapter: &Adapter,
    stored: &BTreeSet<String>,
) -> Result<(Deltas, Vec<String>)> {
    let (r, scale) = (adapter.config.r, f64::from(adapter.config.scale()));
    let mut out = HashMap::new();
    let mut keys = Vec::new();
    for p in expert_params_of_spec(spec, &adapter.config.target_parameters)? {
        let (a, b) = adapter.expert_pair(&p)?;
        let delta = expert_delta(&p, &a.data, &b.data, r, scale);
        keys.extend([lora_key(&p.module, 'A'), lora_key(&p.module, 'B')]);
        match spec.joins.iter().find(|j| j.internal == p.name && !stored.contains(&p.name)) {
            // Per-expert stored tensors stacked in order: equal row blocks.
            Some(j) => {
                let n = delta.len() / j.parts.len();
                for (k, part) in j.parts.iter().enumerate() {
                    out.insert(part.clone(), delta[k * n..(k + 1) * n].to_vec());
                }
            }
            None => {
                out.insert(p.name.clone(), delta);
            }
        }
    }
    Ok((out, keys))
}
