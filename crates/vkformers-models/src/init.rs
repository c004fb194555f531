//! A fresh model from a `config.json` (pre-training from scratch), initialised as the model's
//! `_init_weights` does in transformers: every linear and embedding weight from
//! normal(0, `initializer_range`), the embedding's `pad_token_id` row zero, biases zero, norm
//! weights one (zero for norms stored as an offset from one, e.g. Gemma's `1 + w`); the per-family
//! exceptions are spec data (`ResidualInit`: GPT-2's residual projections at std / sqrt(2L);
//! `layer_init_std`: openai-gpt's Conv1D at 0.02), checked against transformers' own init by
//! tests/init.rs. Values come from a seeded generator, so a seed gives the same model on every
//! machine.

use std::path::Path;

use serde_json::Value;
use vkformers_tensor::Graph;

use crate::archs::spec_from_config;
use crate::decoder::Weights;
use crate::error::{ModelError, Result};
use crate::model::Model;
use crate::spec::{
    layer_name, AttnSpec, LayerNames, MlaSpec, MlpSpec, ModelSpec, Norm, QkNormAt, ResidualInit, SinksInit,
};

/// How one parameter starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Init {
    Normal,
    /// N(0, initializer_range / sqrt(2 * layers)): a residual output projection (`ResidualInit`).
    ScaledNormal,
    /// N(0, `ModelSpec::layer_init_std`): a layer matrix of a family with a fixed layer std.
    LayerNormal,
    /// Every element this value.
    Value(f32),
    Zeros,
    Ones,
    /// Marian's / Pegasus' fixed sinusoidal rows (`seq2seq::attention::sinusoid_rows`).
    Sinusoid,
}

pub(crate) struct Planned {
    pub(crate) name: String,
    pub(crate) shape: Vec<usize>,
    pub(crate) init: Init,
}

/// SplitMix64 with Box–Muller normals: small, portable, and seeded.
pub(crate) struct Normal(pub(crate) u64);

impl Normal {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    pub(crate) fn sample(&mut self, std: f64) -> f32 {
        let (u1, u2) = (self.unit(), self.unit());
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos() * std) as f32
    }
}

pub(crate) fn norm_params(out: &mut Vec<Planned>, name: &str, norm: &Norm, width: usize) {
    if let Norm::RmsGated { rank, .. } = norm {
        // A.X-K2's gated RMSNorm: the norm's weight and its gate MLP's two bias-free matrices.
        out.push(Planned { name: format!("{name}.norm.weight"), shape: vec![width], init: Init::Ones });
        linear(out, &format!("{name}.W_down"), *rank, width, false);
        linear(out, &format!("{name}.W_up"), width, *rank, false);
        return;
    }
    let (weight_init, bias) = match norm {
        Norm::Rms { unit_offset: true, .. } => (Init::Zeros, false),
        Norm::Rms { .. } => (Init::Ones, false),
        Norm::Layer { bias, .. } => (Init::Ones, *bias),
        Norm::LayerPerHead { .. } => (Init::Ones, false),
        // NemotronPreTrainedModel._init_weights sets LayerNorm1P's stored weight to one (gain 2).
        Norm::LayerUnitOffset { .. } => (Init::Ones, true),
        Norm::LayerPlain { .. } | Norm::RmsPlain { .. } | Norm::RmsGated { .. } => return,
    };
    out.push(Planned { name: format!("{name}.weight"), shape: vec![width], init: weight_init });
    if bias {
        out.push(Planned { name: format!("{name}.bias"), shape: vec![width], init: Init::Zeros });
    }
}

pub(crate) fn linear(out: &mut Vec<Planned>, name: &str, rows: usize, cols: usize, bias: bool) {
    out.push(Planned { name: format!("{name}.weight"), shape: vec![rows, cols], init: Init::Normal });
    if bias {
        out.push(Planned { name: format!("{name}.bias"), shape: vec![rows], init: Init::Zeros });
    }
}

/// Layer `i`'s query, key and value projections of the attention `a`: `[heads·D, H]` and
/// `[kv_heads·D, H]` twice, with biases by `qkv_bias` (the decoder, encoder and seq2seq plans).
pub(crate) fn qkv_params(out: &mut Vec<Planned>, names: &LayerNames, a: &AttnSpec, i: usize, h: usize) {
    let (q, kv) = (a.heads * a.head_dim, a.kv_heads * a.head_dim);
    linear(out, &layer_name(&names.q, i), q, h, a.qkv_bias);
    linear(out, &layer_name(&names.k, i), kv, h, a.qkv_bias);
    linear(out, &layer_name(&names.v, i), kv, h, a.qkv_bias);
}

/// Layer `i`'s MLP projections of width `intermediate`: the gate `[I, H]` when `gated`, then up
/// `[I, H]` and down `[H, I]`, with biases by `bias`.
pub(crate) fn mlp_params(
    out: &mut Vec<Planned>,
    names: &LayerNames,
    i: usize,
    (h, intermediate): (usize, usize),
    bias: bool,
    gated: bool,
) {
    if gated {
        linear(out, &layer_name(&names.gate, i), intermediate, h, bias);
    }
    linear(out, &layer_name(&names.up, i), intermediate, h, bias);
    linear(out, &layer_name(&names.down, i), h, intermediate, bias);
}

/// xIELU's scalars as `XIELUActivation.__init__` makes them (alpha_p_init = alpha_n_init = 0.8,
/// beta 0.5, eps -1e-6; the learned two stored through softplus' inverse, log(expm1(v)));
/// beta and eps are 0-d buffers.
fn xielu_params(out: &mut Vec<Planned>, act: &str) {
    let inv_softplus = |v: f64| v.exp_m1().ln() as f32;
    for (name, shape, v) in [
        ("alpha_p", vec![1], inv_softplus(0.8)),
        ("alpha_n", vec![1], inv_softplus(0.8 - 0.5)),
        ("beta", vec![], 0.5),
        ("eps", vec![], -1e-6),
    ] {
        out.push(Planned { name: format!("{act}.{name}"), shape, init: Init::Value(v) });
    }
}

/// `{module}.weight`, planned last, is drawn with the residual-scaled std.
fn scale_init(out: &mut [Planned], module: &str) {
    let name = format!("{module}.weight");
    if let Some(p) = out.iter_mut().rev().find(|p| p.name == name) {
        p.init = Init::ScaledNormal;
    }
}

/// Layer `i`'s multi-head latent attention projections and norms (hidden size `h`, `heads`
/// heads), as DeepSeek-V2's attention module lists them; the output projection is the caller's.
fn mla_params(out: &mut Vec<Planned>, names: &LayerNames, m: &MlaSpec, (i, h, heads): (usize, usize, usize)) {
    let n = &m.names;
    let q_rows = heads * m.qk_dim();
    match m.q_lora_rank {
        None => linear(out, &layer_name(&names.q, i), q_rows, h, false),
        Some(r) => {
            linear(out, &layer_name(&n.q_a, i), r, h, m.bias);
            norm_params(out, &layer_name(&n.q_a_norm, i), &m.norm, r);
            // A gated query reads [norm(q_a) | q_a] and writes each head's gate too.
            let (q_rows, q_cols) = if m.gated_query { (q_rows + heads * m.v_dim, 2 * r) } else { (q_rows, r) };
            linear(out, &layer_name(&n.q_b, i), q_rows, q_cols, false);
        }
    }
    linear(out, &layer_name(&n.kv_a, i), m.kv_lora_rank + m.rope_dim, h, m.bias);
    norm_params(out, &layer_name(&n.kv_a_norm, i), &m.norm, m.kv_lora_rank);
    linear(out, &layer_name(&n.kv_b, i), heads * (m.nope_dim + m.v_dim), m.kv_lora_rank, false);
}

/// Layer `i`'s mixture of attention heads (hidden size `h`): the shared k/v projections, the
/// router and expert stacks from N(0, std), the output bias zero (JetMoE's `_init_weights`).
fn moa_params(out: &mut Vec<Planned>, names: &LayerNames, a: &AttnSpec, (i, h): (usize, usize)) {
    let kv = a.kv_heads * a.head_dim;
    linear(out, &layer_name(&names.k, i), kv, h, false);
    linear(out, &layer_name(&names.v, i), kv, h, false);
    let Some(m) = &a.moa else { return };
    for (name, shape) in m.params(i, h, kv) {
        let init = if shape.len() == 1 { Init::Zeros } else { Init::Normal };
        out.push(Planned { name, shape, init });
    }
}

/// The parameters (internal names, shapes, init) a spec's decoder graph reads.
/// The MoE block's parameters of layer `i`: every weight (router, packed experts, shared expert)
/// a matrix from N(0, std); DeepSeek-V3's correction bias (a vector) zero; gpt-oss's expert
/// biases `[E, 2I]`, `[E, H]` zero and its router bias `[E]` drawn like a matrix.
fn moe_params(m: &crate::moe::MoeSpec, i: usize, h: usize) -> Vec<Planned> {
    let buffer = m.router.buffer().map(|b| layer_name(b, i));
    let b = m.biased.as_ref();
    let is = |t: &String, n: &str| layer_name(t, i) == n;
    let expert_bias = |n: &str| b.is_some_and(|b| is(&b.gate_up_bias, n) || is(&b.down_bias, n));
    let router_bias = |n: &str| b.is_some_and(|b| is(&b.router_bias, n));
    let planned = m.params(i, h).into_iter().map(|(name, shape)| {
        let zero = (shape.len() == 1 && !router_bias(&name)) || buffer.as_ref() == Some(&name) || expert_bias(&name);
        let init = if zero { Init::Zeros } else { Init::Normal };
        Planned { name, shape, init }
    });
    planned.collect()
}

fn plan(spec: &ModelSpec, config: &Value) -> Result<Vec<Planned>> {
    if spec.encoder.is_some() {
        return crate::encoder::plan(spec, config);
    }
    if spec.seq2seq.is_some() {
        return crate::seq2seq::plan(spec, config);
    }
    let h = spec.hidden;
    // OPT's embedding is `word_embed_proj_dim` wide; project_in/out map it to and from `h`.
    let e = match (&spec.project_in, &spec.project_out) {
        (None, None) => h,
        _ => config["word_embed_proj_dim"].as_u64().map(|d| d as usize).ok_or_else(|| {
            ModelError::Config("config.json has in/out projections but no word_embed_proj_dim".into())
        })?,
    };
    let mut out =
        vec![Planned { name: format!("{}.weight", spec.embed_name), shape: vec![spec.vocab, e], init: Init::Normal }];
    if let Some(name) = &spec.project_in {
        linear(&mut out, name, h, e, false);
    }
    if let Some(wpe) = &spec.position_embedding {
        let max =
            ["max_position_embeddings", "n_positions"].iter().find_map(|k| config[k].as_u64()).ok_or_else(|| {
                ModelError::Config("config.json has no max_position_embeddings for the position table".into())
            })?;
        out.push(Planned {
            name: format!("{wpe}.weight"),
            shape: vec![max as usize + spec.position_offset, h],
            init: Init::Normal,
        });
    }
    if let Some(n) = &spec.embed_norm {
        norm_params(&mut out, &spec.embed_norm_name, n, h);
    }
    let names = &spec.layer_names;
    for (i, l) in spec.layers.iter().enumerate() {
        let first = out.len();
        let a = &l.attn;
        let (q, kv) = (a.heads * a.head_dim, a.kv_heads * a.head_dim);
        for (norm, template) in [
            (&l.attn_norm, &names.attn_norm),
            (&l.mlp_norm, &names.mlp_norm),
            (&l.post_attn_norm, &names.post_attn_norm),
        ]
        .into_iter()
        .chain([(&l.post_mlp_norm, &names.post_mlp_norm)])
        {
            if let Some(n) = norm {
                let name = layer_name(template, i);
                if !out.iter().any(|p| p.name == format!("{name}.weight")) {
                    norm_params(&mut out, &name, n, h);
                }
            }
        }
        // The attention output's width: heads of `head_dim`, or MLA's value heads.
        let o_in = match &a.mla {
            Some(m) => {
                mla_params(&mut out, names, m, (i, h, a.heads));
                a.heads * m.v_dim
            }
            None if a.moa.is_some() => {
                moa_params(&mut out, names, a, (i, h));
                kv
            }
            None => {
                qkv_params(&mut out, names, a, i, h);
                q
            }
        };
        if let Some((n, template)) = &a.out_norm {
            norm_params(&mut out, &layer_name(template, i), n, o_in);
        }
        if let Some(template) = &a.sinks {
            // granite_swa's `_init_weights` zeroes the sinks, gpt-oss's draws them like a matrix.
            let init = if spec.sinks_init == SinksInit::Normal { Init::Normal } else { Init::Zeros };
            out.push(Planned { name: layer_name(template, i), shape: vec![a.heads], init });
        }
        // MoA's output projections are its experts'.
        if a.moa.is_none() {
            linear(&mut out, &layer_name(&names.o, i), h, o_in, a.out_bias);
        }
        if spec.residual_init != ResidualInit::Plain && a.moa.is_none() {
            scale_init(&mut out, &layer_name(&names.o, i));
        }
        match &a.qk_norm {
            // Per-head weights [heads, D] (Cohere's qk norm).
            Some(Norm::LayerPerHead { .. }) => {
                for (template, heads) in [(&names.q_norm, a.heads), (&names.k_norm, a.kv_heads)] {
                    let name = format!("{}.weight", layer_name(template, i));
                    out.push(Planned { name, shape: vec![heads, a.head_dim], init: Init::Ones });
                }
            }
            Some(n) => {
                let (wq, wk) = if a.qk_norm_at == QkNormAt::Projection { (q, kv) } else { (a.head_dim, a.head_dim) };
                norm_params(&mut out, &layer_name(&names.q_norm, i), n, wq);
                norm_params(&mut out, &layer_name(&names.k_norm, i), n, wk);
            }
            None => {}
        }
        match &l.mlp {
            MlpSpec::Gated { intermediate, bias, .. } => {
                mlp_params(&mut out, names, i, (h, *intermediate), *bias, true)
            }
            MlpSpec::GatedAct { intermediate, bias, sub_norm, .. } => {
                linear(&mut out, &layer_name(&names.gate, i), *intermediate, h, *bias);
                linear(&mut out, &layer_name(&names.up, i), *intermediate, h, *bias);
                if let Some((n, template)) = sub_norm {
                    norm_params(&mut out, &layer_name(template, i), n, *intermediate);
                }
                linear(&mut out, &layer_name(&names.down, i), h, *intermediate, *bias);
            }
            MlpSpec::Plain { intermediate, bias, .. } => {
                mlp_params(&mut out, names, i, (h, *intermediate), *bias, false);
                if spec.residual_init == ResidualInit::AttnOutAndMlpDown {
                    scale_init(&mut out, &layer_name(&names.down, i));
                }
            }
            MlpSpec::Xielu { intermediate, bias, act } => {
                linear(&mut out, &layer_name(&names.up, i), *intermediate, h, *bias);
                linear(&mut out, &layer_name(&names.down, i), h, *intermediate, *bias);
                xielu_params(&mut out, &layer_name(act, i));
            }
            MlpSpec::Moe(m) => {
                out.extend(moe_params(m, i, h));
            }
        }
        if spec.layer_init_std.is_some() {
            out[first..].iter_mut().filter(|p| p.init == Init::Normal).for_each(|p| p.init = Init::LayerNormal);
        }
    }
    if let Some(sc) = &spec.shortcut_moe {
        // LongCat-Flash: each pair of sublayers' MoE (named by the pair); its buffer starts at zero.
        for i in 0..spec.layers.len() / 2 {
            let bias = layer_name(&sc.bias, i);
            out.extend(sc.params(i, h).into_iter().map(|(name, shape)| {
                let init = if name == bias { Init::Zeros } else { Init::Normal };
                Planned { name, shape, init }
            }));
        }
    }
    norm_params(&mut out, &spec.final_norm_name, &spec.final_norm, h);
    if let Some(name) = &spec.project_out {
        linear(&mut out, name, e, h, false);
    }
    if !spec.tied_head {
        linear(&mut out, &spec.head_name, spec.vocab, e, spec.head_bias);
    } else if spec.head_bias {
        out.push(Planned { name: format!("{}.bias", spec.head_name), shape: vec![spec.vocab], init: Init::Zeros });
    }
    Ok(out)
}

/// The parameters (internal names and shapes) the decoder graph of `spec` reads: the one list
/// init, load checks and save agree on.
pub(crate) fn expected_params(spec: &ModelSpec, config: &Value) -> Result<Vec<(String, Vec<usize>)>> {
    Ok(plan(spec, config)?.into_iter().map(|p| (p.name, p.shape)).collect())
}

/// The stored (Hugging Face) names of the planned internal parameters: fused tensors of the
/// weight map under their one stored name, everything else as it is.
fn stored_names(spec: &ModelSpec, planned: &[Planned]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in planned {
        // A joined parameter is stored as its parts (StableLM's per-head norm weights).
        if let Some(j) = spec.joins.iter().find(|j| j.internal == p.name) {
            names.extend(j.parts.iter().cloned());
            continue;
        }
        let hf = spec
            .weight_map
            .iter()
            .find(|e| !e.is_legacy_norm_alias() && e.parts.iter().any(|(n, _)| *n == p.name))
            .map(|e| e.hf.clone());
        let hf = hf.unwrap_or_else(|| p.name.clone());
        if !names.contains(&hf) {
            names.push(hf);
        }
    }
    names
}

/// A new model of `config` on `g`, initialised as described above from `seed`.
pub fn init_from_config(g: &Graph<'_>, config: Value, seed: u64) -> Result<Model> {
    let spec = spec_from_config(&config)?;
    // An image-text wrapper's text model draws from its own config (transformers initialises each
    // sub-model by its config), and its vision tower and projector are drawn as transformers
    // would (`wrapper_init`), kept as buffers (never trained here) and saved with the rest.
    let text = if spec.carried.is_empty() { &config } else { &config["text_config"] };
    let std = text["initializer_range"].as_f64().or(config["initializer_range"].as_f64()).unwrap_or(0.02);
    let pad = text["pad_token_id"].as_u64().or(config["pad_token_id"].as_u64()).map(|p| p as usize);
    let wrapper = match (spec.vision, spec.carried.is_empty()) {
        (Some(tower), _) => crate::wrapper_init::plan(tower, &config, spec.hidden),
        (None, true) => Vec::new(),
        (None, false) => {
            return Err(ModelError::Unsupported(format!(
                "a new `{}` model: it carries {} but names no vision tower to draw",
                spec.model_type,
                spec.carried.join(", ")
            )))
        }
    };
    let planned = plan(&spec, &config)?;
    let count = |shape: &[usize]| shape.iter().map(|&d| d as u64).product::<u64>();
    let elements = planned.iter().map(|p| count(&p.shape)).sum();
    let frozen_bytes = 4 * wrapper.iter().map(|(_, shape, _)| count(shape)).sum::<u64>();
    crate::budget::check(g.ctx().caps(), crate::budget::Need { trainable_elements: elements, frozen_bytes })?;
    let stds = Stds::of(&spec, std);
    // q/k/v and gate/up parameters as row blocks of one storage a layer, as a load places them
    // (`crate::packed_train`).
    let found =
        planned.iter().filter(|p| !spec.is_buffer(&p.name)).map(|p| (p.name.clone(), p.shape.clone())).collect();
    let packer =
        crate::packed::Packer::plan(g, &spec, &found, &|_| true, (&Default::default(), vkformers_tensor::DType::F32))?;
    let mut rng = Normal(seed);
    let mut weights = Weights::default();
    let mut params = Vec::new();
    let mut buffers = Vec::new();
    let embed = format!("{}.weight", spec.embed_name);
    for p in &planned {
        let n: usize = p.shape.iter().product();
        let mut data = values(p, n, &mut rng, &stds);
        if let (true, Some(row)) = (p.name == embed, pad.filter(|&r| r < spec.vocab)) {
            let width = p.shape[1];
            data[row * width..(row + 1) * width].fill(0.0);
        }
        if spec.is_buffer(&p.name) {
            let t = g.constant(&data, &p.shape)?;
            weights.insert(p.name.clone(), t.clone());
            buffers.push((p.name.clone(), t));
            continue;
        }
        let t = match packer.place(g, &p.name, &data, &p.shape) {
            Some(t) => t?,
            None => g.parameter(&data, &p.shape)?,
        };
        weights.insert(p.name.clone(), t.clone());
        params.push((p.name.clone(), t));
    }
    params.sort_by(|a, b| a.0.cmp(&b.0));
    let packs = packer.finish(&weights);
    weights.set_packs(packs);
    let mut hf_names = stored_names(&spec, &planned);
    for (name, shape, draw) in wrapper {
        let data = crate::wrapper_init::values(draw, shape.iter().product(), &mut rng);
        let t = g.constant(&data, &shape)?;
        weights.insert(name.clone(), t.clone());
        hf_names.push(name.clone());
        buffers.push((name, t));
    }
    Ok(Model { spec, weights, params, buffers, hf_names, config })
}

/// The stds of the normal inits of a spec: `initializer_range`, GPT-2's residual scaling
/// (`ResidualInit`: 2 residual branches per layer) and a family's fixed layer std.
struct Stds {
    std: f64,
    scaled: f64,
    layer: f64,
}

impl Stds {
    fn of(spec: &ModelSpec, std: f64) -> Self {
        Stds {
            std,
            scaled: std / (2.0 * spec.layers.len().max(1) as f64).sqrt(),
            layer: spec.layer_init_std.unwrap_or(std),
        }
    }
}

/// The `n` starting values of planned parameter `p`.
fn values(p: &Planned, n: usize, rng: &mut Normal, s: &Stds) -> Vec<f32> {
    match p.init {
        Init::Normal => (0..n).map(|_| rng.sample(s.std)).collect(),
        Init::ScaledNormal => (0..n).map(|_| rng.sample(s.scaled)).collect(),
        Init::LayerNormal => (0..n).map(|_| rng.sample(s.layer)).collect(),
        Init::Zeros => vec![0.0; n],
        Init::Ones => vec![1.0; n],
        Init::Value(v) => vec![v; n],
        Init::Sinusoid => {
            let rows: Vec<usize> = (0..p.shape[0]).collect();
            crate::seq2seq::attention::sinusoid_rows(&rows, p.shape[1])
        }
    }
}

/// Values for `planned` parameters of `spec` as [`init_from_config`] draws them, from `seed`:
/// `(name, shape, data)` (a new task head drawn on a loaded encoder).
pub(crate) fn draw(spec: &ModelSpec, planned: &[Planned], std: f64, seed: u64) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut rng = Normal(seed);
    let stds = Stds::of(spec, std);
    planned
        .iter()
        .map(|p| {
            let n: usize = p.shape.iter().product();
            (p.name.clone(), p.shape.clone(), values(p, n, &mut rng, &stds))
        })
        .collect()
}

/// Writes `generation_config.json` into `out` from the model config's special tokens when the
/// folder has none (a model trained from a config has no source folder to copy it from).
pub fn ensure_generation_config(out: &Path, config: &Value) -> Result<()> {
    let path = out.join("generation_config.json");
    if path.exists() {
        return Ok(());
    }
    let mut gen = serde_json::Map::new();
    for key in ["bos_token_id", "eos_token_id", "pad_token_id"] {
        if !config[key].is_null() {
            gen.insert(key.into(), config[key].clone());
        }
    }
    vkformers_io::write_json_atomic(&path, &Value::Object(gen)).map_err(|e| ModelError::Weights(e.to_string()))
}
