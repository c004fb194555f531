//! Errors: OpenAI's JSON error shape (`{"error": {"message", "type", "param", "code"}}`) with the
//! HTTP status its clients map to exceptions, and the server's own start-up errors.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<&'static str>,
    pub code: &'static str,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), param: None, code }
    }

    /// 400: a malformed or out-of-range request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 400 naming the parameter at fault.
    pub fn bad_param(param: &'static str, message: impl Into<String>) -> Self {
        ApiError { param: Some(param), ..Self::bad_request(message) }
    }

    /// 401: no API key, or not the server's.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "missing or wrong API key: send `Authorization: Bearer KEY` with the server's --api-key",
        )
    }

    /// 404: a model the server does not serve.
    pub fn unknown_model(name: &str, served: &[String]) -> Self {
        let msg = format!("the model `{name}` does not exist here; this server serves: {}", served.join(", "));
        ApiError { param: Some("model"), ..Self::new(StatusCode::NOT_FOUND, "model_not_found", msg) }
    }

    /// 404: no such route.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no route {path}: see GET /v1/models, POST /v1/completions, POST /v1/chat/completions"),
        )
    }

    /// 413: a prompt (plus its new tokens) past the context, or a body past the size limit.
    pub fn too_long(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "context_length_exceeded", message)
    }

    /// 429: the queue is full.
    pub fn queue_full(max_queue: usize) -> Self {
        let msg = format!("the server's queue is full ({max_queue} waiting requests): retry later");
        Self::new(StatusCode::TOO_MANY_REQUESTS, "queue_full", msg)
    }

    /// 503: the server is draining after SIGTERM.
    pub fn shutting_down() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down: send the request to another one",
        )
    }

    /// 500: the engine failed while running the request.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "engine_error", message)
    }

    /// OpenAI's `type` for the status.
    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"message": self.message, "type": self.kind(), "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("{0}")]
    Load(String),
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the engine thread stopped unexpectedly")]
    EngineGone,
}
