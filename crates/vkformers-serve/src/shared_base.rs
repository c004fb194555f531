//! Several LoRA adapters over one base model on the device: the base is uploaded once and every
//! served model holds handles to the same tensors (a `Tensor` clone shares its buffer); each
//! adapter adds only its A/B matrices (and its own `modules_to_save` copies). The engine thread
//! runs one engine per served model, so the rows of a forward are grouped by adapter, and a
//! forward's LoRA terms are its adapter's.

use std::collections::HashSet;
use std::path::Path;

use vkformers_models::decoder::Weights;
use vkformers_models::lora::{attach, Adapter};
use vkformers_models::model::Model;
use vkformers_tensor::{Graph, Tensor};

/// A model holding the same tensors as `base` (no upload; `base` must carry no LoRA terms).
pub fn share(base: &Model) -> Model {
    let mut weights = Weights::default();
    base.weights.iter().for_each(|(n, t)| weights.insert(n.clone(), t.clone()));
    // The base's packed q/k/v and gate/up hold these same tensors: an adapter that puts no LoRA
    // term on a group still runs it as one product.
    weights.set_packs(base.weights.packs().clone());
    Model {
        spec: base.spec.clone(),
        weights,
        params: base.params.clone(),
        buffers: base.buffers.clone(),
        hf_names: base.hf_names.clone(),
        config: base.config.clone(),
    }
}

/// `base`'s tensors with the adapter in `dir` attached (its terms in the forward, as
/// `lora::load_with_adapter`); also returns the adapter's own tensors (for the memory count).
pub fn with_adapter(g: &Graph<'_>, base: &Model, dir: &Path) -> Result<(Model, Vec<Tensor>), String> {
    let what = |e: vkformers_models::ModelError| format!("the adapter in {}: {e}", dir.display());
    let adapter = Adapter::load(dir).map_err(what)?;
    let mut model = share(base);
    let params = attach(g, &mut model, &adapter, 0).map_err(what)?;
    let own = params.named_params().into_iter().map(|(_, t, _)| t).collect();
    Ok((model, own))
}

/// Bytes of the distinct tensors of `models` and `extra` (a tensor shared by several counted
/// once): what the served models' weights hold on the device.
pub fn distinct_bytes<'a>(models: impl IntoIterator<Item = &'a Model>, extra: &[Tensor]) -> u64 {
    let mut seen = HashSet::new();
    let tensors = models.into_iter().flat_map(|m| m.weights.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>());
    tensors.chain(extra.iter().cloned()).filter(|t| seen.insert(t.id())).map(|t| t.bytes()).sum()
}
