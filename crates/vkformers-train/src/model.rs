//! What the trainer trains: any model that turns a batch into logits, and the list of
//! parameters it may update. A full model trains all its parameters; a LoRA wrapper would
//! hand over only its adapter matrices and a forward that adds them.

use vkformers_models::decoder::forward;
use vkformers_models::model::Model;
use vkformers_tensor::{Graph, Tensor};

use crate::batching::TokenBatch;
use crate::decay::decays;
use crate::error::Result;

/// A causal language model for the trainer: logits `[B·T, V]` of a right-padded batch. With
/// gradients on, the graph's tape records the forward so `Graph::backward` reaches the
/// trainable parameters.
pub trait LanguageModel {
    fn logits(&self, g: &Graph<'_>, batch: &TokenBatch) -> Result<Tensor>;
}

impl LanguageModel for Model {
    fn logits(&self, g: &Graph<'_>, batch: &TokenBatch) -> Result<Tensor> {
        Ok(forward(g, &self.spec, &self.weights, &batch.as_model_batch())?)
    }
}

/// A parameter the trainer updates: a stable name (the key in checkpoints), the device
/// tensor (a graph parameter), and whether AdamW's weight decay applies to it.
#[derive(Clone, Debug)]
pub struct TrainableParam {
    pub name: String,
    pub tensor: Tensor,
    pub decay: bool,
}

/// Every parameter of `model`, with weight decay as the Hugging Face Trainer assigns it.
pub fn full_model_params(model: &Model) -> Vec<TrainableParam> {
    model
        .params
        .iter()
        .map(|(name, t)| TrainableParam { name: name.clone(), tensor: t.clone(), decay: decays(&model.spec, name) })
        .collect()
}
