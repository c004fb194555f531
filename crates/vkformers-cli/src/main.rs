//! `vkformers`: train, fine-tune and run Hugging Face Transformer models on any Vulkan GPU.

mod architectures;
mod bench;
mod devices;
mod doctor;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "vkformers",
    version,
    about = "Train, fine-tune and run Hugging Face Transformer models on any Vulkan GPU"
)]
struct Cli {
    /// Device to use: an index from `vkformers devices`, or part of its name. Default: the
    /// first discrete GPU, else integrated, else the CPU driver.
    #[arg(long, global = true, default_value = "auto")]
    device: vkformers_vk::DeviceSelector,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List Vulkan devices and their capabilities.
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check the Vulkan setup, run a kernel, and say how to fix what is missing.
    Doctor {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Every supported model_type, its family, and which parity checks pass (run now).
    Architectures(architectures::Args),
    /// Benchmarks of single kernels.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Time one matrix product and report TFLOP/s.
    Gemm(bench::GemmArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Devices { json } => devices::run(json),
        Command::Doctor { json } => doctor::run(&cli.device, json),
        Command::Bench(BenchCommand::Gemm(args)) => bench::gemm(&cli.device, &args),
        Command::Architectures(args) => architectures::run(&cli.device, &args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
