//! `vkformers`: train, fine-tune and run Hugging Face Transformer models on any Vulkan GPU.

mod architectures;
mod bench;
mod bench_attention;
mod bench_decode;
mod bench_decode_latent;
mod bench_gemv;
mod bench_grouped;
mod bench_peak;
mod bench_shapes;
mod chat;
mod classify;
mod classify_tokens;
mod data_args;
mod devices;
mod dist;
mod doctor;
mod embed;
mod embed_profile;
mod embed_queue;
mod encoder_task;
mod eval;
mod eval_progress;
mod finetune;
mod generate;
mod load;
mod merge_lora;
mod outdir;
mod precision;
mod ranges;
mod seq2seq_data;
mod serve;
mod serve_embed;
mod st_modules;
mod train;

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

// Negative numbers reach the range checks of `ranges` (`--top-k -1` gets "must be 0 or more",
// not clap's "unexpected argument '-1'"), on every command that takes numbers. Clap does not
// see `-1e-4` as a number, so the flags usually written that way (--lr, --eps, ...) also
// take values starting with a hyphen.
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
    /// Full-parameter training, or pre-training from a config.
    #[command(allow_negative_numbers = true)]
    Train(train::Args),
    /// LoRA fine-tuning; writes a PEFT adapter.
    #[command(allow_negative_numbers = true)]
    Finetune(finetune::Args),
    /// Loss and perplexity of a model on a dataset (loss, accuracy and F1 for classifiers).
    #[command(allow_negative_numbers = true)]
    Eval(eval::Args),
    /// Generate text from prompts with a KV cache on the device.
    #[command(allow_negative_numbers = true)]
    Generate(generate::Args),
    /// Chat in the terminal with the model's chat template.
    #[command(allow_negative_numbers = true)]
    Chat(chat::Args),
    /// An OpenAI-compatible HTTP server with continuous batching.
    Serve(serve::Args),
    /// Fold a PEFT adapter into the base weights and write a merged model folder.
    MergeLora(merge_lora::Args),
    /// Sentence embeddings as sentence-transformers computes them (modules.json, pooling,
    /// Normalize).
    Embed(embed::Args),
    /// Labels and scores of a sequence classifier.
    Classify(classify::Args),
    /// Benchmarks of single kernels.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Time one matrix product and report TFLOP/s.
    Gemm(bench::GemmArgs),
    /// Every matrix product of one Llama training step through the training GEMM entry point.
    TrainGemms(bench_shapes::TrainGemmArgs),
    /// Fused attention forward and backward on one shape, ms and TFLOP/s per kernel.
    Attention(bench_attention::AttentionArgs),
    /// The tensor-core multiply-add ceiling (operands loaded once), per cooperative-matrix shape.
    MmaPeak(bench_peak::PeakArgs),
    /// Device time per dispatch in a chain of small dependent dispatches (the decode floor).
    Dispatch(bench_peak::DispatchArgs),
    /// Paged decode attention alone on one shape, µs per call for each split count.
    Decode(bench_decode::DecodeBenchArgs),
    /// The decode GEMV alone at a decode step's shapes, µs per call and GB/s of weights.
    Gemv(bench_gemv::GemvBenchArgs),
    /// Multi-head latent attention's wide latent decode alone on one shape, µs per call.
    DecodeLatent(bench_decode_latent::LatentBenchArgs),
    /// The grouped expert GEMMs of one MoE projection (forward, dx, dW), TFLOP/s each.
    GroupedGemm(bench_grouped::GroupedArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if prints_only(&cli.command) {
        end_quietly_on_closed_pipe();
    }
    if let Err(e) = dist::only_train_runs_on_ranks(matches!(cli.command, Command::Train(_) | Command::Finetune(_))) {
        eprintln!("error: {e:#}");
        return std::process::ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Devices { json } => devices::run(json),
        Command::Doctor { json } => doctor::run(&cli.device, json),
        Command::Bench(BenchCommand::Gemm(args)) => bench::gemm(&cli.device, &args),
        Command::Bench(BenchCommand::TrainGemms(args)) => bench_shapes::train_gemms(&cli.device, &args),
        Command::Bench(BenchCommand::Attention(args)) => bench_attention::attention(&cli.device, &args),
        Command::Bench(BenchCommand::MmaPeak(args)) => bench_peak::mma_peak(&cli.device, &args),
        Command::Bench(BenchCommand::Dispatch(args)) => bench_peak::dispatch_latency(&cli.device, &args),
        Command::Bench(BenchCommand::Decode(args)) => bench_decode::decode_attention(&cli.device, &args),
        Command::Bench(BenchCommand::Gemv(args)) => bench_gemv::gemv_bench(&cli.device, &args),
        Command::Bench(BenchCommand::DecodeLatent(args)) => bench_decode_latent::decode_latent(&cli.device, &args),
        Command::Bench(BenchCommand::GroupedGemm(args)) => bench_grouped::grouped_gemm(&cli.device, &args),
        Command::Architectures(args) => architectures::run(&cli.device, &args),
        Command::Train(args) => train::run(&cli.device, &args),
        Command::Finetune(args) => finetune::run(&cli.device, &args),
        Command::Eval(args) => eval::run(&cli.device, &args),
        Command::Generate(args) => generate::run(&cli.device, &args),
        Command::Chat(args) => chat::run(&cli.device, &args),
        Command::Serve(args) => serve::run(&cli.device, &args),
        Command::MergeLora(args) => merge_lora::run(&cli.device, &args),
        Command::Embed(args) => embed::run(&cli.device, &args),
        Command::Classify(args) => classify::run(&cli.device, &args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Commands whose only output is what they print: `vkformers eval | head` should end as `ls |
/// head` does, not panic on the closed pipe. The server, chat and training keep Rust's default
/// (SIGPIPE ignored, a write error) since they write to sockets, workers and checkpoints.
fn prints_only(command: &Command) -> bool {
    matches!(
        command,
        Command::Devices { .. }
            | Command::Doctor { .. }
            | Command::Bench(_)
            | Command::Architectures(_)
            | Command::Eval(_)
            | Command::Generate(_)
            | Command::Embed(_)
            | Command::Classify(_)
    )
}

/// Restores the default SIGPIPE action, so a write to a pipe whose reader has gone ends the
/// process (exit by signal, as Unix tools do) instead of `println!` panicking.
fn end_quietly_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: called once at start-up before any thread is spawned; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
