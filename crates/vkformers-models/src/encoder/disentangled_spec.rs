//! What DeBERTa's disentangled attention reads from the spec (see `disentangled`).

use crate::spec::Norm;

/// The relative part of DeBERTa's attention (`relative_attention`).
#[derive(Clone, Debug, PartialEq)]
pub struct RelativeTable {
    /// `{table}.weight [2·span, hidden]` (`encoder.rel_embeddings`).
    pub table: String,
    /// `pos_ebd_size`: `position_buckets` when > 0, else `max_relative_positions`.
    pub span: usize,
    /// `(position_buckets, max_relative_positions)` when both are > 0: log buckets.
    pub log_buckets: Option<(usize, usize)>,
    /// `encoder.LayerNorm` on the table (`norm_rel_ebd` has `layer_norm`).
    pub norm: Option<(Norm, String)>,
    pub c2p: bool,
    pub p2c: bool,
    /// The layers' own key / query projections also project the table (`share_att_key`).
    pub share_att_key: bool,
    /// Per-layer templates of `pos_key_proj` / `pos_query_proj` (without `share_att_key`).
    pub pos_key: String,
    pub pos_query: String,
    /// `pos_key` has a bias (DeBERTa v1's `pos_proj` has none).
    pub pos_key_bias: bool,
}

/// DeBERTa's attention: the pair mask always, the relative terms with `relative_attention`.
#[derive(Clone, Debug, PartialEq)]
pub struct Disentangled {
    pub relative: Option<RelativeTable>,
    /// The key projection has a bias (DeBERTa v1: only `q_bias` and `v_bias`).
    pub key_bias: bool,
}
