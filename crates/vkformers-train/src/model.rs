//! What the trainer trains: any model that turns a batch into logits, and the list of
//! parameters it may update. A full model trains all its parameters; a LoRA wrapper would
//! hand over only its adapter matrices and a forward that adds them.

use vkformers_models::decoder::{forward, forward_with_aux};
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

    /// The logits and, for a mixture of experts whose config asks for router logits
    /// (`output_router_logits`), the load-balancing loss times `router_aux_loss_coef` `[1]`,
    /// which transformers adds to the language-model loss.
    fn logits_and_aux(&self, g: &Graph<'_>, batch: &TokenBatch) -> Result<(Tensor, Option<Tensor>)> {
        Ok((self.logits(g, batch)?, None))
    }
}

impl LanguageModel for Model {
    fn logits(&self, g: &Graph<'_>, batch: &TokenBatch) -> Result<Tensor> {
        Ok(forward(g, &self.spec, &self.weights, &batch.as_model_batch())?)
    }

    fn logits_and_aux(&self, g: &Graph<'_>, batch: &TokenBatch) -> Result<(Tensor, Option<Tensor>)> {
        let (logits, aux) = forward_with_aux(g, &self.spec, &self.weights, &batch.as_model_batch())?;
        let coef = vkformers_models::moe::aux_loss_coef(&self.spec);
        let scaled = match (aux, coef) {
            (Some(aux), Some(c)) => Some(vkformers_tensor::ops::broadcast::scale(g, &aux, c)?),
            _ => None,
        };
        Ok((logits, scaled))
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
