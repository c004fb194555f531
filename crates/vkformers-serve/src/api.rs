//! The request bodies of OpenAI's completions and chat completions, and their translation into
//! the engine's [`RequestOptions`]. Unknown fields are ignored (clients send fields this server
//! does not use); fields it cannot honour are refused by name.

use serde::Deserialize;
use vkformers_generate::config::GenerationDefaults;
use vkformers_generate::engine::RequestOptions;
use vkformers_generate::stop::StopStrings;
use vkformers_generate::{Penalties, SamplingParams};

use crate::error::ApiError;

/// `prompt` of a completion: text, token ids, or a list of either.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StopInput {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Fields both endpoints share.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Common {
    pub max_tokens: Option<usize>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<StopInput>,
    pub n: Option<usize>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// vLLM's extras.
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    /// Refused when set (not supported yet): named in the error rather than ignored.
    pub logit_bias: Option<serde_json::Map<String, serde_json::Value>>,
    pub tools: Option<Vec<serde_json::Value>>,
    pub response_format: Option<serde_json::Value>,
}

impl Common {
    /// 400 naming a field this server cannot honour yet.
    pub fn refuse_unsupported(&self) -> Result<(), ApiError> {
        let json_format = self.response_format.as_ref().is_some_and(|f| f["type"] != "text");
        let unsupported = [
            ("logit_bias", self.logit_bias.as_ref().is_some_and(|b| !b.is_empty())),
            ("tools", self.tools.as_ref().is_some_and(|t| !t.is_empty())),
            ("response_format", json_format),
        ];
        match unsupported.iter().find(|(_, set)| *set) {
            Some(&(name, _)) => Err(ApiError::bad_param(name, format!("`{name}` is not supported yet: leave it out"))),
            None => Ok(()),
        }
    }
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: PromptInput,
    #[serde(flatten)]
    pub common: Common,
    /// Log-probabilities of this many most likely tokens at each step (0 ..= 20).
    pub logprobs: Option<usize>,
    pub echo: Option<bool>,
    pub best_of: Option<usize>,
    pub suffix: Option<String>,
}

impl CompletionRequest {
    /// Refuses the options this server does not implement yet, with the error the route sends.
    pub fn refuse_unsupported(&self) -> Result<(), ApiError> {
        if self.echo == Some(true) || self.suffix.is_some() || self.best_of.is_some_and(|b| b > 1) {
            return Err(ApiError::bad_request("`echo`, `suffix` and `best_of` are not supported yet"));
        }
        Ok(())
    }

    /// The prompts as token ids: texts through `encode` (with special tokens), ids as given.
    pub fn prompt_ids<E>(&self, encode: impl Fn(&str) -> Result<Vec<u32>, E>) -> Result<Vec<Vec<u32>>, E> {
        Ok(match &self.prompt {
            PromptInput::Text(t) => vec![encode(t)?],
            PromptInput::Texts(ts) => ts.iter().map(|t| encode(t)).collect::<Result<_, _>>()?,
            PromptInput::Ids(ids) => vec![ids.clone()],
            PromptInput::IdLists(l) => l.clone(),
        })
    }
}

impl ChatRequest {
    /// `max_completion_tokens` (the newer name) into `max_tokens`, and the log-probabilities asked
    /// for: `top_logprobs` alternatives a token when `logprobs` is true.
    pub fn settle_options(&mut self) -> Option<usize> {
        self.common.max_tokens = self.max_completion_tokens.or(self.common.max_tokens);
        self.logprobs.unwrap_or(false).then_some(self.top_logprobs.unwrap_or(0))
    }
}

/// Message content: a string or a list of parts (text parts only).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: Option<Content>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(flatten)]
    pub common: Common,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<usize>,
    pub max_completion_tokens: Option<usize>,
}

impl ChatMessage {
    /// The message as the chat template sees it.
    pub fn to_message(&self) -> Result<vkformers_chat::Message, ApiError> {
        let text = match &self.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for p in parts {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => text.push_str(t),
                        (kind, _) => {
                            return Err(ApiError::bad_param(
                                "messages",
                                format!("content parts of type `{kind}` are not supported yet: send text"),
                            ))
                        }
                    }
                }
                text
            }
        };
        Ok(vkformers_chat::Message::new(self.role.clone(), text))
    }
}

/// Most choices (`n`) and most top log-probabilities a request may ask for.
pub const MAX_N: usize = 16;
pub const MAX_TOP_LOGPROBS: usize = 20;

/// What a request asks of the engine, before its prompts are known.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Options of choice 0 (`max_new_tokens` still to be fitted to each prompt).
    pub opts: RequestOptions,
    /// `max_tokens` as asked (None: the endpoint's default).
    pub max_tokens: Option<usize>,
    pub n: usize,
    pub stops: StopStrings,
    pub stream: bool,
    pub include_usage: bool,
}

fn in_range(param: &'static str, v: f64, lo: f64, hi: f64) -> Result<f64, ApiError> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(ApiError::bad_param(param, format!("`{param}` = {v} is outside [{lo}, {hi}]")))
    }
}

/// Sampling parameters: the request's fields over the model's defaults. Fields the request leaves
/// out come from generation_config.json when it samples, else from OpenAI's defaults
/// (temperature 1, top_p 1, no top_k); `temperature` 0 means greedy.
pub fn sampling(c: &Common, defaults: &GenerationDefaults) -> Result<SamplingParams, ApiError> {
    let base = if defaults.params.do_sample {
        defaults.params.clone()
    } else {
        SamplingParams { top_k: 0, ..SamplingParams::sampling() }
    };
    let temperature = in_range("temperature", c.temperature.unwrap_or(base.temperature), 0.0, 2.0)?;
    let top_p = c.top_p.map(|p| in_range("top_p", p, f64::MIN_POSITIVE, 1.0)).transpose()?.unwrap_or(base.top_p);
    let top_k = match c.top_k {
        Some(k) if k > 0 => k as usize,
        Some(-1 | 0) => 0,
        Some(k) => {
            return Err(ApiError::bad_param("top_k", format!("`top_k` = {k}: give -1 or 0 (off) or a positive count")))
        }
        None => base.top_k,
    };
    let min_p = match c.min_p {
        Some(p) => Some(in_range("min_p", p, 0.0, 1.0)?).filter(|&p| p > 0.0),
        None => base.min_p,
    };
    let repetition_penalty = match c.repetition_penalty {
        Some(r) if r.is_finite() && r > 0.0 => r,
        Some(r) => {
            return Err(ApiError::bad_param(
                "repetition_penalty",
                format!("`repetition_penalty` = {r} must be above 0"),
            ))
        }
        None => defaults.params.repetition_penalty,
    };
    let params = SamplingParams {
        do_sample: temperature > 0.0,
        temperature: if temperature > 0.0 { temperature } else { 1.0 },
        top_k,
        top_p,
        min_p,
        repetition_penalty,
        min_tokens_to_keep: 1,
    };
    params.processors().map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(params)
}

/// A seed for a request that gave none: distinct per request, so unseeded sampling varies.
fn fresh_seed() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t ^ NEXT.fetch_add(0x9e37_79b9_7f4a_7c15, std::sync::atomic::Ordering::Relaxed)
}

/// The plan of a request's shared fields; `logprobs` is the number of top alternatives asked
/// for (None: no log-probabilities), `eos` the ids that end it.
pub fn plan(
    c: &Common,
    defaults: &GenerationDefaults,
    logprobs: Option<usize>,
    eos: Vec<u32>,
) -> Result<Plan, ApiError> {
    c.refuse_unsupported()?;
    let n = c.n.unwrap_or(1);
    if !(1..=MAX_N).contains(&n) {
        return Err(ApiError::bad_param("n", format!("`n` = {n} is outside [1, {MAX_N}]")));
    }
    if let Some(k) = logprobs.filter(|&k| k > MAX_TOP_LOGPROBS) {
        return Err(ApiError::bad_param("logprobs", format!("{k} top log-probabilities: at most {MAX_TOP_LOGPROBS}")));
    }
    if c.max_tokens == Some(0) {
        return Err(ApiError::bad_param("max_tokens", "`max_tokens` must be at least 1"));
    }
    let presence = in_range("presence_penalty", c.presence_penalty.unwrap_or(0.0).into(), -2.0, 2.0)? as f32;
    let frequency = in_range("frequency_penalty", c.frequency_penalty.unwrap_or(0.0).into(), -2.0, 2.0)? as f32;
    let stops: Vec<String> = match &c.stop {
        None => Vec::new(),
        Some(StopInput::One(s)) => vec![s.clone()],
        Some(StopInput::Many(v)) => v.clone(),
    };
    if stops.len() > 4 {
        return Err(ApiError::bad_param("stop", format!("{} stop sequences: at most 4", stops.len())));
    }
    let opts = RequestOptions {
        params: sampling(c, defaults)?,
        penalties: Penalties { presence, frequency },
        seed: c.seed.map_or_else(fresh_seed, |s| s as u64),
        row: 0,
        max_new_tokens: 0,
        eos,
        logprobs,
    };
    let stream = c.stream.unwrap_or(false);
    let include_usage = c.stream_options.as_ref().is_some_and(|o| o.include_usage);
    Ok(Plan { opts, max_tokens: c.max_tokens, n, stops: StopStrings::new(stops), stream, include_usage })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(body: serde_json::Value) -> CompletionRequest {
        serde_json::from_value(body).expect("a completion body")
    }

    #[test]
    fn unsupported_completion_options_are_refused() {
        let base = serde_json::json!({"model": "m", "prompt": "hi"});
        assert!(completion(base.clone()).refuse_unsupported().is_ok());
        for (key, value) in [("echo", serde_json::json!(true)), ("suffix", "x".into()), ("best_of", 2.into())] {
            let mut body = base.clone();
            body[key] = value;
            let err = completion(body).refuse_unsupported().expect_err(key);
            assert!(
                err.message.contains("not supported") && err.status == axum::http::StatusCode::BAD_REQUEST,
                "{key}: {err:?}"
            );
        }
        let mut one = base;
        one["best_of"] = 1.into();
        assert!(completion(one).refuse_unsupported().is_ok(), "best_of 1 is the default");
    }

    #[test]
    fn prompts_become_ids_text_through_the_encoder() {
        let encode = |t: &str| -> Result<Vec<u32>, String> { Ok(t.bytes().map(u32::from).collect()) };
        let ids = |p: serde_json::Value| completion(serde_json::json!({"model": "m", "prompt": p})).prompt_ids(encode);
        assert_eq!(ids("ab".into()), Ok(vec![vec![97, 98]]));
        assert_eq!(ids(serde_json::json!(["a", "b"])), Ok(vec![vec![97], vec![98]]));
        assert_eq!(ids(serde_json::json!([5, 6])), Ok(vec![vec![5, 6]]));
        assert_eq!(ids(serde_json::json!([[5], [6, 7]])), Ok(vec![vec![5], vec![6, 7]]));
        let failing = |_: &str| -> Result<Vec<u32>, String> { Err("no".into()) };
        let req = completion(serde_json::json!({"model": "m", "prompt": ["a", "b"]}));
        assert_eq!(req.prompt_ids(failing), Err("no".to_string()));
    }

    #[test]
    fn chat_options_take_the_newer_names() {
        let mut req: ChatRequest = serde_json::from_value(serde_json::json!({
            "model": "m", "messages": [], "max_tokens": 5, "max_completion_tokens": 9,
            "logprobs": true, "top_logprobs": 3
        }))
        .expect("a chat body");
        assert_eq!(req.settle_options(), Some(3));
        assert_eq!(req.common.max_tokens, Some(9));
        let mut plain: ChatRequest =
            serde_json::from_value(serde_json::json!({"model": "m", "messages": [], "max_tokens": 5})).expect("body");
        assert_eq!(plain.settle_options(), None);
        assert_eq!(plain.common.max_tokens, Some(5));
    }
}
