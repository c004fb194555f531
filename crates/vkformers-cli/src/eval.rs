//! `vkformers eval`: the token-weighted mean loss of a model on a dataset, its perplexity, the
//! number of predicted tokens, and each row's loss.

use std::process::ExitCode;

use vkformers_io::HfTokenizer;
use vkformers_tensor::Graph;
use vkformers_train::sequences;
use vkformers_vk::{Context, DeviceSelector};

#[derive(clap::Args)]
pub struct Args {
    /// Model folder (or Hub id).
    #[arg(long)]
    model: String,
    #[command(flatten)]
    adapter: crate::load::AdapterArgs,
    /// Data: a JSONL file or folder (or Hub dataset id).
    #[arg(long)]
    data: String,
    #[command(flatten)]
    hub_data: crate::data_args::HubDataArgs,
    #[command(flatten)]
    langs: crate::seq2seq_data::LangArgs,
    /// Print JSON (loss, perplexity, tokens, rows) instead of text.
    #[arg(long)]
    json: bool,
    /// Rows per forward.
    #[arg(long, default_value_t = 8, value_parser = crate::ranges::at_least_one)]
    batch_size: usize,
    /// Rows are cut to this many tokens (default: the model's max_position_embeddings).
    #[arg(long, value_parser = crate::ranges::at_least_one)]
    seq_len: Option<usize>,
    /// Count the prompt part of instruction/Q&A/chat rows in the loss too.
    #[arg(long)]
    train_on_prompt: bool,
    #[command(flatten)]
    eos: crate::train::EosArgs,
    /// Masked-LM models: mask this fraction of the tokens of text rows (seeded by --seed; rows
    /// with `input_ids` + `labels` are used as given).
    #[arg(long, value_parser = crate::ranges::unit_open)]
    mlm_probability: Option<f64>,
    /// Seed of the masked-LM masking.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[command(flatten)]
    precision: crate::precision::PrecisionArgs,
    #[command(flatten)]
    dtype: crate::precision::DtypeArgs,
    #[command(flatten)]
    profile: crate::precision::ProfileArgs,
}

pub fn run(selector: &DeviceSelector, args: &Args) -> anyhow::Result<ExitCode> {
    let ctx = Context::new(selector)?;
    let g = Graph::new(&ctx);
    let dir = vkformers_hub::resolve_model(&args.model)?;
    let model = crate::load::inference_model(&g, &dir, &args.adapter, args.dtype.resolve(&dir)?)?;
    let tok = dir.join("tokenizer.json").exists().then(|| HfTokenizer::from_dir(&dir)).transpose()?;
    // No EOS by default: the loss is then transformers' `model(input_ids, labels=input_ids)`.
    let add_eos = args.eos.resolve(false);
    let read = vkformers_data::ReadOptions {
        train_on_prompt: args.train_on_prompt,
        add_eos,
        label2id: crate::encoder_task::label2id(&model),
        ..Default::default()
    };
    crate::seq2seq_data::check_langs(&model, &args.langs)?;
    let mut data = match crate::seq2seq_data::is_seq2seq(&model) {
        true => crate::seq2seq_data::read(&args.data, &args.hub_data.query(), tok.as_ref(), &args.langs, add_eos)?,
        false => crate::train::read_data_from(&args.data, &args.hub_data.query(), tok.as_ref(), &read)?,
    };
    let masking =
        crate::encoder_task::mlm_masking(&model, tok.as_ref(), args.mlm_probability, data.plain_text, args.seed)?;
    crate::train::check_vocab(&data.examples, model.spec.vocab, "data")?;
    let max_pos = ["max_position_embeddings", "n_positions"].iter().find_map(|k| model.config[k].as_u64());
    if let Some(n) = args.seq_len {
        crate::train::check_seq_len(&model, n)?;
    }
    let offset = crate::encoder_task::position_offset(&model);
    let seq_len = args.seq_len.unwrap_or(max_pos.map_or(usize::MAX, |m| (m as usize).saturating_sub(offset).max(2)));
    crate::train::truncate_rows(&mut data, seq_len, false, "data");
    if tok.is_some() {
        let rows = crate::precision::plural(data.examples.len() as u64, "row");
        let eos = if add_eos { "EOS appended" } else { "no EOS appended" };
        let how = if crate::seq2seq_data::is_seq2seq(&model) { "source/target pairs" } else { eos };
        eprintln!("eval: {rows}, {how}");
    }
    let rows = crate::encoder_task::mask_eval_rows(masking.as_ref(), sequences(&data.examples, seq_len, false)?);
    let pad = model.config["pad_token_id"].as_u64().unwrap_or(0) as u32;
    g.set_autocast(args.precision.precision(&g).autocast());
    args.profile.start(&g);
    let report = crate::eval_progress::evaluate_with_bar(&g, &model, &rows, args.batch_size, pad)?;
    args.profile.report(&g, rows.len().div_ceil(args.batch_size.max(1)) as u64, "batch")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("loss        {:.6}", report.loss);
        match report.accuracy {
            Some(a) => println!("accuracy    {a:.4}"),
            None => println!("perplexity  {:.4}", report.perplexity),
        }
        if let Some(f1) = report.f1 {
            println!("f1          {f1:.4}");
        }
        println!("{:<12}{}", if model.spec.encoder.is_some() { "targets" } else { "tokens" }, report.tokens);
        for (i, r) in report.rows.iter().enumerate() {
            let loss = r.loss.map_or("-".to_string(), |l| format!("{l:.6}"));
            println!("row {:>5}  loss {loss}  tokens {}", i + 1, r.tokens);
        }
    }
    Ok(ExitCode::SUCCESS)
}
