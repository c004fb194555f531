//! The checks a request's prompts pass before they are queued: non-empty, every id in the
//! vocabulary, and prompt + new tokens within the server's `--max-model-len`. Pure, so the fuzz
//! target `serve_request` drives the same code the routes do.

use crate::error::ApiError;

/// The server's limits a prompt is checked against.
#[derive(Clone, Copy, Debug)]
pub struct PromptLimits {
    /// The model's vocabulary size (token ids must be below it).
    pub vocab: usize,
    /// Longest prompt + new tokens a row may hold.
    pub max_model_len: usize,
}

impl PromptLimits {
    /// The new-token budget of each prompt: `asked` (the request's max_tokens) where it fits,
    /// else `default(room)` when the request names none; a 400 for an empty prompt or an id past
    /// the vocabulary, a too-long error when a prompt (with `asked`) does not fit.
    pub fn admit(
        &self,
        prompts: &[Vec<u32>],
        asked: Option<usize>,
        default: fn(usize) -> usize,
    ) -> Result<Vec<usize>, ApiError> {
        if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
            return Err(ApiError::bad_param("prompt", "an empty prompt: give at least one token"));
        }
        if let Some(bad) = prompts.iter().flatten().find(|&&t| t as usize >= self.vocab) {
            let msg = format!("token id {bad} is outside the model's vocabulary of {} ids", self.vocab);
            return Err(ApiError::bad_param("prompt", msg));
        }
        prompts.iter().map(|p| self.fit(p.len(), asked, default)).collect()
    }

    /// New tokens for a prompt of `len` tokens: `asked` if it fits in the room the context
    /// leaves, else a 413 that says how much fits; `default(room)` when nothing is asked.
    fn fit(&self, len: usize, asked: Option<usize>, default: fn(usize) -> usize) -> Result<usize, ApiError> {
        let max = self.max_model_len;
        if len >= max {
            return Err(ApiError::too_long(format!(
                "the prompt has {len} tokens but the server's max-model-len is {max}: shorten it"
            )));
        }
        let room = max - len;
        match asked {
            Some(n) if n > room => Err(ApiError::too_long(format!(
                "the prompt ({len} tokens) and max_tokens ({n}) exceed the server's max-model-len of {max}: \
                 ask for at most {room} tokens or shorten the prompt"
            ))),
            Some(n) => Ok(n),
            None => Ok(default(room)),
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    const LIMITS: PromptLimits = PromptLimits { vocab: 100, max_model_len: 10 };

    fn half(room: usize) -> usize {
        room / 2
    }

    #[test]
    fn prompts_that_fit_get_their_budgets() {
        assert_eq!(LIMITS.admit(&[vec![1, 2, 3], vec![99]], Some(4), half).unwrap(), vec![4, 4]);
        // Nothing asked: the default of the room each prompt leaves (10 - 3, 10 - 1).
        assert_eq!(LIMITS.admit(&[vec![1, 2, 3], vec![99]], None, half).unwrap(), vec![3, 4]);
        // Asked exactly the room.
        assert_eq!(LIMITS.admit(&[vec![5; 9]], Some(1), half).unwrap(), vec![1]);
    }

    #[test]
    fn bad_prompts_are_the_errors_the_routes_return() {
        let err = |prompts: &[Vec<u32>], asked| LIMITS.admit(prompts, asked, half).unwrap_err();
        for empty in [&[][..], &[vec![1], vec![]][..]] {
            let e = err(empty, None);
            assert_eq!((e.status, e.param), (StatusCode::BAD_REQUEST, Some("prompt")), "{}", e.message);
        }
        let e = err(&[vec![1, 100]], None);
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("token id 100 is outside the model's vocabulary of 100 ids"), "{}", e.message);
        let e = err(&[vec![1; 10]], None);
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.message.contains("the prompt has 10 tokens but the server's max-model-len is 10"), "{}", e.message);
        let e = err(&[vec![1; 4]], Some(7));
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.message.contains("ask for at most 6 tokens"), "{}", e.message);
    }
}
