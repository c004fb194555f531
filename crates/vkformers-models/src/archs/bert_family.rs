//! The BERT-shaped encoders by `model_type`: which prefix their modules sit under, which head
//! layout and position ids they use, their config class's `pad_token_id` and their norm layout.

use serde_json::Value;

use super::bert::spec;
use super::bert_heads::Head;
use super::bert_layout::Layout;
use crate::error::Result;
use crate::spec::ModelSpec;

pub fn bert(cfg: &Value) -> Result<ModelSpec> {
    spec("bert", "bert", Head::Bert, false, 0, Layout::Post, cfg)
}

pub fn roberta(cfg: &Value) -> Result<ModelSpec> {
    spec("roberta", "roberta", Head::Roberta, true, 1, Layout::Post, cfg)
}

/// RoBERTa's modules (XLM-R's vocabulary is larger; the graph is the same).
pub fn xlm_roberta(cfg: &Value) -> Result<ModelSpec> {
    spec("xlm-roberta", "roberta", Head::Roberta, true, 1, Layout::Post, cfg)
}

pub fn camembert(cfg: &Value) -> Result<ModelSpec> {
    spec("camembert", "roberta", Head::Roberta, true, 1, Layout::Post, cfg)
}

pub fn data2vec_text(cfg: &Value) -> Result<ModelSpec> {
    spec("data2vec-text", "data2vec_text", Head::Roberta, true, 1, Layout::Post, cfg)
}

/// BERT's modules under `ernie.` (without `use_task_id`).
pub fn ernie(cfg: &Value) -> Result<ModelSpec> {
    spec("ernie", "ernie", Head::Bert, false, 0, Layout::Post, cfg)
}

/// RoBERTa with pre-LN layers and a final `roberta_prelayernorm.LayerNorm`.
pub fn roberta_prelayernorm(cfg: &Value) -> Result<ModelSpec> {
    spec("roberta-prelayernorm", "roberta_prelayernorm", Head::Roberta, true, 1, Layout::PreLn, cfg)
}

/// RoBERTa's modules with pre-LN layers and no norm on the embeddings.
pub fn xlm_roberta_xl(cfg: &Value) -> Result<ModelSpec> {
    spec("xlm-roberta-xl", "roberta", Head::Roberta, true, 1, Layout::XlmRobertaXl, cfg)
}

/// BERT's modules with pre-LN layers (`ln`), a final `encoder.ln`, no norm on the embeddings.
pub fn megatron_bert(cfg: &Value) -> Result<ModelSpec> {
    spec("megatron-bert", "bert", Head::Bert, false, 0, Layout::Megatron, cfg)
}
