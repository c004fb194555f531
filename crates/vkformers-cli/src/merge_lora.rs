//! `vkformers merge-lora`: fold a PEFT adapter into the base weights.

use std::process::ExitCode;

use vkformers_vk::DeviceSelector;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_selector: &DeviceSelector, _args: &Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`vkformers merge-lora` is not built yet")
}
