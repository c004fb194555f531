//! `vkformers merge-lora`: fold a PEFT adapter into the base weights (`W + scale · B A`, as
//! PEFT's `merge_and_unload`) and write a Hugging Face model folder. Runs on the host.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use vkformers_vk::DeviceSelector;

#[derive(clap::Args)]
pub struct Args {
    /// Base model: a Hugging Face folder (config.json + safetensors) or Hub id.
    #[arg(long)]
    model: String,
    /// PEFT adapter folder (adapter_config.json + adapter_model.safetensors) or Hub id.
    #[arg(long)]
    adapter: String,
    /// Output folder for the merged model (weights in the base's dtypes, config, tokenizer).
    #[arg(long)]
    out: PathBuf,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(_selector: &DeviceSelector, args: &Args) -> anyhow::Result<ExitCode> {
    let model = vkformers_hub::resolve_model(&args.model)?;
    let adapter = vkformers_hub::resolve_model(&args.adapter)?;
    for dir in [&model, &adapter] {
        crate::outdir::check_complete(dir)?;
    }
    if let Some(input) = [&model, &adapter].into_iter().find(|d| crate::outdir::same_folder(&args.out, d)) {
        anyhow::bail!(
            "--out {} is an input folder ({}): give the merged model its own folder",
            args.out.display(),
            input.display()
        );
    }
    // Written as the final save of `train` is (all files, then one rename each), so a killed
    // merge never leaves a half-merged folder that loads.
    let out = crate::outdir::OutDir::check(&args.out, None, true)?;
    out.create()?;
    let mut n = 0;
    let merged = out.publish(|dir| {
        n = vkformers_models::lora::merge_to_folder(&model, &adapter, dir)
            .with_context(|| format!("merging {} into {}", adapter.display(), model.display()))?;
        Ok(())
    });
    if let Err(e) = merged {
        out.clean_after_failure();
        return Err(e);
    }
    if args.json {
        let v = serde_json::json!({"model": model, "adapter": adapter, "out": args.out, "adapter_tensors": n});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "merged {n} adapter tensors of {} into a copy of {} (left unchanged); the merged model is in {}",
            adapter.display(),
            model.display(),
            args.out.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
