//! Where the BERT family's modules and layer norms sit: BERT's names under
//! `{prefix}.encoder.layer.{i}`, and the post-LN / pre-LN layouts of its descendants.

use crate::spec::LayerNames;

/// BERT's module names under `{p}.encoder.layer.{i}`: the norm after attention sits in the
/// `attn_norm` slot and the one after the MLP in `mlp_norm` (applied post-add).
pub(super) fn names(p: &str) -> LayerNames {
    let parts = [
        "attention.output.LayerNorm",
        "attention.self.query",
        "attention.self.key",
        "attention.self.value",
        "attention.output.dense",
        "output.LayerNorm",
        "intermediate.dense",
        "output.dense",
    ];
    LayerNames::plain(&under(p, "encoder.layer.{i}"), parts)
}

/// Where a family's layer norms sit and what they are called.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// BERT: after each residual add; a LayerNorm on the embeddings.
    Post,
    /// RoBERTa-PreLayerNorm: before attention (`attention.LayerNorm`) and the MLP
    /// (`intermediate.LayerNorm`), a final `LayerNorm`; the embeddings keep theirs.
    PreLn,
    /// XLM-RoBERTa-XL: pre-LN (`attention.self_attn_layer_norm`, the layer's `LayerNorm`), a
    /// final `encoder.LayerNorm`, no norm on the embeddings.
    XlmRobertaXl,
    /// Megatron-BERT: pre-LN (`attention.ln`, the layer's `ln`), a final `encoder.ln`, no norm
    /// on the embeddings.
    Megatron,
}

impl Layout {
    pub(super) fn names(self, p: &str) -> LayerNames {
        let l = under(p, "encoder.layer.{i}");
        let (attn_norm, mlp_norm) = match self {
            Layout::Post => return names(p),
            Layout::PreLn => (format!("{l}.attention.LayerNorm"), format!("{l}.intermediate.LayerNorm")),
            Layout::XlmRobertaXl => (format!("{l}.attention.self_attn_layer_norm"), format!("{l}.LayerNorm")),
            Layout::Megatron => (format!("{l}.attention.ln"), format!("{l}.ln")),
        };
        LayerNames { attn_norm, mlp_norm, ..names(p) }
    }

    /// The norm after the last layer (pre-LN layouts).
    pub(super) fn final_norm(self, p: &str) -> Option<String> {
        match self {
            Layout::Post => None,
            Layout::PreLn => Some(under(p, "LayerNorm")),
            Layout::XlmRobertaXl => Some(under(p, "encoder.LayerNorm")),
            Layout::Megatron => Some(under(p, "encoder.ln")),
        }
    }

    pub(super) fn embedding_norm(self) -> bool {
        matches!(self, Layout::Post | Layout::PreLn)
    }
}

/// `{prefix}.{name}`, or `name` under no prefix (a bare model's tensors).
pub(super) fn under(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.into()
    } else {
        format!("{prefix}.{name}")
    }
}
