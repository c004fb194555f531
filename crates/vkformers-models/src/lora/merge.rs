//! Folding an adapter into the base weights on the host (`vkformers merge-lora`), as PEFT's
//! `merge_and_unload`: `W' = W + scale · B A` for a weight stored `[out, in]`, and
//! `W' = W + scale · (B A)ᵀ` for a Conv1D weight stored `[in, out]`; `modules_to_save`
//! tensors replace the base's. No device is needed.

use std::collections::BTreeSet;
use std::path::Path;

use vkformers_io::{ModelWeights, SaveTensor};

use crate::archs::spec_from_config;
use crate::error::{ModelError, Result};
use crate::lora::adapter::{lora_key, saved_key, Adapter};

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
    if !adapter.config.target_parameters.is_empty() {
        return Err(ModelError::Unsupported(format!(
            "merging an adapter with target_parameters ({:?}): the packed experts' deltas are not folded \
             into the per-expert stored tensors yet; run it unmerged (--adapter)",
            adapter.config.target_parameters
        )));
    }
    let config = vkformers_io::read_json(model_dir.join("config.json")).map_err(io)?;
    let spec = spec_from_config(&config)?;
    let file = ModelWeights::open(model_dir).map_err(io)?;
    let r = adapter.config.r;
    let scale = adapter.config.scale() as f64;
    let mut used = BTreeSet::new();
    let mut out = Vec::new();
    for info in file.tensors() {
        let mut data = file.tensor_f32(&info.name).map_err(io)?;
        if let Some(t) = adapter.tensors.get(&saved_key(&info.name)) {
            data.clone_from(&t.data);
            used.insert(t.name.clone());
        }
        if let Some(module) = info.name.strip_suffix(".weight") {
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
