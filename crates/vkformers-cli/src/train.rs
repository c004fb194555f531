//! `vkformers train`: full-parameter training or pre-training from a config.

use std::process::ExitCode;

use vkformers_vk::DeviceSelector;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_selector: &DeviceSelector, _args: &Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`vkformers train` is not built yet")
}
