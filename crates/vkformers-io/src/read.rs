//! Reading safetensors weights, memory-mapped: one `model.safetensors`, or the shards listed by
//! `model.safetensors.index.json`, behind one name → tensor lookup.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::SafeTensors;

use crate::dtype::{decode_f32, Dtype};
use crate::error::{IoError, Result};
use crate::json::read_json;
use crate::suggest::close_names;

/// File name of unsharded weights.
pub const WEIGHTS_NAME: &str = "model.safetensors";
/// File name of the index of sharded weights.
pub const INDEX_NAME: &str = "model.safetensors.index.json";

/// Name, element type and shape of one stored tensor, and the file holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub file: PathBuf,
}

/// A tensor's stored bytes (little-endian, row-major), borrowed from the memory map.
#[derive(Debug, Clone, Copy)]
pub struct RawTensor<'a> {
    pub dtype: Dtype,
    pub shape: &'a [usize],
    pub data: &'a [u8],
}

/// One memory-mapped safetensors file.
struct Shard {
    path: PathBuf,
    mmap: Mmap,
}

/// Where a tensor's bytes are: which shard, and the byte range within the file.
struct Entry {
    shard: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    range: std::ops::Range<usize>,
}

/// The safetensors weights of a model, memory-mapped: tensors are read on demand, and only the
/// pages of the tensors read are loaded from disk.
pub struct ModelWeights {
    location: PathBuf,
    shards: Vec<Shard>,
    tensors: BTreeMap<String, Entry>,
}

impl std::fmt::Debug for ModelWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelWeights")
            .field("location", &self.location)
            .field("files", &self.shards.iter().map(|s| &s.path).collect::<Vec<_>>())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl ModelWeights {
    /// Opens the weights of the model folder `dir`: `model.safetensors` if present (as
    /// `transformers` prefers it), else `model.safetensors.index.json` and every shard it names.
    /// Each file's header is checked against its size, so truncated files are reported here.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        if !dir.exists() {
            return Err(IoError::FolderNotFound { path: dir.to_path_buf() });
        }
        if !dir.is_dir() {
            return Err(IoError::NotAFolder { path: dir.to_path_buf() });
        }
        let single = dir.join(WEIGHTS_NAME);
        if single.is_file() {
            return Self::open_file(single);
        }
        let index = dir.join(INDEX_NAME);
        if index.is_file() {
            return Self::open_index(index);
        }
        Err(IoError::NoWeights { dir: dir.to_path_buf(), hint: no_weights_hint(dir) })
    }

    /// Opens one safetensors file.
    pub fn open_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let shard = map_file(path, "a safetensors file")?;
        let mut tensors = BTreeMap::new();
        for (name, entry) in parse_shard(&shard, 0)? {
            tensors.insert(name, entry);
        }
        Ok(ModelWeights { location: path.to_path_buf(), shards: vec![shard], tensors })
    }

    /// Opens sharded weights through their index (`model.safetensors.index.json`): every shard
    /// named in `weight_map` must exist (in the index's folder) and hold the tensors mapped to it.
    pub fn open_index(index: impl AsRef<Path>) -> Result<Self> {
        let index = index.as_ref();
        let weight_map = read_weight_map(index)?;
        let dir = crate::atomic::parent_of(index);

        // Files in order of first appearance in the (sorted) weight map.
        let mut shard_of_file: HashMap<&str, usize> = HashMap::new();
        let mut shards = Vec::new();
        let mut in_shard: Vec<HashMap<String, Entry>> = Vec::new();
        let mut tensors = BTreeMap::new();
        for (tensor, file) in &weight_map {
            let k = match shard_of_file.get(file.as_str()) {
                Some(&k) => k,
                None => {
                    let path = dir.join(file);
                    if !path.is_file() {
                        return Err(IoError::MissingShard {
                            index: index.to_path_buf(),
                            shard: file.clone(),
                            tensor: tensor.clone(),
                        });
                    }
                    let shard = map_file(&path, "a shard named by the index")?;
                    let k = shards.len();
                    in_shard.push(parse_shard(&shard, k)?);
                    shards.push(shard);
                    shard_of_file.insert(file, k);
                    k
                }
            };
            let entry = in_shard[k].remove(tensor).ok_or_else(|| IoError::IndexMismatch {
                index: index.to_path_buf(),
                tensor: tensor.clone(),
                shard: shards[k].path.clone(),
            })?;
            tensors.insert(tensor.clone(), entry);
        }
        Ok(ModelWeights { location: index.to_path_buf(), shards, tensors })
    }

    /// The files the weights come from.
    pub fn files(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Whether a tensor of this name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Every tensor's name, dtype, shape and file, sorted by name.
    pub fn tensors(&self) -> Vec<TensorInfo> {
        self.tensors.iter().map(|(name, e)| self.info_of(name, e)).collect()
    }

    /// One tensor's name, dtype, shape and file.
    pub fn info(&self, name: &str) -> Result<TensorInfo> {
        let e = self.entry(name)?;
        Ok(self.info_of(name, e))
    }

    /// A tensor's stored bytes and dtype, without conversion or copy.
    pub fn tensor_bytes(&self, name: &str) -> Result<RawTensor<'_>> {
        let e = self.entry(name)?;
        Ok(RawTensor { dtype: e.dtype, shape: &e.shape, data: &self.shards[e.shard].mmap[e.range.clone()] })
    }

    /// A tensor converted to f32 (exactly) from F32, F16 or BF16.
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let e = self.entry(name)?;
        let data = &self.shards[e.shard].mmap[e.range.clone()];
        decode_f32(e.dtype, data).ok_or_else(|| IoError::UnsupportedDtype {
            tensor: name.to_string(),
            dtype: e.dtype.to_string(),
            path: self.shards[e.shard].path.clone(),
        })
    }

    fn entry(&self, name: &str) -> Result<&Entry> {
        self.tensors.get(name).ok_or_else(|| IoError::TensorNotFound {
            name: name.to_string(),
            location: format!("`{}`", self.location.display()),
            suggestions: close_names(name, self.names()),
        })
    }

    fn info_of(&self, name: &str, e: &Entry) -> TensorInfo {
        TensorInfo {
            name: name.to_string(),
            dtype: e.dtype,
            shape: e.shape.clone(),
            file: self.shards[e.shard].path.clone(),
        }
    }
}

/// Memory-maps a file, with typed errors for a missing or empty one.
fn map_file(path: &Path, expected: &str) -> Result<Shard> {
    let file = File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            IoError::FileNotFound { path: path.to_path_buf(), expected: expected.to_string() }
        }
        _ => IoError::io(path, e),
    })?;
    let len = file.metadata().map_err(|e| IoError::io(path, e))?.len();
    if len < 8 {
        return Err(IoError::CorruptSafetensors {
            path: path.to_path_buf(),
            reason: format!("{len} bytes, shorter than the 8-byte header length"),
        });
    }
    // SAFETY: the map is read-only. Like every memory-mapped reader (safetensors' own
    // `safe_open` included) this relies on the file not being truncated or rewritten in place
    // while mapped; vkformers' own writers never do that: they write a new file and rename it.
    let mmap = unsafe { Mmap::map(&file) }.map_err(|e| IoError::io(path, e))?;
    Ok(Shard { path: path.to_path_buf(), mmap })
}

/// Parses and checks a shard's header; returns its tensors with absolute byte ranges.
fn parse_shard(shard: &Shard, k: usize) -> Result<HashMap<String, Entry>> {
    let (header_len, metadata) = SafeTensors::read_metadata(&shard.mmap)
        .map_err(|e| IoError::CorruptSafetensors { path: shard.path.clone(), reason: describe(&e) })?;
    let start = 8 + header_len;
    Ok(metadata
        .tensors()
        .into_iter()
        .map(|(name, info)| {
            let (a, b) = info.data_offsets;
            let entry = Entry { shard: k, dtype: info.dtype, shape: info.shape.clone(), range: start + a..start + b };
            (name, entry)
        })
        .collect())
}

/// A reader's view of why a safetensors header was rejected.
fn describe(e: &safetensors::SafeTensorError) -> String {
    use safetensors::SafeTensorError as E;
    match e {
        E::MetadataIncompleteBuffer => "the file's size does not match its header: data is missing".to_string(),
        E::InvalidHeaderLength => "the header is longer than the file".to_string(),
        E::HeaderTooLarge => "the header length is implausibly large".to_string(),
        E::HeaderTooSmall => "the file is too short to hold a header".to_string(),
        E::InvalidHeader(_) => "the header is not UTF-8".to_string(),
        E::InvalidHeaderDeserialization(err) => format!("the header is not valid JSON: {err}"),
        other => format!("bad header: {other}"),
    }
}

/// Reads `weight_map` of an index: tensor name → shard file name, sorted by tensor name.
fn read_weight_map(index: &Path) -> Result<BTreeMap<String, String>> {
    let value = read_json(index)?;
    let bad = |reason: &str| IoError::BadIndex { index: index.to_path_buf(), reason: reason.to_string() };
    let map = value.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| bad("no `weight_map` object"))?;
    let mut out = BTreeMap::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| bad(&format!("`weight_map.{tensor}` is not a file name")))?;
        if file.contains('/') || file.contains('\\') || file == ".." {
            return Err(bad(&format!("`weight_map.{tensor}` = `{file}` is not a plain file name")));
        }
        out.insert(tensor.clone(), file.to_string());
    }
    Ok(out)
}

/// What else is in a folder with no safetensors weights, to say what to do.
fn no_weights_hint(dir: &Path) -> String {
    let has = |name: &str| dir.join(name).exists();
    if has("pytorch_model.bin") || has("pytorch_model.bin.index.json") {
        "; only PyTorch `.bin` weights are there: convert them to safetensors (e.g. load and \
         `save_pretrained` with transformers)"
            .to_string()
    } else if has("adapter_model.safetensors") {
        "; this looks like a PEFT adapter folder (adapter_model.safetensors): pass the base model's folder".to_string()
    } else {
        String::new()
    }
}
