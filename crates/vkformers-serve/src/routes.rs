//! The HTTP routes: OpenAI's `/v1/models`, `/v1/completions`, `/v1/chat/completions`,
//! `/v1/embeddings`, and
//! `/health`, `/metrics`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::api::{plan, ChatRequest, CompletionRequest, Plan};
use crate::embeddings::{response, EmbedJob, EmbeddingRequest};
use crate::error::ApiError;
use crate::respond::{collect, stream, Head, Kind};
use crate::state::{AppState, Job};

/// The router over `state`, with bodies limited to `max_body_bytes`.
pub fn router(state: Arc<AppState>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/embeddings", post(embeddings))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|uri: Uri| async move { ApiError::no_route(uri.path()) })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

fn reply(r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(IntoResponse::into_response)
}

/// The body as `T`: 413 past the size limit, 400 when it is not the request's JSON.
fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_long(format!("the request body is too large: {e}")),
        _ => ApiError::bad_request(format!("cannot read the request body: {e}")),
    })?;
    serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("the request body is not valid: {e}")))
}

async fn models(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    reply((|| {
        st.gate(&headers)?;
        let data: Vec<_> = st
            .models
            .iter()
            .map(|m| {
                json!({"id": m, "object": "model", "created": st.started, "owned_by": "vkformers",
                       "max_model_len": st.max_model_len, "parent": (m != &st.models[0]).then(|| st.models[0].clone())})
            })
            .collect();
        Ok(axum::Json(json!({"object": "list", "data": data})).into_response())
    })())
}

async fn health(State(st): State<Arc<AppState>>) -> Response {
    if st.draining.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"status": "draining"}))).into_response();
    }
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    ([("content-type", "text/plain; version=0.0.4")], st.metrics.render()).into_response()
}

fn head(job: &Job, kind: Kind, model: &str, include_usage: bool) -> Head {
    let n = job.first_id;
    let prefix = if kind == Kind::Chat { "chatcmpl" } else { "cmpl" };
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Head { kind, id: format!("{prefix}-{n}"), created, model: model.to_string(), include_usage }
}

/// The response to a generation `job`: an event stream when the request asked for one (`plan`),
/// else the whole completion once every choice is done (with log-probabilities if asked).
async fn answer(job: Job, kind: Kind, model: &str, plan: &Plan, logprobs: bool) -> Result<Response, ApiError> {
    let head = head(&job, kind, model, plan.include_usage);
    if plan.stream {
        return Ok(stream(head, job));
    }
    collect(head, job, logprobs).await
}

/// The request body as `T` once the caller is let in ([`AppState::gate`]: the API key, a drain).
fn admitted_body<T: DeserializeOwned>(
    st: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    st.gate(headers)?;
    parse(body)
}

fn encode(st: &AppState, text: &str, special: bool) -> Result<Vec<u32>, ApiError> {
    st.tokenizer.encode(text, special).map_err(|e| ApiError::bad_param("prompt", format!("cannot tokenize: {e}")))
}

async fn completions(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let req: CompletionRequest = admitted_body(&st, &headers, body)?;
        let model = st.model_index(&req.model)?;
        st.generates()?;
        req.refuse_unsupported()?;
        let prompts = req.prompt_ids(|t| encode(&st, t, true))?;
        let plan = plan(&req.common, &st.defaults, req.logprobs, st.defaults.eos.clone())?;
        // OpenAI's default for completions: 16 new tokens.
        let job = st.submit(model, prompts, &plan, |room| room.min(16))?;
        answer(job, Kind::Completion, &req.model, &plan, req.logprobs.is_some()).await
    };
    reply(run.await)
}

async fn chat(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Result<Bytes, BytesRejection>) -> Response {
    let run = async {
        let mut req: ChatRequest = admitted_body(&st, &headers, body)?;
        let model = st.model_index(&req.model)?;
        st.generates()?;
        if req.messages.is_empty() {
            return Err(ApiError::bad_param("messages", "`messages` is empty: give at least one message"));
        }
        let messages = req.messages.iter().map(|m| m.to_message()).collect::<Result<Vec<_>, _>>()?;
        let text = vkformers_chat::assistant_prompt(&st.tokenizer, &messages)
            .map_err(|e| ApiError::bad_param("messages", format!("the chat template failed: {e}")))?;
        let prompt = encode(&st, &text, false)?;
        let logprobs = req.settle_options();
        let plan = plan(&req.common, &st.defaults, logprobs, st.chat_eos.clone())?;
        // Chat's default: whatever the context leaves.
        let job = st.submit(model, vec![prompt], &plan, |room| room)?;
        answer(job, Kind::Chat, &req.model, &plan, logprobs.is_some()).await
    };
    reply(run.await)
}

async fn embeddings(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        let req: EmbeddingRequest = admitted_body(&st, &headers, body)?;
        st.model_index(&req.model)?;
        let Some(queue) = &st.embed else {
            return Err(ApiError::bad_request(format!(
                "`{}` is a generative model: /v1/embeddings needs an embedding model (a sentence-transformers \
                 or encoder folder)",
                st.models[0]
            )));
        };
        let (inputs, base64) = (req.inputs(st.vocab)?, req.base64()?);
        if let Some(d) = req.dimensions {
            return Err(ApiError::bad_param("dimensions", format!("{d}: this model only gives its own size")));
        }
        // Counted out when the response is ready (a drain waits for it).
        let _admitted = st.admit(1)?;
        let (reply, result) = tokio::sync::oneshot::channel();
        let sent = queue
            .lock()
            .map_err(|_| ApiError::internal("the embedding queue is poisoned"))?
            .send(EmbedJob { inputs, reply });
        sent.map_err(|_| ApiError::internal("the embedding thread has stopped"))?;
        let out = result.await.map_err(|_| ApiError::internal("the embedding thread has stopped"))?;
        let out = out.map_err(|e| ApiError::bad_param("input", e))?;
        Ok(axum::Json(response(&req.model, &out, base64)).into_response())
    };
    reply(run.await)
}
