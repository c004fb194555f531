//! Writing safetensors weights as `transformers`' `save_pretrained` does: `model.safetensors`, or
//! shards `model-00001-of-0000N.safetensors` with `model.safetensors.index.json` above a size
//! limit. Bytes are deterministic, and every file is written atomically.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Metadata, TensorInfo as StInfo};
use serde_json::{json, Map, Value};

use crate::atomic::{sync_dir, Staged};
use crate::dtype::{byte_size, encode_f32, is_float, numel, Dtype};
use crate::error::{IoError, Result};
use crate::json::to_json_text;
use crate::read::{INDEX_NAME, WEIGHTS_NAME};

/// `transformers`' default `max_shard_size` ("5GB", decimal).
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 5_000_000_000;

/// The data of a tensor to save.
#[derive(Debug, Clone, Copy)]
pub enum TensorData<'a> {
    /// f32 values, converted to the tensor's dtype (F32, F16 or BF16, rounding to nearest even).
    F32(&'a [f32]),
    /// Bytes already in the tensor's dtype (little-endian, row-major), written as they are.
    Raw(&'a [u8]),
}

/// One tensor to save: name, stored dtype, shape and data.
#[derive(Debug, Clone)]
pub struct SaveTensor<'a> {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: TensorData<'a>,
}

impl<'a> SaveTensor<'a> {
    /// A tensor from f32 values, stored as `dtype` (F32, F16 or BF16).
    pub fn f32(name: impl Into<String>, dtype: Dtype, shape: &[usize], data: &'a [f32]) -> Self {
        SaveTensor { name: name.into(), dtype, shape: shape.to_vec(), data: TensorData::F32(data) }
    }

    /// A tensor from bytes already in `dtype`.
    pub fn raw(name: impl Into<String>, dtype: Dtype, shape: &[usize], data: &'a [u8]) -> Self {
        SaveTensor { name: name.into(), dtype, shape: shape.to_vec(), data: TensorData::Raw(data) }
    }
}

/// What [`save_safetensors`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedWeights {
    /// The weight files, in shard order.
    pub files: Vec<PathBuf>,
    /// The index, when the weights were sharded.
    pub index: Option<PathBuf>,
    /// Bytes of tensor data (headers excluded), the index's `metadata.total_size`.
    pub total_size: u64,
    /// Number of elements of all tensors, the index's `metadata.total_parameters`.
    pub total_parameters: u64,
}

/// A checked tensor with its stored size.
struct Planned<'t, 'a> {
    tensor: &'t SaveTensor<'a>,
    bytes: usize,
}

/// Saves tensors into the folder `dir` (created if missing) as `transformers` does:
///
/// - tensors are taken in sorted name order and split into shards of at most `max_shard_bytes`
///   bytes of data with `huggingface_hub`'s rule (a tensor larger than the limit gets a shard of
///   its own); one shard is written as `model.safetensors`, several as
///   `model-00001-of-0000N.safetensors` plus `model.safetensors.index.json`
///   (`{"metadata": {"total_parameters", "total_size"}, "weight_map": {tensor: file}}`,
///   `json.dumps(indent=2, sort_keys=True)` + newline);
/// - each file has the metadata `{"format": "pt"}` and its tensors laid out as the
///   `safetensors` library lays them out (by dtype alignment, then name), so equal input gives
///   equal bytes;
/// - every file is written under a temporary name in `dir`, fsynced and renamed; on an error no
///   new file is left. Weight files of an earlier save that the new one does not replace (other
///   shards, a stale index or `model.safetensors`) are removed afterwards, so that loaders cannot
///   mix old and new weights.
pub fn save_safetensors(
    dir: impl AsRef<Path>,
    tensors: &[SaveTensor<'_>],
    max_shard_bytes: u64,
) -> Result<SavedWeights> {
    save_impl(dir.as_ref(), tensors, max_shard_bytes, None)
}

/// [`save_safetensors`] with a simulated failure (an I/O error) once `fail_after_bytes` bytes of
/// weight files have been written — for crash-safety tests only.
#[doc(hidden)]
pub fn save_safetensors_failing_after(
    dir: impl AsRef<Path>,
    tensors: &[SaveTensor<'_>],
    max_shard_bytes: u64,
    fail_after_bytes: u64,
) -> Result<SavedWeights> {
    save_impl(dir.as_ref(), tensors, max_shard_bytes, Some(fail_after_bytes))
}

fn save_impl(
    dir: &Path,
    tensors: &[SaveTensor<'_>],
    max_shard_bytes: u64,
    fail_after: Option<u64>,
) -> Result<SavedWeights> {
    let planned = plan(tensors)?;
    let shards = split(&planned, max_shard_bytes);
    let n = shards.len();
    let names: Vec<String> = (0..n)
        .map(|i| if n == 1 { WEIGHTS_NAME.to_string() } else { format!("model-{:05}-of-{:05}.safetensors", i + 1, n) })
        .collect();
    let total_size: u64 = planned.iter().map(|p| p.bytes as u64).sum();
    let total_parameters: u64 = planned.iter().map(|p| numel(&p.tensor.shape).unwrap_or(0) as u64).sum();

    std::fs::create_dir_all(dir).map_err(|e| IoError::io(dir, e))?;

    // Stage every file first; nothing appears under a final name until all are on disk.
    let mut budget = fail_after;
    let mut staged = Vec::with_capacity(n + 1);
    for (shard, name) in shards.iter().zip(&names) {
        let (header, order) = header(shard)?;
        let path = dir.join(name);
        staged.push(Staged::write(&path, |w| {
            let mut w = FailAfter { inner: w, budget: &mut budget };
            write_shard(&mut w, &header, &order)
        })?);
    }
    let index = if n > 1 {
        let mut weight_map = Map::new();
        for (shard, name) in shards.iter().zip(&names) {
            for p in shard {
                weight_map.insert(p.tensor.name.clone(), Value::String(name.clone()));
            }
        }
        let value = json!({
            "metadata": { "total_parameters": total_parameters, "total_size": total_size },
            "weight_map": weight_map,
        });
        let text = to_json_text(&value);
        let path = dir.join(INDEX_NAME);
        staged.push(Staged::write(&path, |w| w.write_all(text.as_bytes()))?);
        Some(path)
    } else {
        None
    };

    commit_all(staged)?;
    sync_dir(dir)?;
    remove_stale(dir, &names, index.is_some())?;
    Ok(SavedWeights { files: names.iter().map(|f| dir.join(f)).collect(), index, total_size, total_parameters })
}

/// Checks every tensor (unique name, shape × dtype = data length, f32 data only for float
/// dtypes) and sorts them by name.
fn plan<'t, 'a>(tensors: &'t [SaveTensor<'a>]) -> Result<Vec<Planned<'t, 'a>>> {
    let mut seen = BTreeSet::new();
    let mut planned = Vec::with_capacity(tensors.len());
    for t in tensors {
        let invalid = |reason: String| IoError::InvalidTensor { tensor: t.name.clone(), reason };
        if !seen.insert(t.name.as_str()) {
            return Err(invalid("the name appears twice; tensor names must be unique".to_string()));
        }
        let count = numel(&t.shape).ok_or_else(|| invalid(format!("shape {:?} overflows", t.shape)))?;
        let bytes = byte_size(t.dtype, count)
            .ok_or_else(|| invalid(format!("{count} elements of {} do not fill whole bytes", t.dtype)))?;
        match t.data {
            TensorData::F32(data) => {
                if !is_float(t.dtype) {
                    return Err(invalid(format!(
                        "f32 data can be stored as F32, F16 or BF16, not {}; pass raw bytes for other dtypes",
                        t.dtype
                    )));
                }
                if data.len() != count {
                    return Err(invalid(format!(
                        "shape {:?} has {count} elements but {} f32 values were given",
                        t.shape,
                        data.len()
                    )));
                }
            }
            TensorData::Raw(data) => {
                if data.len() != bytes {
                    return Err(invalid(format!(
                        "shape {:?} of {} takes {bytes} bytes but {} were given",
                        t.shape,
                        t.dtype,
                        data.len()
                    )));
                }
            }
        }
        planned.push(Planned { tensor: t, bytes });
    }
    planned.sort_by(|a, b| a.tensor.name.cmp(&b.tensor.name));
    Ok(planned)
}

/// `huggingface_hub`'s `split_state_dict_into_shards_factory`: fill shards in order; a tensor
/// that would overflow the current shard starts a new one; a tensor larger than the limit is
/// placed alone in a shard of its own (appended before the shard being filled).
fn split<'p, 't, 'a>(planned: &'p [Planned<'t, 'a>], max_shard_bytes: u64) -> Vec<Vec<&'p Planned<'t, 'a>>> {
    let mut shards = Vec::new();
    let mut current = Vec::new();
    let mut current_size = 0u64;
    for p in planned {
        let size = p.bytes as u64;
        if size > max_shard_bytes {
            shards.push(vec![p]);
            continue;
        }
        if current_size + size > max_shard_bytes {
            shards.push(std::mem::take(&mut current));
            current_size = 0;
        }
        current.push(p);
        current_size += size;
    }
    if !current.is_empty() || shards.is_empty() {
        shards.push(current);
    }
    shards
}

/// The header bytes of a shard (8-byte length + JSON padded with spaces to a multiple of 8) and
/// its tensors in data order — the layout of the `safetensors` library: dtype alignment
/// descending, then name.
fn header<'p, 't, 'a>(shard: &[&'p Planned<'t, 'a>]) -> Result<(Vec<u8>, Vec<&'p Planned<'t, 'a>>)> {
    let mut order = shard.to_vec();
    order.sort_by(|a, b| b.tensor.dtype.cmp(&a.tensor.dtype).then(a.tensor.name.cmp(&b.tensor.name)));
    let mut offset = 0;
    let mut infos = Vec::with_capacity(order.len());
    for p in &order {
        let t = p.tensor;
        infos.push((
            t.name.clone(),
            StInfo { dtype: t.dtype, shape: t.shape.clone(), data_offsets: (offset, offset + p.bytes) },
        ));
        offset += p.bytes;
    }
    let first = order.first().map(|p| p.tensor.name.clone()).unwrap_or_default();
    let bad = |reason: String| IoError::InvalidTensor { tensor: first.clone(), reason };
    let format = HashMap::from([("format".to_string(), "pt".to_string())]);
    let metadata = Metadata::new(Some(format), infos).map_err(|e| bad(format!("safetensors header: {e}")))?;
    let mut json = serde_json::to_vec(&metadata).map_err(|e| bad(format!("safetensors header: {e}")))?;
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&json);
    Ok((bytes, order))
}

/// Writes a shard's header and data, converting f32 data in chunks.
fn write_shard(w: &mut dyn Write, header: &[u8], order: &[&Planned<'_, '_>]) -> std::io::Result<()> {
    w.write_all(header)?;
    let mut buf = Vec::new();
    for p in order {
        match p.tensor.data {
            TensorData::Raw(data) => w.write_all(data)?,
            TensorData::F32(data) => {
                for chunk in data.chunks(1 << 16) {
                    buf.clear();
                    encode_f32(p.tensor.dtype, chunk, &mut buf);
                    w.write_all(&buf)?;
                }
            }
        }
    }
    Ok(())
}

/// Renames every staged file into place. If one rename fails, the files already renamed are
/// removed again (best effort) and the rest are deleted with their temporary names.
fn commit_all(staged: Vec<Staged>) -> Result<()> {
    let mut done: Vec<PathBuf> = Vec::new();
    for s in staged {
        let target = s.target().to_path_buf();
        if let Err(e) = s.commit() {
            for path in &done {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
        done.push(target);
    }
    Ok(())
}

/// Removes weight files of an earlier save that this one did not overwrite: other
/// `model-XXXXX-of-XXXXX.safetensors` shards, `model.safetensors` when sharded, and the index
/// when not.
fn remove_stale(dir: &Path, written: &[String], sharded: bool) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| IoError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| IoError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale = if written.contains(&name) {
            false
        } else if name == WEIGHTS_NAME {
            sharded
        } else if name == INDEX_NAME {
            !sharded
        } else {
            is_shard_name(&name)
        };
        if stale && entry.path().is_file() {
            std::fs::remove_file(entry.path()).map_err(|e| IoError::io(entry.path(), e))?;
        }
    }
    Ok(())
}

/// Whether `name` is `model-DDDDD-of-DDDDD.safetensors`.
fn is_shard_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("model-").and_then(|r| r.strip_suffix(".safetensors")) else {
        return false;
    };
    let b = rest.as_bytes();
    b.len() == 14 && b[5..9] == *b"-of-" && b[..5].iter().chain(&b[9..]).all(u8::is_ascii_digit)
}

/// A writer that fails once its byte budget is spent (no budget: never fails).
struct FailAfter<'w, 'b> {
    inner: &'w mut dyn Write,
    budget: &'b mut Option<u64>,
}

impl Write for FailAfter<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let Some(left) = self.budget.as_mut() else {
            return self.inner.write(buf);
        };
        if *left == 0 {
            return Err(std::io::Error::other("simulated failure (crash-safety test)"));
        }
        let n = buf.len().min(*left as usize);
        let n = self.inner.write(&buf[..n])?;
        *left -= n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names() {
        assert!(is_shard_name("model-00001-of-00002.safetensors"));
        assert!(!is_shard_name("model-0001-of-00002.safetensors"));
        assert!(!is_shard_name("model.safetensors"));
        assert!(!is_shard_name("adapter-00001-of-00002.safetensors"));
    }
}
