//! `BertConfig`'s defaults that the other encoder config classes (ELECTRA, RoFormer, DistilBERT,
//! MPNet, Nomic BERT, DeBERTa) repeat, for serde's `#[serde(default = "...")]`. A family whose
//! class has another default keeps its own function beside its config.

pub fn vocab_size() -> usize {
    30522
}

pub fn hidden_act() -> String {
    "gelu".into()
}

pub fn max_position_embeddings() -> usize {
    512
}

pub fn type_vocab_size() -> usize {
    2
}

pub fn layer_norm_eps() -> f64 {
    1e-12
}

/// `tie_word_embeddings` and the other switches on by default.
pub fn yes() -> bool {
    true
}
