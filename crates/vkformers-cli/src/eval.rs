//! `vkformers eval`: loss and perplexity of a model on a dataset.

use std::process::ExitCode;

use vkformers_vk::DeviceSelector;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_selector: &DeviceSelector, _args: &Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`vkformers eval` is not built yet")
}
