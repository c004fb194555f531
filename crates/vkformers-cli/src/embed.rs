//! `vkformers embed`: sentence embeddings as sentence-transformers computes them (the folder's
//! `modules.json`: the transformer's last hidden state, its pooling, `Normalize`), in batches
//! sorted by length as `SentenceTransformer.encode` batches them; text lines or JSON in the
//! OpenAI embeddings shape. Decoder embedding models (Qwen3-Embedding) pool their final
//! hidden states the same way, usually the last token's.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use vkformers_io::HfTokenizer;
use vkformers_models::encoder::{self, EncoderBatch, Pooling};
use vkformers_models::model::Model;
use vkformers_tensor::ops::cast;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::{Context, DeviceSelector};

use crate::embed_profile::HostTimes;
use crate::embed_queue::{EmbedQueue, Finish, Recorded};
use crate::st_modules::{PoolMode, SentenceModel};

#[derive(clap::Args)]
pub struct Args {
    /// A sentence-transformers folder (modules.json; an encoder, or a decoder such as
    /// Qwen3-Embedding with last-token pooling), a plain encoder folder (mean pooling), or a Hub id.
    #[arg(long)]
    model: String,
    /// A text to embed (repeat for several).
    #[arg(long, required_unless_present = "file")]
    text: Vec<String>,
    /// A file of texts to embed, one a line (empty lines skipped).
    #[arg(long, conflicts_with = "text")]
    file: Option<PathBuf>,
    /// Print JSON in the OpenAI embeddings shape instead of one line of numbers a text.
    #[arg(long)]
    json: bool,
    /// Texts per forward.
    #[arg(long, default_value_t = 32, value_parser = crate::ranges::at_least_one)]
    batch_size: usize,
    #[command(flatten)]
    dtype: crate::precision::DtypeArgs,
    /// Print where each batch's time went, over the batches after the first (which creates the
    /// pipelines): device time per kernel, and the host's share (tokenize, record, submit, wait,
    /// read back).
    #[arg(long)]
    profile: bool,
}

pub fn run(selector: &DeviceSelector, args: &Args) -> anyhow::Result<ExitCode> {
    let dir = vkformers_hub::resolve_model(&args.model)?;
    let st = SentenceModel::read(&dir)?;
    let texts = input_texts(&args.text, args.file.as_deref(), "embed")?;
    let ctx = Context::new(selector)?;
    let g = Graph::new(&ctx);
    crate::outdir::check_complete(&st.transformer)?;
    let model = Model::load_for_inference(&g, &st.transformer, args.dtype.resolve(&st.transformer)?)
        .with_context(|| format!("loading {}", st.transformer.display()))?;
    if model.spec.seq2seq.is_some() {
        bail!("`{}` is an encoder-decoder: its embeddings are not supported", model.spec.model_type);
    }
    crate::load::generate_in_weight_type(&g, &model);
    let tok = HfTokenizer::from_dir(&st.transformer)?;
    let start = std::time::Instant::now();
    let Embedded { vectors, tokens, tokenize_wait, device_wait, host } =
        embed_pipelined(&g, &model, &tok, &st, &texts, (args.batch_size, args.profile))?;
    // Tokenizing, the forwards and reading the vectors back; not loading the model.
    let secs = start.elapsed().as_secs_f64();
    if args.profile {
        crate::embed_profile::report(&g, host.as_ref())?;
    }
    if args.json {
        let data: Vec<serde_json::Value> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| serde_json::json!({"object": "embedding", "index": i, "embedding": v}))
            .collect();
        let out = serde_json::json!({
            "object": "list", "data": data, "model": args.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "timings": {"embed_seconds": secs, "tokenize_wait_seconds": tokenize_wait,
                        "device_wait_seconds": device_wait,
                        "texts_per_second": texts.len() as f64 / secs, "tokens_per_second": tokens as f64 / secs},
        });
        println!("{}", serde_json::to_string(&out)?);
    } else {
        for v in &vectors {
            let line: Vec<String> = v.iter().map(|x| format!("{x:.7}")).collect();
            println!("{}", line.join(" "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The texts of `--text` (repeatable) or `--file` (one per non-empty line), for `embed` and
/// `classify`; `what` names the command in the error when there are none.
pub(crate) fn input_texts(text: &[String], file: Option<&Path>, what: &str) -> anyhow::Result<Vec<String>> {
    let texts: Vec<String> = match file {
        Some(f) => std::fs::read_to_string(f)
            .with_context(|| format!("reading {}", f.display()))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect(),
        None => text.to_vec(),
    };
    if texts.is_empty() {
        bail!("nothing to {what}: give --text or a --file with non-empty lines");
    }
    Ok(texts)
}

/// What [`embed_pipelined`] returns.
struct Embedded {
    /// One embedding a text, in input order.
    vectors: Vec<Vec<f32>>,
    /// Tokens read.
    tokens: usize,
    /// Seconds the device loop waited for the tokenizer (what overlapping did not hide).
    tokenize_wait: f64,
    /// Seconds the host waited for the device to finish a batch it wanted to read.
    device_wait: f64,
    /// `--profile`: the host's times over the batches after the first.
    host: Option<HostTimes>,
}

impl Embedded {
    /// Puts the vectors of texts `texts` in their places.
    fn place(&mut self, texts: &[usize], vectors: Vec<Vec<f32>>) {
        for (&i, v) in texts.iter().zip(vectors) {
            self.vectors[i] = v;
        }
    }
}

/// One embedding a text, in batches of `batch_size` texts longest first (by characters, as
/// `SentenceTransformer.encode` sorts them), each batch tokenized on a worker thread while the
/// device runs the one before (tokenizing is host time of the order of BERT-base's forwards
/// on a large GPU; see [`encode_all`]), and recorded while the device runs the one before
/// (see `embed_queue`).
fn embed_pipelined(
    g: &Graph<'_>,
    model: &Model,
    tok: &HfTokenizer,
    st: &SentenceModel,
    texts: &[String],
    (batch_size, profile): (usize, bool),
) -> anyhow::Result<Embedded> {
    let inner = truncating_tokenizer(model, tok, st)?;
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(texts[i].chars().count()));
    let chunks: Vec<&[usize]> = order.chunks(batch_size.max(1)).collect();
    let pad = model.config["pad_token_id"].as_u64().unwrap_or(0) as i32;
    let mut done = Embedded {
        vectors: vec![Vec::new(); texts.len()],
        tokens: 0,
        tokenize_wait: 0.0,
        device_wait: 0.0,
        host: None,
    };
    let mut host = HostTimes::default();
    let overlap = overlap_on();
    std::thread::scope(|s| -> anyhow::Result<()> {
        // Two batches ahead at most: the tokenizer never holds more than that in memory.
        let (tx, rx) = std::sync::mpsc::sync_channel(2);
        let (chunks, inner) = (&chunks, &inner);
        s.spawn(move || {
            for chunk in chunks {
                let batch: Vec<String> = chunk.iter().map(|&i| texts[i].clone()).collect();
                let start = std::time::Instant::now();
                let rows = encode_all(inner, st, batch);
                if tx.send((rows, start.elapsed().as_secs_f64())).is_err() {
                    break; // the device loop stopped (an error)
                }
            }
        });
        let mut queue = EmbedQueue::new(g, 1);
        for (n, chunk) in chunks.iter().enumerate() {
            if profile && n == 1 {
                // The first batch created the pipelines and buffers: time the others alone.
                for (texts, vectors) in queue.drain()? {
                    done.place(&texts, vectors);
                }
                (host, queue.submit_secs, queue.readback_secs) = (HostTimes::starting(), 0.0, 0.0);
                (done.device_wait, queue.device_wait) = (done.device_wait + queue.device_wait, 0.0);
                g.set_profiling(true);
            }
            let wait = std::time::Instant::now();
            let (rows, tokenize_secs) = rx.recv().context("the tokenizing thread stopped")?;
            let rows = rows?;
            let waited = wait.elapsed().as_secs_f64();
            (done.tokenize_wait, host.tokenize_wait, host.tokenize) =
                (done.tokenize_wait + waited, host.tokenize_wait + waited, host.tokenize + tokenize_secs);
            done.tokens += rows.iter().map(|r| r.0.len()).sum::<usize>();
            let rows: Vec<&(Vec<i32>, Vec<i32>)> = rows.iter().collect();
            let start = std::time::Instant::now();
            let recorded = g.inference(|| record_batch(g, model, st, &rows, pad))?;
            g.clear_tape();
            host.record += start.elapsed().as_secs_f64();
            host.batches += 1;
            if !overlap {
                let wait = std::time::Instant::now();
                let read = g.read(&recorded.out)?;
                (done.device_wait, host.device_wait) =
                    (done.device_wait + wait.elapsed().as_secs_f64(), host.device_wait + wait.elapsed().as_secs_f64());
                let start = std::time::Instant::now();
                done.place(chunk, recorded.finish.apply(read));
                host.readback += start.elapsed().as_secs_f64();
                continue;
            }
            for (texts, vectors) in queue.submit(chunk.to_vec(), recorded)? {
                done.place(&texts, vectors);
            }
        }
        for (texts, vectors) in queue.drain()? {
            done.place(&texts, vectors);
        }
        done.device_wait += queue.device_wait;
        (host.device_wait, host.submit, host.readback) =
            (host.device_wait + queue.device_wait, queue.submit_secs, host.readback + queue.readback_secs);
        Ok(())
    })?;
    if profile && chunks.len() > 1 {
        host.wall = host.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        done.host = Some(host);
    }
    Ok(done)
}

/// Whether `embed` records a batch while the device runs the one before (default); off with
/// `VKFORMERS_EMBED_OVERLAP=0`, which reads each batch before recording the next (for A/B
/// measurements and the bit-identity test).
fn overlap_on() -> bool {
    std::env::var("VKFORMERS_EMBED_OVERLAP").map_or(true, |v| v != "0")
}

/// One embedding per tokenized row `(ids, token types)`, in input order, run in batches of
/// `batch_size` rows of similar lengths.
pub fn embed_encoded(
    g: &Graph<'_>,
    model: &Model,
    st: &SentenceModel,
    encoded: &[(Vec<i32>, Vec<i32>)],
    batch_size: usize,
) -> anyhow::Result<Vec<Vec<f32>>> {
    // Longest first, as `encode` sorts: batches hold texts of similar lengths.
    let mut order: Vec<usize> = (0..encoded.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(encoded[i].0.len()));
    let mut out = vec![Vec::new(); encoded.len()];
    let pad = model.config["pad_token_id"].as_u64().unwrap_or(0) as i32;
    for chunk in order.chunks(batch_size.max(1)) {
        let rows: Vec<&(Vec<i32>, Vec<i32>)> = chunk.iter().map(|&i| &encoded[i]).collect();
        let vectors = g.inference(|| embed_batch(g, model, st, &rows, pad))?;
        g.clear_tape();
        for (&i, v) in chunk.iter().zip(vectors) {
            out[i] = v;
        }
    }
    Ok(out)
}

/// Ids and token types of each text with the tokenizer's special tokens, cut to the model's
/// `max_seq_length` (else its positions) as the tokenizer truncates.
pub(crate) fn tokenize(
    model: &Model,
    tok: &HfTokenizer,
    st: &SentenceModel,
    texts: &[String],
) -> anyhow::Result<Vec<(Vec<i32>, Vec<i32>)>> {
    encode_all(&truncating_tokenizer(model, tok, st)?, st, texts.to_vec())
}

/// The tokenizer cutting texts to the model's `max_seq_length` (else its positions).
fn truncating_tokenizer(model: &Model, tok: &HfTokenizer, st: &SentenceModel) -> anyhow::Result<tokenizers::Tokenizer> {
    let positions = model.spec.encoder.as_ref().map(|e| e.max_positions);
    // RoBERTa's positions start after padding_idx: two rows of its table are never read.
    let offset = match model.spec.encoder.as_ref().map(|e| e.positions) {
        Some(encoder::Positions::FromIds { padding_idx }) => padding_idx + 1,
        _ => 0,
    };
    let limit = st.max_seq_length.into_iter().chain(positions.map(|p| p - offset)).min();
    let mut inner = tok.inner().clone();
    if let Some(max_length) = limit {
        let params = tokenizers::TruncationParams { max_length, ..Default::default() };
        inner.with_truncation(Some(params)).map_err(|e| anyhow::anyhow!("tokenizer truncation: {e}"))?;
    }
    Ok(inner)
}

/// Ids and token types of `texts` (see [`tokenize`]) with a tokenizer from [`truncating_tokenizer`].
fn encode_all(
    inner: &tokenizers::Tokenizer,
    st: &SentenceModel,
    texts: Vec<String>,
) -> anyhow::Result<Vec<(Vec<i32>, Vec<i32>)>> {
    let inputs: Vec<String> = if st.lowercase { texts.iter().map(|t| t.to_lowercase()).collect() } else { texts };
    // All at once: `encode_batch` spreads them over the cores, as the fast tokenizer
    // sentence-transformers calls does (4096 texts of 128 tokens of the embed bench's WordLevel
    // vocabulary: 1.57 s one at a time here, 1.02 s over two cores).
    let encodings = inner.encode_batch(inputs, true).map_err(|e| anyhow::anyhow!("tokenizing: {e}"))?;
    Ok(encodings
        .iter()
        .map(|e| {
            let ids = e.get_ids().iter().map(|&x| x as i32).collect();
            (ids, e.get_type_ids().iter().map(|&x| x as i32).collect())
        })
        .collect())
}

/// The pooled (and normalised) embeddings of one right-padded batch, read at once.
fn embed_batch(
    g: &Graph<'_>,
    model: &Model,
    st: &SentenceModel,
    rows: &[&(Vec<i32>, Vec<i32>)],
    pad: i32,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let r = record_batch(g, model, st, rows, pad)?;
    Ok(r.finish.apply(g.read(&r.out)?))
}

/// Records the forward and the device pooling of one right-padded batch: the f32 tensor to
/// read (pooled `[B, D]`, or the hidden state for host pooling) and how it becomes vectors.
fn record_batch(
    g: &Graph<'_>,
    model: &Model,
    st: &SentenceModel,
    rows: &[&(Vec<i32>, Vec<i32>)],
    pad: i32,
) -> anyhow::Result<Recorded> {
    let (b, t) = (rows.len(), rows.iter().map(|r| r.0.len()).max().unwrap_or(1).max(1));
    let (mut ids, mut mask, mut types) =
        (Vec::with_capacity(b * t), Vec::with_capacity(b * t), Vec::with_capacity(b * t));
    for (row_ids, row_types) in rows {
        let n = row_ids.len();
        ids.extend(row_ids.iter().copied().chain(std::iter::repeat_n(pad, t - n)));
        mask.extend(std::iter::repeat_n(1, n).chain(std::iter::repeat_n(0, t - n)));
        types.extend(row_types.iter().copied().chain(std::iter::repeat_n(0, t - n)));
    }
    let batch = EncoderBatch { ids: &ids, mask: &mask, token_types: Some(&types), batch: b, seq: t };
    let hidden = match model.spec.encoder {
        Some(_) => encoder::hidden_states(g, &model.spec, &model.weights, &batch)?,
        // A decoder embedding model (Qwen3-Embedding: last-token pooling of its final states).
        None => encoder::decoder_hidden_states(g, &model.spec, &model.weights, &ids, &mask, (b, t))?,
    };
    // f32 for pooling whatever the weights' type (16-bit runs keep activations 16-bit).
    let hidden = cast::cast(g, &hidden, DType::F32)?;
    let mut finish = Finish { host_pool: None, normalize: st.normalize, dim: model.spec.hidden };
    let out = match st.pooling {
        // On the device: fused attention with zero scores, else one product [B, B·T] · [B·T, D].
        PoolMode::Mean => match encoder::mean_pool(g, &hidden, &mask, (b, t))? {
            Some(pooled) => pooled,
            None => encoder::pool(g, &hidden, &mask, (b, t), Pooling::Mean)?,
        },
        PoolMode::Cls => encoder::pool(g, &hidden, &mask, (b, t), Pooling::Cls)?,
        // Each row's last real token, gathered on the device (a decoder's states are wide).
        PoolMode::LastToken => {
            let last: Vec<i32> = mask
                .chunks(t)
                .enumerate()
                .map(|(row, m)| (row * t + m.iter().rposition(|&x| x != 0).unwrap_or(0)) as i32)
                .collect();
            vkformers_tensor::ops::embedding::embedding(g, &hidden, &g.ints(&last, &[b])?)?
        }
        mode => {
            finish.host_pool = Some((mode, mask, (b, t)));
            hidden
        }
    };
    // The read-back copies f32 bytes (the pooled outputs are f32 already: no kernel then).
    Ok(Recorded { out: cast::cast(g, &out, DType::F32)?, finish })
}
