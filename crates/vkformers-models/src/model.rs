//! A Hugging Face model folder on the device: load (`config.json` + safetensors, any of
//! f32/f16/bf16, sharded or not) into graph parameters, read parameters or gradients back under
//! their Hugging Face names, and save a folder `transformers` loads.

use std::collections::HashMap;
use std::path::Path;

use vkformers_io::{ModelWeights, SaveTensor, TensorData};
use vkformers_tensor::{DType, Graph, Tensor};

use crate::archs::spec_from_config;
use crate::decoder::Weights;
use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;
use crate::weights::{internal_shapes, join_of, to_hf, to_internal, HostTensor};

/// A loaded model: its spec, its parameters by internal name, and the stored names.
pub struct Model {
    pub spec: ModelSpec,
    pub weights: Weights,
    /// Parameters in a fixed order (sorted internal names), for optimizers.
    pub params: Vec<(String, Tensor)>,
    /// Stored tensors that are no parameters (BART's `final_logits_bias`): read, saved, never
    /// trained.
    pub buffers: Vec<(String, Tensor)>,
    /// Names of the stored tensors, in file order (what `save` writes).
    pub hf_names: Vec<String>,
    pub config: serde_json::Value,
}

fn io_err(e: vkformers_io::IoError) -> ModelError {
    ModelError::Weights(e.to_string())
}

impl Model {
    /// Loads the model folder `dir` as parameters of `g`.
    pub fn load(g: &Graph<'_>, dir: &Path) -> Result<Model> {
        Self::load_with_trainable(g, dir, &|_| true)
    }

    /// Loads `dir` with only the tensors whose internal name `trainable` accepts as parameters;
    /// the others are constants (no gradient, no optimizer state): LoRA's frozen base.
    pub fn load_with_trainable(g: &Graph<'_>, dir: &Path, trainable: &dyn Fn(&str) -> bool) -> Result<Model> {
        Self::load_typed(g, dir, trainable, DType::F32)
    }

    /// Loads `dir` for inference: every tensor a constant, the projection weights (those only
    /// `linear` reads) and a decoder's token table kept in `dtype` on the device (f32 for the
    /// rest: position tables, norms, biases), as `from_pretrained(dtype=...)` keeps them.
    pub fn load_for_inference(g: &Graph<'_>, dir: &Path, dtype: DType) -> Result<Model> {
        Self::load_typed(g, dir, &|_| false, dtype)
    }

    /// [`Model::load_with_trainable`] with the frozen projection weights kept in `dtype`
    /// (LoRA on a 16-bit base).
    pub fn load_typed(g: &Graph<'_>, dir: &Path, trainable: &dyn Fn(&str) -> bool, dtype: DType) -> Result<Model> {
        let config = vkformers_io::read_json(dir.join("config.json")).map_err(|e| ModelError::Config(e.to_string()))?;
        Self::load_with_config(g, dir, config, trainable, dtype, None)
    }

    /// Loads the folder `dir` as the model `config` describes, which names another task head
    /// than the folder's (`AutoModelForSequenceClassification.from_pretrained` on a masked-LM
    /// checkpoint): the shared tensors from the folder; the head's parameters the folder lacks
    /// drawn as transformers initialises them (normal(0, `initializer_range`) weights, zero
    /// biases) from `seed`; the stored tensors of the old head left out. Returns the model and
    /// the names of the parameters it drew and of the tensors it left out. Only the tensors
    /// `trainable` accepts are parameters (LoRA's frozen base with a new head: `|_| true` for
    /// full training).
    pub fn load_with_new_head(
        g: &Graph<'_>,
        dir: &Path,
        config: serde_json::Value,
        seed: u64,
        trainable: &dyn Fn(&str) -> bool,
    ) -> Result<(Model, Vec<String>, Vec<String>)> {
        let mut drawn = Vec::new();
        let mut left_out = Vec::new();
        let new_head = NewHead { seed, drawn: &mut drawn, left_out: &mut left_out };
        let model = Self::load_with_config(g, dir, config, trainable, DType::F32, Some(new_head))?;
        Ok((model, drawn, left_out))
    }

    fn load_with_config(
        g: &Graph<'_>,
        dir: &Path,
        config: serde_json::Value,
        trainable: &dyn Fn(&str) -> bool,
        dtype: DType,
        mut new_head: Option<NewHead<'_>>,
    ) -> Result<Model> {
        let spec = spec_from_config(&config)?;
        let narrow = if dtype == DType::F32 { Default::default() } else { linear_weight_names(&spec) };
        let packer = std::cell::OnceCell::new();
        let make = |name: &str, data: &[f32], shape: &[usize]| {
            // q/k/v and gate/up: views of one packed weight per layer (crate::packed).
            if let Some(t) = packer.get().and_then(|p: &crate::packed::Packer| p.place(g, name, data, shape)) {
                return t;
            }
            if trainable(name) {
                g.parameter(data, shape)
            } else if narrow.contains(name) {
                // Bf16/f16 storage for a weight only products read (f32 math inside).
                g.constant_bits(&to_bits(data, dtype), shape, dtype)
            } else {
                g.weight_constant(data, shape)
            }
        };
        let file = ModelWeights::open(dir).map_err(io_err)?;
        let mut spec = spec;
        crate::moe::match_layout(&mut spec, file.names());
        crate::encoder::match_pooler(&mut spec, file.names());
        crate::encoder::match_bare_decoder(&mut spec, &config, file.names())?;
        let (found, fresh) = match new_head.as_mut() {
            Some(h) => {
                let (found, fresh, unexpected) = crate::encoder::check_new_head(&spec, &config, &file, dir)?;
                h.left_out.extend(unexpected);
                (found, fresh)
            }
            None => (check_against_config(&spec, &config, &file, dir)?, Vec::new()),
        };
        crate::budget::check(g.ctx().caps(), need(&found, trainable, &narrow, dtype))?;
        if new_head.is_none() {
            let plan = crate::packed::Packer::plan(g, &spec, &found, trainable, (&narrow, dtype))?;
            let _ = packer.set(plan);
        }
        let mut weights = Weights::default();
        let mut params = Vec::new();
        let mut buffers = Vec::new();
        let mut hf_names = Vec::new();
        let tied_head = format!("{}.weight", spec.head_name);
        for j in &spec.joins {
            let mut data = Vec::new();
            let mut shape = Vec::new();
            for part in &j.parts {
                let info = file.info(part).map_err(io_err)?;
                data.extend(file.tensor_f32(part).map_err(io_err)?);
                shape = info.shape.clone();
            }
            // Parts of shape [D] stack to [parts, D]; parts of [r, D] to [parts·r, D].
            let shape = if shape.len() == 1 {
                vec![j.parts.len(), shape[0]]
            } else {
                [vec![j.parts.len() * shape[0]], shape[1..].to_vec()].concat()
            };
            let p = make(&j.internal, &data, &shape)?;
            weights.insert(j.internal.clone(), p.clone());
            params.push((j.internal.clone(), p));
        }
        for info in file.tensors() {
            let dropped = new_head.as_ref().is_some_and(|h| h.left_out.contains(&info.name));
            if (spec.tied_head && info.name == tied_head) || is_ignored(&spec, &info.name) || dropped {
                // Some checkpoints store the tied head or non-parameter buffers (GPT-2's causal
                // mask); transformers ignores them too.
                continue;
            }
            hf_names.push(info.name.clone());
            if crate::weights::join_of(&spec, &info.name).is_some() {
                continue;
            }
            let data = file.tensor_f32(&info.name).map_err(io_err)?;
            if spec.is_buffer(&info.name) {
                let t = g.constant(&data, &info.shape)?;
                weights.insert(info.name.clone(), t.clone());
                buffers.push((info.name.clone(), t));
                continue;
            }
            for t in to_internal(&spec, HostTensor { name: info.name.clone(), shape: info.shape.clone(), data })? {
                let p = make(&t.name, &t.data, &t.shape)?;
                weights.insert(t.name.clone(), p.clone());
                params.push((t.name, p));
            }
        }
        if let Some(h) = new_head {
            let std = config["initializer_range"].as_f64().unwrap_or(0.02);
            for (name, shape, data) in crate::init::draw(&spec, &fresh, std, h.seed) {
                let p = make(&name, &data, &shape)?;
                weights.insert(name.clone(), p.clone());
                params.push((name.clone(), p));
                hf_names.push(name.clone());
                h.drawn.push(name);
            }
        }
        params.sort_by(|a, b| a.0.cmp(&b.0));
        let packs = packer.into_inner().unwrap_or_default().finish(&weights);
        weights.set_packs(packs);
        Ok(Model { spec, weights, params, buffers, hf_names, config })
    }

    /// The storage type of the model's projection weights (f32 unless loaded for inference in
    /// a 16-bit type).
    pub fn weight_dtype(&self) -> DType {
        self.params.iter().map(|(_, t)| t.dtype()).find(|d| *d != DType::F32).unwrap_or(DType::F32)
    }

    fn host(&self, g: &Graph<'_>, grads: bool) -> Result<Vec<HostTensor>> {
        let mut internal = HashMap::new();
        if !grads {
            for (name, b) in &self.buffers {
                internal.insert(
                    name.clone(),
                    HostTensor { name: name.clone(), shape: b.shape().to_vec(), data: g.read(b)? },
                );
            }
        }
        for (name, p) in &self.params {
            let t = if grads {
                p.grad().ok_or_else(|| ModelError::Weights(format!("no gradient for `{name}`")))?
            } else {
                p.clone()
            };
            let data = g.read(&t)?;
            internal.insert(name.clone(), HostTensor { name: name.clone(), shape: p.shape().to_vec(), data });
        }
        if grads {
            // Buffers have no gradient.
            let names: Vec<String> =
                self.hf_names.iter().filter(|n| !self.buffers.iter().any(|(b, _)| b == *n)).cloned().collect();
            return to_hf(&self.spec, &internal, &names);
        }
        to_hf(&self.spec, &internal, &self.hf_names)
    }

    /// The current parameters under their stored names and shapes.
    pub fn hf_params(&self, g: &Graph<'_>) -> Result<Vec<HostTensor>> {
        self.host(g, false)
    }

    /// The accumulated gradients under the stored names and shapes (none for buffers).
    pub fn hf_grads(&self, g: &Graph<'_>) -> Result<Vec<HostTensor>> {
        self.host(g, true)
    }

    /// Writes a Hugging Face folder: `config.json`, `model.safetensors` (f32; sharded above
    /// `max_shard_bytes`), and the tokenizer and generation files of `source_dir` when given.
    /// Each file is written under a temporary name and renamed.
    pub fn save(&self, g: &Graph<'_>, out: &Path, source_dir: Option<&Path>, max_shard_bytes: u64) -> Result<()> {
        self.save_as(g, out, source_dir, max_shard_bytes, DType::F32)
    }

    /// The type the folder stored its weights in (`dtype`, or the older `torch_dtype`, of its
    /// config; f32 when absent), which `save_pretrained` keeps.
    pub fn stored_dtype(&self) -> DType {
        let name = self.config.get("dtype").or_else(|| self.config.get("torch_dtype")).and_then(|v| v.as_str());
        match name {
            Some("bfloat16") => DType::BF16,
            Some("float16") => DType::F16,
            _ => DType::F32,
        }
    }

    /// [`Model::save`] with the weights written in `dtype` (rounded to nearest even) and the
    /// config's `dtype` naming it.
    pub fn save_as(
        &self,
        g: &Graph<'_>,
        out: &Path,
        source_dir: Option<&Path>,
        max_shard_bytes: u64,
        dtype: DType,
    ) -> Result<()> {
        let (file_dtype, name) = match dtype {
            DType::F32 => (vkformers_io::Dtype::F32, "float32"),
            DType::BF16 => (vkformers_io::Dtype::BF16, "bfloat16"),
            DType::F16 => (vkformers_io::Dtype::F16, "float16"),
        };
        std::fs::create_dir_all(out).map_err(|e| ModelError::Weights(format!("{}: {e}", out.display())))?;
        let tensors = self.hf_params(g)?;
        // A wrapper made by `init_from_config` holds its vision tower itself (as buffers).
        let holds_carried = self.buffers.iter().any(|(n, _)| is_carried(&self.spec, n));
        let carried = if holds_carried { Vec::new() } else { carried_tensors(&self.spec, source_dir)? };
        let mut save: Vec<SaveTensor<'_>> = tensors
            .iter()
            .map(|t| SaveTensor {
                name: t.name.clone(),
                dtype: file_dtype,
                shape: t.shape.clone(),
                data: TensorData::F32(&t.data),
            })
            .collect();
        save.extend(carried.iter().map(|(name, c)| SaveTensor {
            name: name.clone(),
            dtype: c.dtype,
            shape: c.shape.clone(),
            data: TensorData::Raw(&c.bytes),
        }));
        vkformers_io::save_safetensors(out, &save, max_shard_bytes).map_err(io_err)?;
        let mut config = self.config.clone();
        if let Some(obj) = config.as_object_mut() {
            obj.insert("dtype".into(), name.into());
            obj.remove("torch_dtype");
        }
        vkformers_io::write_json_atomic(out.join("config.json"), &config).map_err(io_err)?;
        if let Some(src) = source_dir {
            vkformers_io::copy_tokenizer_files(src, out).map_err(io_err)?;
        }
        Ok(())
    }
}

/// What [`Model::load_with_new_head`] collects while loading.
struct NewHead<'a> {
    seed: u64,
    drawn: &'a mut Vec<String>,
    left_out: &'a mut Vec<String>,
}

/// Internal names of the weights kept in 16 bits for inference: those only `linear` reads
/// (every layer's q, k, v, o, gate, up and down projections, the LM head, the in/out
/// projections) and a decoder's token table (the widening lookup's, and a tied head's).
fn linear_weight_names(spec: &ModelSpec) -> std::collections::HashSet<String> {
    let n = &spec.layer_names;
    let mut names = std::collections::HashSet::new();
    for (i, layer) in spec.layers.iter().enumerate() {
        // Multi-head latent attention's projections are products only too.
        let mla = layer.attn.mla.as_ref().map(|m| &m.names);
        let mla = mla.into_iter().flat_map(|m| [&m.q_a, &m.q_b, &m.kv_a, &m.kv_b]);
        for t in [&n.q, &n.k, &n.v, &n.o, &n.gate, &n.up, &n.down].into_iter().chain(mla) {
            names.insert(format!("{}.weight", crate::spec::layer_name(t, i)));
        }
    }
    if !spec.tied_head {
        names.insert(format!("{}.weight", spec.head_name));
    }
    // A decoder's token table too: its lookup widens 16-bit rows to f32 (exact), and a tied LM
    // head reads it as its weight (half the bytes of an f32 copy, e.g. 262 MB of TinyLlama's).
    if spec.encoder.is_none() {
        names.insert(format!("{}.weight", spec.embed_name));
    }
    for p in spec.project_in.iter().chain(&spec.project_out) {
        names.insert(format!("{p}.weight"));
    }
    names
}

/// f32 values as 16-bit bit patterns (round to nearest even; exact for values read from a
/// file of that type).
fn to_bits(data: &[f32], dtype: DType) -> Vec<u16> {
    match dtype {
        DType::F16 => data.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect(),
        _ => data.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect(),
    }
}

/// The device bytes of the checked parameters once loaded: trainable ones with their gradient
/// and moments, frozen ones in their storage type.
fn need(
    found: &HashMap<String, Vec<usize>>,
    trainable: &dyn Fn(&str) -> bool,
    narrow: &std::collections::HashSet<String>,
    dtype: DType,
) -> crate::budget::Need {
    let mut need = crate::budget::Need::default();
    for (name, shape) in found {
        let n = shape.iter().map(|&d| d as u64).product::<u64>();
        if trainable(name) {
            need.trainable_elements += n;
        } else {
            let bytes = if narrow.contains(name) { dtype.bytes() } else { 4 };
            need.frozen_bytes += n * bytes;
        }
    }
    need
}

/// Buffers some checkpoints store that are no parameters (transformers ignores them on load):
/// GPT-2's masks, rotary frequencies, and the position ids older BERT-family checkpoints saved
/// (`embeddings.position_ids`, e.g. sentence-transformers' all-MiniLM-L6-v2).
fn is_ignored_buffer(name: &str) -> bool {
    [".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq", "embeddings.position_ids"]
        .iter()
        .any(|b| name.ends_with(b))
}

/// A buffer, a tensor of a head the encoder does not have (`EncoderSpec::ignored`), one the
/// folder carries past the graph (`ModelSpec::carried`) or one the model class skips
/// (`ModelSpec::skipped`).
fn is_ignored(spec: &ModelSpec, name: &str) -> bool {
    is_ignored_buffer(name)
        || spec.encoder.as_ref().is_some_and(|e| e.ignored.iter().any(|p| name.starts_with(p.as_str())))
        || is_carried(spec, name)
        || spec.skipped.iter().any(|p| name.starts_with(p.as_str()))
        || spec.seq2seq.as_ref().is_some_and(|s| s.tied_aliases.iter().any(|a| a == name))
}

fn is_carried(spec: &ModelSpec, name: &str) -> bool {
    spec.carried.iter().any(|p| name.starts_with(p.as_str()))
}

/// The tensors of `source_dir` under the spec's carried prefixes, as stored (dtype and bytes).
fn carried_tensors(spec: &ModelSpec, source_dir: Option<&Path>) -> Result<Vec<(String, RawCopy)>> {
    if spec.carried.is_empty() {
        return Ok(Vec::new());
    }
    let src = source_dir.ok_or_else(|| {
        ModelError::Weights(format!(
            "a `{}` folder keeps tensors this model does not run ({}); saving it needs the folder it was \
             loaded from",
            spec.model_type,
            spec.carried.join(", ")
        ))
    })?;
    let file = ModelWeights::open(src).map_err(io_err)?;
    let mut out = Vec::new();
    for name in file.names().filter(|n| is_carried(spec, n)) {
        let raw = file.tensor_bytes(name).map_err(io_err)?;
        out.push((name.to_string(), RawCopy { dtype: raw.dtype, shape: raw.shape.to_vec(), bytes: raw.data.to_vec() }));
    }
    if out.is_empty() {
        return Err(ModelError::Weights(format!(
            "{} has no tensors under {}: a `{}` folder keeps its vision tower there",
            src.display(),
            spec.carried.join(", "),
            spec.model_type
        )));
    }
    Ok(out)
}

/// A stored tensor copied as it is.
struct RawCopy {
    dtype: vkformers_io::Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

/// The internal parameters (name -> shape) a folder's stored tensors make, from their headers:
/// joined parts stacked, fused tensors split, a stored copy of a tied head and non-parameter
/// buffers left out (transformers skips those too).
pub(crate) fn stored_params(spec: &ModelSpec, file: &ModelWeights) -> Result<HashMap<String, Vec<usize>>> {
    let mut found = HashMap::new();
    for j in &spec.joins {
        // Each part's header read once: its shape, or the name it is missing under.
        let infos: Vec<(&str, Option<Vec<usize>>)> =
            j.parts.iter().map(|p| (p.as_str(), file.info(p).ok().map(|i| i.shape))).collect();
        let missing: Vec<&str> = infos.iter().filter(|(_, s)| s.is_none()).map(|(p, _)| *p).collect();
        if missing.len() == j.parts.len() {
            continue;
        }
        if !missing.is_empty() {
            return Err(ModelError::Weights(format!(
                "missing tensor `{}` (one of the {} parts of `{}`)",
                missing.join("`, `"),
                j.parts.len(),
                j.internal
            )));
        }
        let shapes: Vec<Vec<usize>> = infos.into_iter().filter_map(|(_, s)| s).collect();
        if shapes.iter().any(|s| *s != shapes[0]) {
            return Err(ModelError::Weights(format!(
                "`{}` is stored as {} tensors of one shape (`{}`, ...); their shapes are {shapes:?}",
                j.internal,
                j.parts.len(),
                j.parts[0]
            )));
        }
        // Parts of [D] stack to [parts, D]; parts of [r, D] to [parts·r, D].
        let s = &shapes[0];
        let shape = if s.len() == 1 {
            vec![j.parts.len(), s[0]]
        } else {
            [vec![j.parts.len() * s[0]], s[1..].to_vec()].concat()
        };
        found.insert(j.internal.clone(), shape);
    }
    let tied_head = format!("{}.weight", spec.head_name);
    for info in file.tensors() {
        if (spec.tied_head && info.name == tied_head)
            || is_ignored(spec, &info.name)
            || join_of(spec, &info.name).is_some()
        {
            continue;
        }
        found.extend(internal_shapes(spec, &info.name, &info.shape)?);
    }
    Ok(found)
}

/// The stored tensor an internal parameter comes from when the names differ (a part of a fused
/// tensor such as GPT-2's `c_attn`, or of a joined one), for naming what a folder lacks.
fn stored_name_of(spec: &ModelSpec, internal: &str) -> Option<String> {
    if let Some(e) = spec.weight_map.iter().find(|e| e.parts.iter().any(|(n, _)| n == internal) && e.hf != internal) {
        return Some(e.hf.clone());
    }
    spec.joins
        .iter()
        .find(|j| j.internal == internal)
        .map(|j| format!("{}` ... `{}", j.parts[0], j.parts[j.parts.len() - 1]))
}

/// The config field that decides a parameter's shape, for the error message.
fn shape_field(spec: &ModelSpec, name: &str) -> &'static str {
    let n = &spec.layer_names;
    let is = |t: &str| (0..spec.layers.len()).any(|i| name.starts_with(&crate::spec::layer_name(t, i)));
    if name.starts_with(&spec.embed_name) || name.starts_with(&spec.head_name) {
        "vocab_size / hidden_size"
    } else if is(&n.k) || is(&n.v) {
        "num_key_value_heads / head_dim"
    } else if is(&n.q) || is(&n.o) {
        "num_attention_heads / head_dim"
    } else if is(&n.gate) || is(&n.up) || is(&n.down) {
        "intermediate_size"
    } else {
        "hidden_size"
    }
}

/// A folder's tensors against the parameters its config's graph reads, from the headers, before
/// anything is read or allocated; as transformers reports `missing_keys` / `unexpected_keys`,
/// every missing, unexpected or mis-shaped tensor is named with both shapes (a folder missing a
/// norm weight or a bias must not run with a default, and a config with fewer layers than the
/// checkpoint must not silently drop some).
fn check_against_config(
    spec: &ModelSpec,
    config: &serde_json::Value,
    file: &ModelWeights,
    dir: &Path,
) -> Result<HashMap<String, Vec<usize>>> {
    let expected = crate::init::expected_params(spec, config)?;
    let found = stored_params(spec, file)?;
    let mut problems: Vec<String> = Vec::new();
    for (name, shape) in &expected {
        match found.get(name) {
            None => {
                let p = match stored_name_of(spec, name) {
                    Some(hf) => format!("missing tensor `{hf}` (it holds `{name}`, shape {shape:?})"),
                    None => format!("missing tensor `{name}` (the config needs shape {shape:?})"),
                };
                if !problems.contains(&p) {
                    problems.push(p);
                }
            }
            Some(s) if s != shape => problems.push(format!(
                "`{name}` has shape {s:?}, the config gives {shape:?} (check {})",
                shape_field(spec, name)
            )),
            Some(_) => {}
        }
    }
    let known: std::collections::HashSet<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    let mut unexpected: Vec<_> = found.iter().filter(|(n, _)| !known.contains(n.as_str())).collect();
    unexpected.sort();
    for (name, shape) in unexpected {
        problems.push(format!("unexpected tensor `{name}` {shape:?}"));
    }
    if problems.is_empty() {
        return Ok(found);
    }
    let shown = problems.len().min(12);
    let more =
        if problems.len() > shown { format!("\n  ... and {} more", problems.len() - shown) } else { String::new() };
    Err(ModelError::Weights(format!(
        "{} does not match its config.json (`{}`, {} layers):\n  {}{more}\ncheck num_hidden_layers and the \
         fields named above against the checkpoint, or use the config.json it was saved with",
        dir.display(),
        spec.model_type,
        spec.layers.len(),
        problems[..shown].join("\n  ")
    )))
}
