//! Errors of chat-template rendering.

/// Result of this crate's functions.
pub type Result<T> = std::result::Result<T, ChatError>;

/// Why a chat template could not be selected or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The template does not parse.
    #[error("chat template syntax error on line {line}: {message}\n    {line}: {line_text}")]
    Syntax {
        /// 1-based line of the template.
        line: usize,
        /// What the parser found wrong.
        message: String,
        /// The text of that template line.
        line_text: String,
    },
    /// The template called `raise_exception(message)`, as templates do to reject a conversation.
    #[error("chat template rejected the conversation: {message}")]
    Raised {
        /// The message given to `raise_exception`, exactly.
        message: String,
        /// 1-based template line of the call, when known.
        line: Option<usize>,
    },
    /// Any other failure while rendering (unknown filter, bad operand types, ...).
    #[error("chat template failed to render{}: {message}", line.map(|l| format!(" on line {l}")).unwrap_or_default())]
    Render {
        /// What went wrong.
        message: String,
        /// 1-based template line, when known.
        line: Option<usize>,
    },
    /// The extra template variables are not a JSON object (or null).
    #[error("extra chat-template variables must be a JSON object or null, got {0}")]
    ExtraNotObject(String),
    /// An extra variable would replace one that [`render`](crate::render) sets itself.
    #[error("extra chat-template variable `{0}` is set by render() itself and cannot be overridden")]
    ReservedVariable(String),
    /// The tokenizer configuration has no chat template of that name.
    #[error("{0}")]
    NoTemplate(String),
}
