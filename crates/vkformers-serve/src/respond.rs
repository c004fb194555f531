//! Turning a job's updates into OpenAI's response bodies: one JSON object, or server-sent events
//! (one chunk per settled piece of text, the finish reason, optionally the usage, then `[DONE]`).

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::Job;
use crate::worker::{Logprob, Update};

/// Which endpoint's shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Completion,
    Chat,
}

/// The fixed fields of every response and chunk.
#[derive(Debug, Clone)]
pub struct Head {
    pub kind: Kind,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub include_usage: bool,
}

/// One choice gathered for a non-streamed response.
#[derive(Debug, Default, Clone)]
struct Choice {
    text: String,
    finish: Option<&'static str>,
    tokens: usize,
    logprobs: Vec<Logprob>,
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

fn bytes(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Chat's `logprobs.content` entries.
fn chat_logprobs(lps: &[Logprob]) -> Value {
    let entry = |lp: &Logprob| {
        let top: Vec<Value> =
            lp.top.iter().map(|(t, l)| json!({"token": t, "logprob": l, "bytes": bytes(t)})).collect();
        json!({"token": lp.token, "logprob": lp.logprob, "bytes": bytes(&lp.token), "top_logprobs": top})
    };
    json!({"content": lps.iter().map(entry).collect::<Vec<_>>()})
}

/// Completions' `logprobs` (parallel lists); `offset` is the text offset of the first token.
fn completion_logprobs(lps: &[Logprob], mut offset: usize) -> Value {
    let mut text_offset = Vec::new();
    for lp in lps {
        text_offset.push(offset);
        offset += lp.token.len();
    }
    let top: Vec<Value> =
        lps.iter().map(|lp| Value::Object(lp.top.iter().map(|(t, l)| (t.clone(), json!(l))).collect())).collect();
    json!({
        "tokens": lps.iter().map(|l| &l.token).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
        "top_logprobs": top,
        "text_offset": text_offset,
    })
}

impl Head {
    fn logprobs(&self, lps: &[Logprob], offset: usize) -> Value {
        match self.kind {
            Kind::Chat => chat_logprobs(lps),
            Kind::Completion => completion_logprobs(lps, offset),
        }
    }

    /// A non-streamed choice.
    fn choice(&self, index: usize, c: &Choice, logprobs: bool) -> Value {
        let lp = if logprobs { self.logprobs(&c.logprobs, 0) } else { Value::Null };
        match self.kind {
            Kind::Completion => json!({"index": index, "text": c.text, "logprobs": lp, "finish_reason": c.finish}),
            Kind::Chat => json!({
                "index": index,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": lp,
                "finish_reason": c.finish,
            }),
        }
    }

    fn object(&self, stream: bool) -> &'static str {
        match (self.kind, stream) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    /// A streamed chunk of one choice: `text` (chat: a delta; `role` on the first), its
    /// log-probabilities, and the finish reason on the last.
    fn chunk(&self, index: usize, text: Option<&str>, lp: Option<Value>, finish: Option<&str>, role: bool) -> Value {
        let choice = match self.kind {
            Kind::Completion => {
                json!({"index": index, "text": text.unwrap_or(""), "logprobs": lp, "finish_reason": finish})
            }
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), json!(t));
                }
                json!({"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish})
            }
        };
        json!({"id": self.id, "object": self.object(true), "created": self.created, "model": self.model, "choices": [choice]})
    }
}

/// Waits for every choice of `job` and answers one JSON object.
pub async fn collect(head: Head, mut job: Job, logprobs: bool) -> Result<Response, ApiError> {
    let mut choices = vec![Choice::default(); job.choices];
    let mut left = job.choices;
    while left > 0 {
        match job.updates.recv().await {
            Some(Update::Token { index, logprob, .. }) => choices[index].logprobs.extend(logprob),
            Some(Update::Done { index, text, finish, tokens, .. }) => {
                choices[index] = Choice { text, finish: Some(finish), tokens, ..std::mem::take(&mut choices[index]) };
                left -= 1;
            }
            Some(Update::Error(e)) => return Err(ApiError::internal(e)),
            None => return Err(ApiError::internal("the engine thread stopped")),
        }
    }
    job.guard.disarm();
    let completion = choices.iter().map(|c| c.tokens).sum();
    let body = json!({
        "id": head.id,
        "object": head.object(false),
        "created": head.created,
        "model": head.model,
        "choices": choices.iter().enumerate().map(|(i, c)| head.choice(i, c, logprobs)).collect::<Vec<_>>(),
        "usage": usage(job.prompt_tokens, completion),
    });
    Ok(axum::Json(body).into_response())
}

/// State of a streamed response.
struct Streaming {
    head: Head,
    job: Job,
    left: usize,
    completion_tokens: usize,
    /// Text offset per choice (completions' logprobs).
    offsets: Vec<usize>,
    pending: VecDeque<Event>,
    ended: bool,
}

fn data(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

impl Streaming {
    /// Events of one update; `false` when the stream must end (error or engine gone).
    fn on_update(&mut self, update: Option<Update>) {
        match update {
            Some(Update::Token { index, text, logprob }) => {
                if text.is_empty() && logprob.is_none() {
                    return;
                }
                let lp = logprob.map(|l| self.head.logprobs(&[l], self.offsets[index]));
                self.offsets[index] += text.len();
                self.pending.push_back(data(&self.head.chunk(index, Some(&text), lp, None, false)));
            }
            Some(Update::Done { index, tail, finish, tokens, .. }) => {
                self.completion_tokens += tokens;
                let text = (!tail.is_empty() || self.head.kind == Kind::Completion).then_some(tail.as_str());
                self.pending.push_back(data(&self.head.chunk(index, text, None, Some(finish), false)));
                self.left -= 1;
                if self.left == 0 {
                    self.finish();
                }
            }
            Some(Update::Error(e)) => {
                self.pending.push_back(data(&ApiError::internal(e).body()));
                self.ended = true;
            }
            None => {
                self.pending.push_back(data(&ApiError::internal("the engine thread stopped").body()));
                self.ended = true;
            }
        }
    }

    fn finish(&mut self) {
        self.job.guard.disarm();
        if self.head.include_usage {
            let h = &self.head;
            let body = json!({
                "id": h.id, "object": h.object(true), "created": h.created, "model": h.model, "choices": [],
                "usage": usage(self.job.prompt_tokens, self.completion_tokens),
            });
            self.pending.push_back(data(&body));
        }
        self.pending.push_back(Event::default().data("[DONE]"));
        self.ended = true;
    }
}

/// Streams `job` as server-sent events. Dropping the stream (the client went away) drops the
/// job's guard, which cancels what still runs.
pub fn stream(head: Head, job: Job) -> Response {
    let mut pending = VecDeque::new();
    if head.kind == Kind::Chat {
        for i in 0..job.choices {
            pending.push_back(data(&head.chunk(i, Some(""), None, None, true)));
        }
    }
    let left = job.choices;
    let offsets = vec![0; job.choices];
    let state = Streaming { head, job, left, completion_tokens: 0, offsets, pending, ended: false };
    Sse::new(events(state)).into_response()
}

fn events(state: Streaming) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold(state, |mut s| async move {
        loop {
            if let Some(e) = s.pending.pop_front() {
                return Some((Ok(e), s));
            }
            if s.ended {
                return None;
            }
            let update = s.job.updates.recv().await;
            s.on_update(update);
        }
    })
}
