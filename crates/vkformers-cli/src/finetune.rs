//! `vkformers finetune`: LoRA fine-tuning that writes a PEFT adapter.

use std::process::ExitCode;

use vkformers_vk::DeviceSelector;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_selector: &DeviceSelector, _args: &Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`vkformers finetune` is not built yet")
}
