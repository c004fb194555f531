//! Stored Hugging Face tensors <-> the graph's parameters, through the spec's weight map
//! (transposes of Conv1D weights, splits of fused tensors; everything else by name).

use std::collections::HashMap;

use crate::error::{ModelError, Result};
use crate::spec::{MapEntry, ModelSpec};

/// A host tensor: name, shape, row-major f32 data.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

fn transpose2(shape: &[usize], data: &[f32]) -> (Vec<usize>, Vec<f32>) {
    let (r, c) = (shape[0], shape[1]);
    let mut out = vec![0.0; data.len()];
    for i in 0..r {
        for j in 0..c {
            out[j * r + i] = data[i * c + j];
        }
    }
    (vec![c, r], out)
}

fn entry<'s>(spec: &'s ModelSpec, hf: &str) -> Option<&'s MapEntry> {
    spec.weight_map.iter().find(|e| e.hf == hf)
}

/// The internal parameters made from one stored tensor: the names and shapes of
/// [`internal_shapes`] (which also checks the stored shape), filled with the data transposed
/// and split into the parts' rows.
pub fn to_internal(spec: &ModelSpec, t: HostTensor) -> Result<Vec<HostTensor>> {
    let parts = internal_shapes(spec, &t.name, &t.shape)?;
    let Some(e) = entry(spec, &t.name) else { return Ok(vec![t]) };
    let data = if e.transpose { transpose2(&t.shape, &t.data).1 } else { t.data };
    if parts.len() == 1 {
        let (name, shape) = parts.into_iter().next().expect("one part");
        return Ok(vec![HostTensor { name, shape, data }]);
    }
    let groups = e.groups.max(1);
    if let Some((name, _)) = parts.iter().find(|(_, s)| s[0] % groups != 0) {
        return Err(ModelError::Weights(format!("`{}`: part `{name}` does not split into {groups} groups", e.hf)));
    }
    let mut out: Vec<HostTensor> = parts
        .into_iter()
        .map(|(name, shape)| {
            let n = shape.iter().product();
            HostTensor { name, shape, data: Vec::with_capacity(n) }
        })
        .collect();
    // Each group holds `rows / groups` rows of every part in order (GPT-NeoX's per-head QKV).
    let mut at = 0;
    for _ in 0..groups {
        for o in &mut out {
            let n = o.shape.iter().product::<usize>() / groups;
            o.data.extend_from_slice(&data[at..at + n]);
            at += n;
        }
    }
    Ok(out)
}

/// The internal parameters (names and shapes) one stored tensor of shape `shape` becomes, from
/// its header alone: [`to_internal`] without the data, so a folder is checked against its
/// config before anything is read or allocated.
pub fn internal_shapes(spec: &ModelSpec, hf: &str, shape: &[usize]) -> Result<Vec<(String, Vec<usize>)>> {
    let Some(e) = entry(spec, hf) else { return Ok(vec![(hf.to_string(), shape.to_vec())]) };
    let shape = if e.transpose {
        if shape.len() != 2 {
            return Err(ModelError::Weights(format!("`{hf}` should be 2-D, has shape {shape:?}")));
        }
        vec![shape[1], shape[0]]
    } else {
        shape.to_vec()
    };
    if e.parts.len() == 1 {
        return Ok(vec![(e.parts[0].0.clone(), shape)]);
    }
    let total: usize = e.parts.iter().map(|p| p.1).sum();
    if shape.first() != Some(&total) {
        let internal: Vec<String> = e.parts.iter().map(|(n, r)| format!("`{n}` ({r} rows)")).collect();
        return Err(ModelError::Weights(format!(
            "`{hf}` has shape {shape:?}; the config gives {total} rows for {}",
            internal.join(" + ")
        )));
    }
    Ok(e.parts.iter().map(|(n, rows)| (n.clone(), [vec![*rows], shape[1..].to_vec()].concat())).collect())
}

/// The join an internal parameter or stored tensor belongs to, with the part's index.
pub fn join_of<'s>(spec: &'s ModelSpec, hf: &str) -> Option<(&'s crate::spec::JoinEntry, usize)> {
    spec.joins.iter().find_map(|j| j.parts.iter().position(|p| p == hf).map(|i| (j, i)))
}

/// The stored tensors rebuilt from internal parameters (by internal name), in the order of
/// `hf_names`.
pub fn to_hf(spec: &ModelSpec, internal: &HashMap<String, HostTensor>, hf_names: &[String]) -> Result<Vec<HostTensor>> {
    let get = |n: &str| internal.get(n).ok_or_else(|| ModelError::Weights(format!("no parameter `{n}`")));
    hf_names
        .iter()
        .map(|hf| {
            if let Some((j, i)) = join_of(spec, hf) {
                let t = get(&j.internal)?;
                let rows = t.shape[0] / j.parts.len();
                let row: usize = t.shape[1..].iter().product();
                let mut shape = t.shape.clone();
                shape[0] = rows;
                if rows == 1 {
                    shape.remove(0);
                }
                let data = t.data[i * rows * row..(i + 1) * rows * row].to_vec();
                return Ok(HostTensor { name: hf.clone(), shape, data });
            }
            let Some(e) = entry(spec, hf) else {
                let t = get(hf)?;
                return Ok(HostTensor { name: hf.clone(), shape: t.shape.clone(), data: t.data.clone() });
            };
            let parts: Vec<&HostTensor> = e.parts.iter().map(|(n, _)| get(n)).collect::<Result<_>>()?;
            let mut shape = parts[0].shape.clone();
            shape[0] = parts.iter().map(|p| p.shape[0]).sum();
            let groups = e.groups.max(1);
            let mut data = Vec::with_capacity(parts.iter().map(|p| p.data.len()).sum());
            for gi in 0..groups {
                for p in &parts {
                    let n = p.data.len() / groups;
                    data.extend_from_slice(&p.data[gi * n..(gi + 1) * n]);
                }
            }
            let (shape, data) = if e.transpose { transpose2(&shape, &data) } else { (shape, data) };
            Ok(HostTensor { name: hf.clone(), shape, data })
        })
        .collect()
}
