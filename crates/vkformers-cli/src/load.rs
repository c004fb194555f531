//! Loading the model a command runs: a model folder, optionally with a PEFT LoRA adapter kept
//! unmerged (`--adapter`), shared by `generate`, `chat` and `eval`.

use std::path::Path;

use anyhow::Context as _;
use vkformers_models::model::Model;
use vkformers_tensor::{DType, Graph};

/// `--adapter DIR|org/name`: a PEFT LoRA adapter (adapter_config.json +
/// adapter_model.safetensors) applied on top of the model without merging.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct AdapterArgs {
    /// A PEFT LoRA adapter folder (or Hub id) applied on top of the model, unmerged.
    #[arg(long)]
    pub adapter: Option<String>,
}

/// The model in `dir` for inference with its projection weights in `dtype` on the device, and
/// the adapter of `args` attached (unmerged, f32) when one is given.
pub fn inference_model(g: &Graph<'_>, dir: &Path, args: &AdapterArgs, dtype: DType) -> anyhow::Result<Model> {
    crate::outdir::check_complete(dir)?;
    if dtype == DType::F32 && args.adapter.is_some() {
        return model_with_adapter(g, dir, args);
    }
    // Frozen weights: an inference load packs q/k/v and gate/up (see vkformers_models::packed).
    let Some(adapter) = &args.adapter else {
        return Model::load_for_inference(g, dir, dtype)
            .with_context(|| format!("loading the model in {}", dir.display()));
    };
    let adapter_dir = vkformers_hub::resolve_adapter(adapter)?;
    crate::outdir::check_complete(&adapter_dir)?;
    let (model, _lora) = vkformers_models::lora::load_with_adapter_as(g, dir, &adapter_dir, dtype)
        .with_context(|| format!("loading {} with the adapter in {}", dir.display(), adapter_dir.display()))?;
    Ok(model)
}

/// Generation on 16-bit weights runs attention and keeps the KV cache in the weights' type, as
/// `transformers` does for a model loaded in bf16/f16: prefill attention on the tensor-core
/// flash-attention kernel, half the cache bytes read per decode step. Norms, softmax statistics
/// and logits stay f32.
pub fn generate_in_weight_type(g: &Graph<'_>, model: &Model) {
    g.set_autocast(Some(model.weight_dtype()));
}

/// The model in `dir` on `g`, with the adapter of `args` attached when one is given.
pub fn model_with_adapter(g: &Graph<'_>, dir: &Path, args: &AdapterArgs) -> anyhow::Result<Model> {
    let Some(adapter) = &args.adapter else {
        return Model::load(g, dir).with_context(|| format!("loading the model in {}", dir.display()));
    };
    let adapter_dir = vkformers_hub::resolve_adapter(adapter)?;
    crate::outdir::check_complete(&adapter_dir)?;
    // The LoRA weights live on in the model's weights; the returned handles are for training.
    let (model, _lora) = vkformers_models::lora::load_with_adapter(g, dir, &adapter_dir)
        .with_context(|| format!("loading {} with the adapter in {}", dir.display(), adapter_dir.display()))?;
    Ok(model)
}
