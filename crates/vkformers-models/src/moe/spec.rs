//! The MoE block's spec data: the router kind, the shared expert, gpt-oss's biased experts, the
//! tensor names, and the block itself with its parameters, joins and size checks.

use vkformers_kernels::glu::Glu;

use crate::error::{ModelError, Result};
use crate::spec::{layer_name, JoinEntry};

/// How router scores become the chosen experts and their weights.
#[derive(Clone, Debug, PartialEq)]
pub enum Router {
    /// `p = softmax(logits)`; the k largest p; with `renormalize` divided by their sum
    /// (Mixtral, `norm_topk_prob`).
    SoftmaxTopK { renormalize: bool },
    /// The k largest logits, then a softmax over those k only (GraniteMoE's `TopKRouter`):
    /// `w = softmax(logits[ids])`; the same experts as softmax then top-k, other weights.
    TopKSoftmax,
    /// ERNIE 4.5's: `p = softmax(logits)`; the experts are the k largest `p + bias` (the stored
    /// `e_score_correction_bias [1, E]`, frozen: never trained), the weights the chosen `p`
    /// divided by their sum (transformers clamps the sum at `moe_norm_min`, 1e-12, which a sum of
    /// softmax probabilities in f32 never reaches for k ≥ 1 and E ≤ 2^20).
    SoftmaxBiasedTopK { bias: String },
    /// PhiMoE's sparsemixer in eval mode (transformers' `sparsemixer(training=False)`), top-2:
    /// expert i1 = argmax s, weight `softmax(s masked to the experts e with (s[i1] − s[e]) /
    /// max(|s[e]|, s[i1]) ≤ 2·eps)[i1]`; then i2 the argmax without i1, its weight the same with
    /// s[i2] and i1 masked too. Training uses the same (deterministic) routing and plain
    /// gradients, not transformers' Gumbel sampling and Heun-estimated router gradients.
    SparseMixer { eps: f32 },
    /// DeepSeek-V2's `group_limited_greedy`: the E experts form `groups` equal groups ranked by
    /// their largest p; experts outside the `top_groups` best groups get p = 0, then the k
    /// largest p (not renormalised).
    SoftmaxGroupLimited { groups: usize, top_groups: usize },
    /// DeepSeek-V3's `noaux_tc`: `s = sigmoid(logits)`; experts are chosen by `s + bias` (the
    /// stored `e_score_correction_bias [E]`, a buffer: never trained) within the `top_groups`
    /// best of `groups` groups, a group ranked by the sum of its two best `s + bias`; the
    /// weights are the chosen `s` (without the bias), divided by their sum with `renormalize`.
    SigmoidGroupLimited { groups: usize, top_groups: usize, renormalize: bool, bias: Option<String> },
    /// Llama 4's: the k largest logits choose; `sigmoid(logit)` of each chosen expert scales that
    /// expert's *input* (`y = sum_j expert_j(sigmoid(l_j) · x)`), not its output.
    SigmoidTopKInput,
}

impl Router {
    /// The stored name (with `{i}`) of the router's non-trained correction bias, if any.
    pub fn buffer(&self) -> Option<&str> {
        match self {
            Router::SigmoidGroupLimited { bias, .. } => bias.as_deref(),
            Router::SoftmaxBiasedTopK { bias } => Some(bias),
            _ => None,
        }
    }

    /// The shape of the buffer of [`Router::buffer`] for `e` experts as stored.
    pub fn buffer_shape(&self, e: usize) -> Vec<usize> {
        match self {
            Router::SoftmaxBiasedTopK { .. } => vec![1, e],
            _ => vec![e],
        }
    }
}

/// A dense expert every token passes through, added to the routed output; with `gate`,
/// scaled by `sigmoid(x · w_gate)` (`w_gate [1, H]`, Qwen2-MoE's `shared_expert_gate`).
#[derive(Clone, Debug, PartialEq)]
pub struct SharedExpert {
    pub intermediate: usize,
    /// Stored names (with `{i}`, without `.weight`) of the gate, up and down projections; without
    /// `up_proj`, `gate_proj` is one fused `[2S, H]` projection, gate rows first (GraniteMoE's
    /// `shared_mlp.input_linear`, chunked in two after the product).
    pub gate_proj: String,
    pub up_proj: Option<String>,
    pub down_proj: String,
    /// The sigmoid gate's stored name, if any.
    pub gate: Option<String>,
}

/// gpt-oss's experts: the router has a bias `[E]`; the experts are stored in-out
/// (`gate_up [E, H, 2I]` with gate and up in alternating columns, `down [E, I, H]`), each
/// product adds its expert's bias (`gate_up_bias [E, 2I]`, `down_bias [E, H]`), and the
/// activation is the clamped SwiGLU. Names with `{i}`, full tensor names.
#[derive(Clone, Debug, PartialEq)]
pub struct BiasedExperts {
    pub router_bias: String,
    pub gate_up_bias: String,
    pub down_bias: String,
    pub act: vkformers_kernels::moe::clamped_swiglu::ClampedSwiGlu,
}

/// Names of one family's MoE tensors; `{i}` is the layer, `{e}` the expert.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeNames {
    /// The router `[E, H]` (a full tensor name).
    pub router: String,
    /// The internal packed tensors (`gate_up [E·2I, H]`, `down [E·H, I]`). With `up`, `gate_up`
    /// holds the gate projections alone (`[E·I, H]`) and `up` the up projections (DBRX's `w1`,
    /// `v1`).
    pub gate_up: String,
    pub up: Option<String>,
    pub down: String,
    /// Per-expert stored tensors of the gate, up and down projections.
    pub expert_gate: String,
    pub expert_up: String,
    pub expert_down: String,
}

/// A routed MoE feed-forward block.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeSpec {
    pub experts: usize,
    pub top_k: usize,
    /// Each expert's intermediate size I.
    pub intermediate: usize,
    pub glu: Glu,
    pub router: Router,
    pub shared: Option<SharedExpert>,
    /// The routing weights are multiplied by this after any renormalisation (DeepSeek's
    /// `routed_scaling_factor`); 1 otherwise.
    pub routed_scale: f32,
    /// `router_aux_loss_coef` when the config asks for router logits (`output_router_logits`),
    /// which is when transformers adds the load-balancing loss to a loss with labels.
    pub aux_loss_coef: Option<f32>,
    pub names: MoeNames,
    /// `down` is `[E·I, H]`: each expert's down projection stored transposed (DBRX's `w2`).
    pub down_transposed: bool,
    /// gpt-oss's biased, clamped experts (in-out storage, see [`BiasedExperts`]); `glu` unused.
    pub biased: Option<BiasedExperts>,
    /// The checkpoint holds transformers 5's in-memory layout (`mlp.gate`, packed
    /// `experts.gate_up_proj [E, 2I, H]` and `experts.down_proj [E, H, I]`) instead of per-expert
    /// tensors: the parameters are those 3-D tensors, loaded and saved under their own names.
    pub packed: bool,
    /// A bias `[H]` added to the routed output (before any shared expert), stored under this
    /// full name with `{i}` (JetMoE's `mlp.bias`); `None` for most.
    pub out_bias: Option<String>,
    /// The packed experts are stored in-out without biases (Llama 4's `gate_up_proj [E, H, 2I]`,
    /// gate columns first, and `down_proj [E, I, H]`); `packed` must be set.
    pub in_out: bool,
}

fn expert_name(template: &str, i: usize, e: usize) -> String {
    layer_name(template, i).replace("{e}", &e.to_string())
}

impl MoeSpec {
    /// The internal parameters (names, shapes) of layer `i` with hidden size `h`.
    pub fn params(&self, i: usize, h: usize) -> Vec<(String, Vec<usize>)> {
        let (e, inter) = (self.experts, self.intermediate);
        let n = &self.names;
        let (mut gate_up, mut down) = if self.packed {
            (vec![e, 2 * inter, h], vec![e, h, inter])
        } else {
            (vec![e * 2 * inter, h], vec![e * h, inter])
        };
        if n.up.is_some() {
            gate_up = vec![e * inter, h];
        }
        if self.down_transposed {
            down = vec![e * inter, h];
        }
        let mut out = vec![
            (layer_name(&n.router, i), vec![e, h]),
            (layer_name(&n.gate_up, i), gate_up.clone()),
            (layer_name(&n.down, i), down),
        ];
        if let Some(up) = &n.up {
            out.push((layer_name(up, i), gate_up));
        }
        if self.in_out {
            out[1].1 = vec![e, h, 2 * inter];
            out[2].1 = vec![e, inter, h];
        }
        if let Some(b) = &self.biased {
            // In-out storage: [E, H, 2I] and [E, I, H].
            out[1].1 = vec![e, h, 2 * inter];
            out[2].1 = vec![e, inter, h];
            out.push((layer_name(&b.router_bias, i), vec![e]));
            out.push((layer_name(&b.gate_up_bias, i), vec![e, 2 * inter]));
            out.push((layer_name(&b.down_bias, i), vec![e, h]));
        }
        if let Some(b) = self.router.buffer() {
            out.push((layer_name(b, i), self.router.buffer_shape(e)));
        }
        if let Some(b) = &self.out_bias {
            out.push((layer_name(b, i), vec![h]));
        }
        if let Some(s) = &self.shared {
            let w = |t: &str| format!("{}.weight", layer_name(t, i));
            match &s.up_proj {
                Some(up) => {
                    out.push((w(&s.gate_proj), vec![s.intermediate, h]));
                    out.push((w(up), vec![s.intermediate, h]));
                }
                None => out.push((w(&s.gate_proj), vec![2 * s.intermediate, h])),
            }
            out.push((w(&s.down_proj), vec![h, s.intermediate]));
            if let Some(g) = &s.gate {
                out.push((w(g), vec![1, h]));
            }
        }
        out
    }

    /// The joins that stack layer `i`'s per-expert stored tensors into the packed parameters.
    pub fn joins(&self, i: usize) -> Vec<JoinEntry> {
        let n = &self.names;
        let gate_up = (0..self.experts)
            .flat_map(|e| [expert_name(&n.expert_gate, i, e), expert_name(&n.expert_up, i, e)])
            .collect();
        let down = (0..self.experts).map(|e| expert_name(&n.expert_down, i, e)).collect();
        vec![
            JoinEntry { internal: layer_name(&n.gate_up, i), parts: gate_up },
            JoinEntry { internal: layer_name(&n.down, i), parts: down },
        ]
    }

    /// Sizes the graph divides by or allocates from.
    pub fn check(&self) -> Result<()> {
        let grouped = match self.router {
            Router::SoftmaxGroupLimited { groups, top_groups } => Some((groups, top_groups, 1)),
            Router::SigmoidGroupLimited { groups, top_groups, .. } => Some((groups, top_groups, 2)),
            Router::SoftmaxTopK { .. }
            | Router::TopKSoftmax
            | Router::SoftmaxBiasedTopK { .. }
            | Router::SparseMixer { .. }
            | Router::SigmoidTopKInput => None,
        };
        if let Some((g, k, per_group)) = grouped {
            // The top-k must fit in the kept groups (transformers would pick masked experts).
            let fits = g > 0 && self.top_k <= k * (self.experts / g);
            if g == 0 || k == 0 || k > g || !self.experts.is_multiple_of(g) || self.experts / g < per_group || !fits {
                return Err(ModelError::Config(format!(
                    "group-limited routing of {} experts in n_group {g} groups, the best topk_group {k}, choosing \
                     {}: n_group must divide the experts (at least {per_group} a group), topk_group be in \
                     1..=n_group and num_experts_per_tok at most the experts of topk_group groups",
                    self.experts, self.top_k
                )));
            }
        }
        if matches!(self.router, Router::SparseMixer { .. }) && (self.top_k != 2 || self.experts < 2) {
            return Err(ModelError::Config(format!(
                "the sparsemixer router chooses 2 experts (num_experts_per_tok {} of {})",
                self.top_k, self.experts
            )));
        }
        if self.experts == 0 || self.top_k == 0 || self.top_k > self.experts || self.intermediate == 0 {
            return Err(ModelError::Config(format!(
                "a mixture of {} experts of size {} choosing {} per token: check num_experts, \
                 num_experts_per_tok and the expert intermediate size",
                self.experts, self.intermediate, self.top_k
            )));
        }
        Ok(())
    }
}

/// JetMoE's mixture of attention heads (MoA) in one layer: a router `[E, H]` chooses `top_k` of
/// `experts` query/output projection pairs per token (top-k logits, then a softmax over those k);
/// expert e projects the token to `kv_heads` query heads (`input [E, kv·D, H]`) and its
/// attention output back (`output [E, H, kv·D]`); every chosen expert's heads attend to the one
/// shared K/V (`AttnSpec::heads` = `top_k · kv_heads`). The weighted outputs are summed and
/// `bias [H]` added. Names are full tensor names with `{i}`.
#[derive(Clone, Debug, PartialEq)]
pub struct MoaSpec {
    pub experts: usize,
    pub top_k: usize,
    pub router: String,
    pub input: String,
    pub output: String,
    pub bias: String,
}

impl MoaSpec {
    /// The internal parameters (names, shapes) of layer `i` with hidden size `h` and `kv_width`
    /// = kv heads · head_dim (K and V are the layer's usual `k`/`v` projections, not listed).
    pub fn params(&self, i: usize, h: usize, kv_width: usize) -> Vec<(String, Vec<usize>)> {
        let e = self.experts;
        vec![
            (layer_name(&self.router, i), vec![e, h]),
            (layer_name(&self.input, i), vec![e, kv_width, h]),
            (layer_name(&self.output, i), vec![e, h, kv_width]),
            (layer_name(&self.bias, i), vec![h]),
        ]
    }
}
