//! `vkformers generate`: KV-cached text generation from prompts.

use std::process::ExitCode;

use vkformers_vk::DeviceSelector;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_selector: &DeviceSelector, _args: &Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`vkformers generate` is not built yet")
}
