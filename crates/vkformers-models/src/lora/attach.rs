//! A LoRA adapter on the device: the trainable `A`/`B` parameters, the per-projection terms
//! the decoder adds, and the way back to PEFT's tensors (values and gradients).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use vkformers_tensor::ops::{broadcast, dropout, matmul};
use vkformers_tensor::optim::Param;
use vkformers_tensor::{Graph, Tensor};

use crate::error::{ModelError, Result};
use crate::lora::adapter::{lora_key, saved_key, Adapter};
use crate::lora::config::{LoraConfig, Targets, SEQ_CLS, TOKEN_CLS};
use crate::lora::dropout_keys::{module_seed, with_layout, RowLayout, SampleKeys};
use crate::lora::modules::{linear_modules, targeted, LinearModule};
use crate::model::Model;
use crate::moe::lora::{
    a_from_device, a_to_device, b_from_device, b_to_device, expert_params, ExpertParam, ExpertTerm,
};
use crate::weights::HostTensor;

/// The LoRA term of one internal projection weight: `scale · dropout(x) Aᵀ Bᵀ`, with
/// `A [r, in]` shared by all parts of a fused module and `B [rows, r]` this part's rows.
#[derive(Clone)]
pub struct Term {
    a: Tensor,
    b: Tensor,
    scale: f32,
    dropout: f32,
    /// Index of the PEFT module: parts of one module draw the same dropout mask, as PEFT
    /// drops out the module's input once.
    module: u64,
}

/// The LoRA terms of a model by internal weight name, and the dropout stream's state (a clone
/// shares the tensors and snapshots the step: a checkpointed layer's recompute draws its masks).
#[derive(Clone, Default)]
pub struct Terms {
    map: HashMap<String, Term>,
    /// Packed expert parameters' terms by internal tensor name (`target_parameters`).
    experts: HashMap<String, ExpertTerm>,
    seed: u64,
    step: Cell<u64>,
    /// The micro-batch's samples: rows laid out as they say draw row-keyed masks.
    samples: RefCell<Option<SampleKeys>>,
    /// The layout of the inputs `linear` sees now (see `with_layout`).
    layout: Cell<RowLayout>,
    /// The token positions of `RowLayout::Gathered` rows (see `with_gathered_rows`).
    gathered: RefCell<Rc<Vec<usize>>>,
    /// The device keys of `samples` made so far, by (rows, layout): one upload per forward.
    key_tensors: RefCell<Vec<(usize, RowLayout, Tensor)>>,
}

impl Terms {
    pub fn get(&self, weight: &str) -> Option<&Term> {
        self.map.get(weight)
    }

    /// The term of a packed expert stack (see `moe::lora::expert_weight`).
    pub fn expert(&self, name: &str) -> Option<&ExpertTerm> {
        self.experts.get(name)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty() && self.experts.is_empty()
    }

    /// Selects the dropout masks of training step `step` (a pure function of seed, step and
    /// module, so a resumed run draws the same masks).
    pub fn set_step(&self, step: u64) {
        self.step.set(step);
    }

    /// Keys the dropout masks of the next forward by its samples (global sample indices and
    /// padded length), so each sample draws the same masks in any batch, on any rank; `None`:
    /// the batch-wide stream of `set_step` alone.
    pub fn set_samples(&self, keys: Option<SampleKeys>) {
        *self.samples.borrow_mut() = keys;
        self.key_tensors.borrow_mut().clear();
    }

    /// Runs `f` with `linear`'s inputs being the token rows at `positions` of `[B·T]` (a sparse
    /// masked-LM head's targets): each keeps its token's masks.
    pub fn with_gathered_rows<R>(&self, positions: Vec<usize>, f: impl FnOnce() -> R) -> R {
        let before = self.gathered.replace(Rc::new(positions));
        let out = with_layout(&self.layout, RowLayout::Gathered, f);
        *self.gathered.borrow_mut() = before;
        out
    }

    /// The `[rows, 3]` device keys of `rows` input rows in the current layout, if the
    /// micro-batch's samples key them.
    fn row_keys(&self, g: &Graph<'_>, rows: usize) -> vkformers_tensor::Result<Option<Tensor>> {
        let layout = self.layout.get();
        // Gathered rows change with their positions: made per call (a head's few modules).
        let cached = layout != RowLayout::Gathered;
        if let Some((.., t)) = self.key_tensors.borrow().iter().find(|(r, l, _)| cached && *r == rows && *l == layout) {
            return Ok(Some(t.clone()));
        }
        let gathered = self.gathered.borrow().clone();
        let Some(keys) = self.samples.borrow().as_ref().and_then(|k| k.keys(rows, layout, &gathered)) else {
            return Ok(None);
        };
        let t = g.ints(&keys, &[rows, 3])?;
        if cached {
            self.key_tensors.borrow_mut().push((rows, layout, t.clone()));
        }
        Ok(Some(t))
    }

    /// Runs `f` with `linear`'s inputs laid out as `layout` (a pooled head's `[B]` rows).
    pub fn with_layout<R>(&self, layout: RowLayout, f: impl FnOnce() -> R) -> R {
        with_layout(&self.layout, layout, f)
    }
}

/// `dropout(x)` of a term's input `x [N, in]`: row-keyed by the batch's samples where the rows
/// are laid out as `terms` knows, else the batch-wide element stream of the step.
fn dropped(g: &Graph<'_>, x: &Tensor, t: &Term, terms: &Terms) -> vkformers_tensor::Result<Tensor> {
    if let Some(keys) = terms.row_keys(g, x.rows())? {
        return dropout::dropout_rows_keyed(g, x, t.dropout, module_seed(terms.seed, t.module), &keys);
    }
    let seed = terms.seed.wrapping_add(terms.step.get().wrapping_mul(0x9E37_79B9_7F4A_7C15));
    dropout::dropout(g, x, t.dropout, seed, t.module << 32)
}

/// `y = x Wᵀ (+ b) (+ scale · dropout(x) Aᵀ Bᵀ when `term` is set)`, x `[N, in]`, y `[N, out]`.
/// Dropout applies only while gradients are recorded (training), as in PEFT's train mode.
pub fn linear(
    g: &Graph<'_>,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    terms: &Terms,
    name: &str,
) -> vkformers_tensor::Result<Tensor> {
    let y = matmul::linear(g, x, w, bias)?;
    let Some(t) = terms.get(name) else { return Ok(y) };
    let xd = if t.dropout > 0.0 && g.grad_enabled() { dropped(g, x, t, terms)? } else { x.clone() };
    let u = matmul::linear(g, &xd, &t.a, None)?; // [N, r]
    let d = matmul::linear(g, &u, &t.b, None)?; // [N, rows]
    broadcast::add(g, &y, &broadcast::scale(g, &d, t.scale)?)
}

/// The adapter's trainable tensors on the device.
pub struct LoraParams {
    pub config: LoraConfig,
    /// The targeted modules, in model order.
    pub modules: Vec<LinearModule>,
    a: Vec<Tensor>,
    /// Per module, `B`'s rows split as the module's parts.
    b: Vec<Vec<Tensor>>,
    /// `modules_to_save` tensors by their stored (HF) name.
    saved: Vec<(String, Tensor)>,
    /// Packed expert parameters (`target_parameters`) with their device `A [E·r, in]` (a
    /// transposed stack's `[E·in, r]`, see `moe::lora::a_to_device`) and
    /// `B [E·out, r]` (PEFT's B permuted, see `moe::lora::b_to_device`).
    experts: Vec<(ExpertParam, Tensor, Tensor)>,
}

/// Splits the rows of `B [out, r]` as the module's weight rows split (see `MapEntry::groups`).
fn split_rows(m: &LinearModule, data: &[f32], r: usize) -> Vec<Vec<f32>> {
    let mut parts: Vec<Vec<f32>> = m.parts.iter().map(|p| Vec::with_capacity(p.1 * r)).collect();
    let mut at = 0;
    for _ in 0..m.groups {
        for (o, (_, rows)) in parts.iter_mut().zip(&m.parts) {
            let n = rows / m.groups * r;
            o.extend_from_slice(&data[at..at + n]);
            at += n;
        }
    }
    parts
}

/// The inverse of `split_rows`.
fn join_rows(m: &LinearModule, parts: &[Vec<f32>]) -> Vec<f32> {
    let mut out = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    for gi in 0..m.groups {
        for p in parts {
            let n = p.len() / m.groups;
            out.extend_from_slice(&p[gi * n..(gi + 1) * n]);
        }
    }
    out
}

/// Whether the stored tensor `name` belongs to a module listed in `modules_to_save`: PEFT wraps
/// every module whose path ends with a listed name (`key.endswith(target)` in `_set_trainable`)
/// whole, so a tensor is saved when its module or any module above it ends so
/// (`classifier.out_proj.weight` under `classifier`).
pub fn is_saved_module(modules_to_save: &[String], name: &str) -> bool {
    let module = name.rsplit_once('.').map_or(name, |(m, _)| m);
    let mut ancestors = module.match_indices('.').map(|(i, _)| &module[..i]).chain([module]);
    ancestors.any(|m| modules_to_save.iter().any(|t| m.ends_with(t.as_str())))
}

/// Whether the module `name` lies inside a `modules_to_save` module (PEFT never adapts those:
/// `check_target_module_exists` excludes `(^|.*\.)m($|\..*)`).
fn inside_saved_module(modules_to_save: &[String], name: &str) -> bool {
    let dotted = format!(".{name}.");
    modules_to_save.iter().any(|m| dotted.contains(&format!(".{m}.")))
}

/// Loads the model folder `dir` with every weight frozen (constants: no gradient, no optimizer
/// state) except the tensors of `modules_to_save`.
pub fn load_frozen(g: &Graph<'_>, dir: &std::path::Path, modules_to_save: &[String]) -> Result<Model> {
    Model::load_with_trainable(g, dir, &|name| is_saved_module(modules_to_save, name))
}

/// The linear modules of `model` that `config` targets.
pub fn target_modules(model: &Model, config: &LoraConfig) -> Result<Vec<LinearModule>> {
    let seq2seq = model.spec.seq2seq.is_some();
    let classifier = [SEQ_CLS, TOKEN_CLS].contains(&config.task_type.as_str());
    if seq2seq != (config.task_type == "SEQ_2_SEQ_LM") || (classifier && model.spec.encoder.is_none()) {
        return Err(ModelError::Config(format!(
            "an adapter for task_type `{}` on a `{}` model; use an adapter trained for this model",
            config.task_type, model.spec.model_type
        )));
    }
    let all = linear_modules(&model.spec, &model.weights)?;
    // OPT's project_in/project_out are Linear modules PEFT would adapt; the decoder adds no
    // LoRA term there, so refuse rather than silently differ from PEFT.
    let matcher = crate::lora::modules::Matcher::new(&config.target_modules)?;
    for name in [&model.spec.project_in, &model.spec.project_out].into_iter().flatten() {
        let m = LinearModule {
            name: name.clone(),
            parts: Vec::new(),
            groups: 1,
            in_features: 0,
            out_features: 0,
            conv1d: false,
            is_head: false,
        };
        if matcher.matches(&m) {
            return Err(ModelError::Unsupported(format!(
                "LoRA on `{name}`; list the modules to adapt instead of `all-linear` (e.g. q_proj,v_proj)"
            )));
        }
    }
    // Only packed expert parameters adapted: no module needs to match.
    let none = matches!(&config.target_modules, Targets::Names(n) if n.is_empty());
    if none && !config.target_parameters.is_empty() {
        return Ok(Vec::new());
    }
    let free: Vec<LinearModule> =
        all.into_iter().filter(|m| !inside_saved_module(&config.modules_to_save, &m.name)).collect();
    let out = targeted(&free, &config.target_modules)?;
    crate::moe::lora::refuse_parameter_targets(&model.spec, &config.target_modules, &out)?;
    Ok(out)
}

/// A fresh adapter for `model` (PEFT's init: A kaiming-uniform, B zero), deterministic in `seed`.
pub fn new_adapter(model: &Model, mut config: LoraConfig, seed: u64) -> Result<Adapter> {
    if model.spec.seq2seq.is_some() {
        config.task_type = "SEQ_2_SEQ_LM".into();
    }
    let modules = target_modules(model, &config)?;
    config.fan_in_fan_out = modules.iter().any(|m| m.conv1d);
    let experts = expert_params(&model.spec, &model.weights, &config.target_parameters)?;
    let mut adapter = Adapter::init(config, &modules, seed);
    adapter.init_experts(&experts, seed);
    Ok(adapter)
}

/// Puts `adapter` on the device and into `model`'s forward: every targeted projection adds its
/// LoRA term; `modules_to_save` tensors replace the model's. `seed` keys the dropout masks.
pub fn attach(g: &Graph<'_>, model: &mut Model, adapter: &Adapter, seed: u64) -> Result<LoraParams> {
    let config = adapter.config.clone();
    let modules = target_modules(model, &config)?;
    let experts = expert_params(&model.spec, &model.weights, &adapter.config.target_parameters)?;
    check_all_used(model, adapter, &modules, &experts)?;
    let (r, scale) = (config.r, config.scale());
    let mut terms = Terms { seed, ..Terms::default() };
    let (mut a_all, mut b_all) = (Vec::new(), Vec::new());
    for (mi, m) in modules.iter().enumerate() {
        let (a, b) = adapter.pair(m)?;
        let a = g.parameter(&a.data, &a.shape)?;
        let mut parts = Vec::new();
        for ((name, rows), data) in m.parts.iter().zip(split_rows(m, &b.data, r)) {
            let b = g.parameter(&data, &[*rows, r])?;
            let term = Term { a: a.clone(), b: b.clone(), scale, dropout: config.lora_dropout, module: mi as u64 };
            terms.map.insert(name.clone(), term);
            parts.push(b);
        }
        a_all.push(a);
        b_all.push(parts);
    }
    let experts = attach_experts(g, model, adapter, &mut terms)?;
    let saved = attach_saved(g, model, adapter)?;
    model.weights.set_lora(terms);
    Ok(LoraParams { config, modules, a: a_all, b: b_all, saved, experts })
}

/// The packed expert parameters' pairs on the device, their terms in `terms`.
fn attach_experts(
    g: &Graph<'_>,
    model: &Model,
    adapter: &Adapter,
    terms: &mut Terms,
) -> Result<Vec<(ExpertParam, Tensor, Tensor)>> {
    let config = &adapter.config;
    let params = expert_params(&model.spec, &model.weights, &config.target_parameters)?;
    if !params.is_empty() && config.lora_dropout > 0.0 {
        return Err(ModelError::Unsupported(
            "lora_dropout with target_parameters (PEFT's ParamWrapper refuses it too)".into(),
        ));
    }
    let mut out = Vec::new();
    for p in params {
        let (a, b) = adapter.expert_pair(&p)?;
        let a = if p.transposed {
            let a = a_to_device(&a.data, (p.experts, p.in_features, config.r));
            g.parameter(&a, &[p.experts * p.in_features, config.r])?
        } else {
            g.parameter(&a.data, &a.shape)?
        };
        let dims = (p.experts, p.out_features, config.r);
        let b = g.parameter(&b_to_device(&b.data, dims), &[p.experts * p.out_features, config.r])?;
        let (scale, experts, transposed) = (config.scale(), p.experts, p.transposed);
        let term = ExpertTerm { a: a.clone(), b: b.clone(), scale, experts, transposed };
        terms.experts.insert(p.name.clone(), term);
        out.push((p, a, b));
    }
    Ok(out)
}

/// Refuses an adapter holding tensors that no targeted module, packed expert parameter
/// (`target_parameters`) or `modules_to_save` tensor of `model` reads: they would be dropped
/// silently, and the model would run without part of the adapter (trained for another model,
/// another `target_modules`, or a PEFT variant such as DoRA's magnitudes or LoRA on embeddings
/// that is not supported).
fn check_all_used(model: &Model, adapter: &Adapter, modules: &[LinearModule], experts: &[ExpertParam]) -> Result<()> {
    let names = modules.iter().map(|m| &m.name).chain(experts.iter().map(|p| &p.module));
    let mut read: std::collections::HashSet<String> =
        names.flat_map(|n| [lora_key(n, 'A'), lora_key(n, 'B')]).collect();
    let saved = &adapter.config.modules_to_save;
    read.extend(model.hf_names.iter().filter(|n| is_saved_module(saved, n)).map(|n| saved_key(n)));
    let unused: Vec<&str> = adapter.tensors.keys().filter(|k| !read.contains(*k)).map(String::as_str).collect();
    if unused.is_empty() {
        return Ok(());
    }
    const SHOWN: usize = 8;
    let more = if unused.len() > SHOWN { format!(" and {} more", unused.len() - SHOWN) } else { String::new() };
    let base = adapter.config.base_model_name_or_path.as_deref().unwrap_or("not recorded");
    Err(ModelError::Weights(format!(
        "{} adapter tensor(s) match no module of this `{}` model: {}{more}. The adapter's target_modules \
         select {} module(s) here (its base model: {base}); load it on the model it was trained for, or \
         remove those tensors from {} (or fix target_modules in {})",
        unused.len(),
        model.spec.model_type,
        unused.iter().take(SHOWN).map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "),
        modules.len(),
        crate::lora::adapter::ADAPTER_WEIGHTS,
        crate::lora::adapter::ADAPTER_CONFIG,
    )))
}

/// The `modules_to_save` tensors: the adapter's copy when it has one, else the base weight;
/// trainable parameters either way.
fn attach_saved(g: &Graph<'_>, model: &mut Model, adapter: &Adapter) -> Result<Vec<(String, Tensor)>> {
    let mut saved = Vec::new();
    for name in model.hf_names.clone() {
        if !is_saved_module(&adapter.config.modules_to_save, &name) {
            continue;
        }
        let Some(p) = model.weights.opt(&name).cloned() else {
            return Err(ModelError::Unsupported(format!("modules_to_save of the fused or renamed tensor `{name}`")));
        };
        let t = match adapter.tensors.get(&saved_key(&name)) {
            Some(t) if t.shape == p.shape() => {
                let t = g.parameter(&t.data, &t.shape)?;
                model.weights.insert(name.clone(), t.clone());
                for (n, q) in model.params.iter_mut() {
                    if *n == name {
                        *q = t.clone();
                    }
                }
                t
            }
            Some(t) => return Err(ModelError::Weights(format!("adapter `{}` is {:?}", t.name, t.shape))),
            None => p,
        };
        saved.push((name, t));
    }
    Ok(saved)
}

impl LoraParams {
    /// The trainable tensors (A, B parts, `modules_to_save`), for an optimizer. Weight decay
    /// applies to the LoRA matrices as PEFT's trainer applies it to every non-bias, non-norm
    /// weight.
    pub fn params(&self) -> Vec<Param> {
        self.named_params().into_iter().map(|(_, tensor, decay)| Param { tensor, decay }).collect()
    }

    /// The trainable tensors with stable names (checkpoint keys) and weight-decay flags: PEFT
    /// keys, with `.part<i>` after `B`'s key for each part of a fused module.
    pub fn named_params(&self) -> Vec<(String, Tensor, bool)> {
        let mut v = Vec::new();
        for ((m, a), bs) in self.modules.iter().zip(&self.a).zip(&self.b) {
            v.push((lora_key(&m.name, 'A'), a.clone(), true));
            let kb = lora_key(&m.name, 'B');
            for (i, b) in bs.iter().enumerate() {
                let name = if bs.len() == 1 { kb.clone() } else { format!("{kb}.part{i}") };
                v.push((name, b.clone(), true));
            }
        }
        for (p, a, b) in &self.experts {
            v.push((lora_key(&p.module, 'A'), a.clone(), true));
            v.push((lora_key(&p.module, 'B'), b.clone(), true));
        }
        v.extend(self.saved.iter().map(|(n, t)| (saved_key(n), t.clone(), !n.ends_with("bias"))));
        v
    }

    /// Number of trainable values.
    pub fn numel(&self) -> usize {
        self.params().iter().map(|p| p.tensor.numel()).sum()
    }

    fn host(&self, g: &Graph<'_>, grads: bool) -> Result<Vec<HostTensor>> {
        let read = |t: &Tensor, what: &str| -> Result<Vec<f32>> {
            let t = if grads {
                t.grad().ok_or_else(|| ModelError::Weights(format!("no gradient for `{what}`")))?
            } else {
                t.clone()
            };
            Ok(g.read(&t)?)
        };
        let r = self.config.r;
        let mut out = Vec::new();
        for ((m, a), bs) in self.modules.iter().zip(&self.a).zip(&self.b) {
            let (ka, kb) = (lora_key(&m.name, 'A'), lora_key(&m.name, 'B'));
            out.push(HostTensor { name: ka.clone(), shape: vec![r, m.in_features], data: read(a, &ka)? });
            let parts = bs.iter().map(|b| read(b, &kb)).collect::<Result<Vec<_>>>()?;
            out.push(HostTensor { name: kb, shape: vec![m.out_features, r], data: join_rows(m, &parts) });
        }
        for (p, a, b) in &self.experts {
            let (ka, kb) = (lora_key(&p.module, 'A'), lora_key(&p.module, 'B'));
            let er = p.experts * r;
            let mut data = read(a, &ka)?;
            if p.transposed {
                data = a_from_device(&data, (p.experts, p.in_features, r));
            }
            out.push(HostTensor { name: ka, shape: vec![er, p.in_features], data });
            let data = b_from_device(&read(b, &kb)?, (p.experts, p.out_features, r));
            out.push(HostTensor { name: kb, shape: vec![p.out_features, er], data });
        }
        for (name, t) in &self.saved {
            let key = saved_key(name);
            out.push(HostTensor { name: key.clone(), shape: t.shape().to_vec(), data: read(t, &key)? });
        }
        Ok(out)
    }

    /// The adapter's current tensors under PEFT's keys and shapes.
    pub fn hf_params(&self, g: &Graph<'_>) -> Result<Vec<HostTensor>> {
        self.host(g, false)
    }

    /// The accumulated gradients under PEFT's keys and shapes.
    pub fn hf_grads(&self, g: &Graph<'_>) -> Result<Vec<HostTensor>> {
        self.host(g, true)
    }

    /// The adapter as it is now (read back from the device).
    pub fn adapter(&self, g: &Graph<'_>) -> Result<Adapter> {
        let tensors = self.hf_params(g)?.into_iter().map(|t| (t.name.clone(), t)).collect();
        Ok(Adapter { config: self.config.clone(), tensors })
    }

    /// Writes `adapter_config.json` + `adapter_model.safetensors` into `dir`.
    pub fn save(&self, g: &Graph<'_>, dir: &std::path::Path) -> Result<()> {
        self.adapter(g)?.save(dir, &self.modules)
    }
}

/// Loads a model with an unmerged adapter for inference or evaluation (`--adapter DIR`):
/// base weights frozen, the adapter's terms in the forward.
pub fn load_with_adapter(
    g: &Graph<'_>,
    model_dir: &std::path::Path,
    adapter_dir: &std::path::Path,
) -> Result<(Model, LoraParams)> {
    load_with_adapter_as(g, model_dir, adapter_dir, vkformers_tensor::DType::F32)
}

/// [`load_with_adapter`] with the frozen base projections kept in `dtype` (a 16-bit base for
/// inference; the adapter stays f32).
pub fn load_with_adapter_as(
    g: &Graph<'_>,
    model_dir: &std::path::Path,
    adapter_dir: &std::path::Path,
    dtype: vkformers_tensor::DType,
) -> Result<(Model, LoraParams)> {
    let adapter = Adapter::load(adapter_dir)?;
    let saved = adapter.config.modules_to_save.clone();
    let mut model = Model::load_typed(g, model_dir, &|name| is_saved_module(&saved, name), dtype)?;
    let params = attach(g, &mut model, &adapter, 0)?;
    Ok((model, params))
}
