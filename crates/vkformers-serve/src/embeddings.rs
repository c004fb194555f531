//! `POST /v1/embeddings` when the served model is an embedding model (a sentence-transformers or
//! plain encoder folder): the request in OpenAI's shape (`input` as a text, texts, token ids or
//! lists of them; `encoding_format` `float` or `base64`, the official client's default), and the
//! embedding thread. That thread owns the device and the model (through an [`Embedder`] the
//! caller builds there, so this crate knows no model code) and runs the queued requests together:
//! every request waiting when it wakes goes into the same batches.

use std::sync::mpsc::{Receiver, Sender};

use serde::Deserialize;
use serde_json::json;
use vkformers_tensor::Graph;
use vkformers_vk::{Context, DeviceSelector};

use crate::error::{ApiError, ServeError};

/// One input of a request: a text (the embedder tokenizes it) or token ids (used as given).
#[derive(Debug, Clone, PartialEq)]
pub enum EmbedInput {
    Text(String),
    Ids(Vec<u32>),
}

/// Embeddings in input order, and the tokens read for each input.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    pub tokens: Vec<usize>,
}

/// The model side of the embedding thread, built on that thread's graph by an [`EmbedLoader`].
pub trait Embedder {
    /// One embedding an input, in order (the embedder batches them as it likes).
    fn embed(&mut self, g: &Graph<'_>, inputs: &[EmbedInput]) -> Result<Embedded, String>;
    /// The vocabulary size: token-id inputs must be below it.
    fn vocab(&self) -> usize;
}

/// Builds the embedder on the embedding thread's graph (the model loads there).
pub type EmbedLoader = Box<dyn FnOnce(&Graph<'_>) -> Result<Box<dyn Embedder>, String> + Send>;

/// A request's inputs, and where its result goes.
pub struct EmbedJob {
    pub inputs: Vec<EmbedInput>,
    pub reply: tokio::sync::oneshot::Sender<Result<Embedded, String>>,
}

/// Starts the embedding thread; returns it and the model's vocabulary size once the model loaded.
pub fn spawn(
    device: DeviceSelector,
    loader: EmbedLoader,
    jobs: Receiver<EmbedJob>,
) -> Result<(std::thread::JoinHandle<()>, usize), ServeError> {
    crate::worker::spawn_ready("vkformers-embed", move |ready| run(device, loader, jobs, ready))
}

fn run(device: DeviceSelector, loader: EmbedLoader, jobs: Receiver<EmbedJob>, ready: Sender<Result<usize, String>>) {
    let ctx = match Context::new(&device) {
        Ok(c) => c,
        Err(e) => return drop(ready.send(Err(e.to_string()))),
    };
    let g = Graph::new(&ctx);
    let mut embedder = match loader(&g) {
        Ok(e) => e,
        Err(e) => return drop(ready.send(Err(e))),
    };
    let _ = ready.send(Ok(embedder.vocab()));
    // Blocks for the first job, then takes every job already waiting: one embed call for all.
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        batch.extend(jobs.try_iter());
        let inputs: Vec<EmbedInput> = batch.iter().flat_map(|j| j.inputs.iter().cloned()).collect();
        match embedder.embed(&g, &inputs) {
            Ok(all) => answer(batch, all),
            // One bad input must not fail its neighbours: on an error, each job runs alone.
            Err(_) if batch.len() > 1 => {
                for job in batch {
                    let result = embedder.embed(&g, &job.inputs);
                    let _ = job.reply.send(result);
                }
            }
            Err(e) => batch.into_iter().for_each(|j| drop(j.reply.send(Err(e.clone())))),
        }
    }
}

/// Splits the vectors and token counts of a joint run back into its jobs, in order.
fn answer(batch: Vec<EmbedJob>, all: Embedded) {
    let (mut vectors, mut tokens) = (all.vectors.into_iter(), all.tokens.into_iter());
    for job in batch {
        let n = job.inputs.len();
        let mine = Embedded { vectors: vectors.by_ref().take(n).collect(), tokens: tokens.by_ref().take(n).collect() };
        let _ = job.reply.send(Ok(mine));
    }
}

/// `input` of an embeddings request: OpenAI accepts a text, texts, token ids, or lists of ids.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum InputField {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

/// The body of `POST /v1/embeddings`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingRequest {
    pub model: String,
    pub input: InputField,
    /// `float` (default) or `base64` (little-endian f32 bytes, what the official client asks for).
    pub encoding_format: Option<String>,
    /// Only the model's own size is served (no Matryoshka truncation).
    pub dimensions: Option<usize>,
    pub user: Option<String>,
}

impl EmbeddingRequest {
    /// The inputs, checked: at least one, none empty, ids inside the vocabulary.
    pub fn inputs(&self, vocab: usize) -> Result<Vec<EmbedInput>, ApiError> {
        let inputs: Vec<EmbedInput> = match &self.input {
            InputField::Text(t) => vec![EmbedInput::Text(t.clone())],
            InputField::Texts(ts) => ts.iter().cloned().map(EmbedInput::Text).collect(),
            InputField::Ids(ids) => vec![EmbedInput::Ids(ids.clone())],
            InputField::IdLists(l) => l.iter().cloned().map(EmbedInput::Ids).collect(),
        };
        if inputs.is_empty() {
            return Err(ApiError::bad_param("input", "`input` is empty: give at least one text or token list"));
        }
        for i in &inputs {
            match i {
                EmbedInput::Text(t) if t.is_empty() => {
                    return Err(ApiError::bad_param(
                        "input",
                        "an empty text: OpenAI refuses it, and so does this server",
                    ))
                }
                EmbedInput::Ids(ids) if ids.is_empty() => {
                    return Err(ApiError::bad_param("input", "an empty token list: give at least one id"))
                }
                EmbedInput::Ids(ids) => {
                    if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
                        let msg = format!("token id {bad} is outside the model's vocabulary of {vocab} ids");
                        return Err(ApiError::bad_param("input", msg));
                    }
                }
                EmbedInput::Text(_) => {}
            }
        }
        Ok(inputs)
    }

    /// Whether vectors go out as base64 (true) or as JSON numbers.
    pub fn base64(&self) -> Result<bool, ApiError> {
        match self.encoding_format.as_deref() {
            None | Some("float") => Ok(false),
            Some("base64") => Ok(true),
            Some(other) => {
                Err(ApiError::bad_param("encoding_format", format!("`{other}`: expected `float` or `base64`")))
            }
        }
    }
}

/// The response body: OpenAI's `list` of `embedding` objects with `usage`.
pub fn response(model: &str, out: &Embedded, base64: bool) -> serde_json::Value {
    let tokens: usize = out.tokens.iter().sum();
    let data: Vec<serde_json::Value> = out
        .vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 { json!(f32_base64(v)) } else { json!(v) };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    json!({
        "object": "list", "data": data, "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })
}

/// A vector as OpenAI's base64 encoding: its little-endian f32 bytes, base64 (standard alphabet,
/// padded).
pub fn f32_base64(v: &[f32]) -> String {
    use base64::Engine as _;
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_the_little_endian_f32_bytes() {
        // 1.0f32 = 00 00 80 3f; -2.5 = 00 00 20 c0.
        assert_eq!(f32_base64(&[1.0]), "AACAPw==");
        assert_eq!(f32_base64(&[1.0, -2.5]), "AACAPwAAIMA=");
    }

    #[test]
    fn inputs_take_every_openai_shape_and_check_ids() {
        let req = |input: serde_json::Value| -> EmbeddingRequest {
            serde_json::from_value(json!({"model": "m", "input": input})).unwrap()
        };
        assert_eq!(req(json!("hi")).inputs(10).unwrap(), [EmbedInput::Text("hi".into())]);
        assert_eq!(req(json!(["a", "b"])).inputs(10).unwrap().len(), 2);
        assert_eq!(req(json!([1, 2, 3])).inputs(10).unwrap(), [EmbedInput::Ids(vec![1, 2, 3])]);
        assert_eq!(req(json!([[1], [2, 3]])).inputs(10).unwrap().len(), 2);
        assert_eq!(req(json!([1, 20])).inputs(10).unwrap_err().status.as_u16(), 400);
        assert_eq!(req(json!([])).inputs(10).unwrap_err().status.as_u16(), 400);
        assert_eq!(req(json!("")).inputs(10).unwrap_err().status.as_u16(), 400);
        let bad: Result<EmbeddingRequest, _> = serde_json::from_value(json!({"model": "m", "input": "x", "bogus": 1}));
        assert!(bad.is_err(), "unknown fields are refused");
    }
}
