//! The prompt of instruction and Q&A rows.
//!
//! With a chat template, the prompt is one `user` message and the response one `assistant`
//! message rendered through it (what the model will see when chatting, as TRL does with
//! conversational data). Without one, a fixed plain layout is used:
//!
//! ```text
//! ### Instruction:
//! {instruction}
//!
//! ### Input:            <- only when `input` is not empty
//! {input}
//!
//! ### Response:
//! {output}
//! ```
//!
//! and `Question: {question}\nAnswer: {answer}`, with BOS from the tokenizer and EOS appended.
//! In both layouts the response part starts at the answer text (the space before a Q&A answer
//! belongs to it, so byte-level BPE's ` word` tokens are not cut).

/// The user message of an instruction row: the instruction, then the input after a blank line.
pub(crate) fn instruction_message(instruction: &str, input: &str) -> String {
    if input.is_empty() {
        instruction.to_string()
    } else {
        format!("{instruction}\n\n{input}")
    }
}

/// `(prompt, response)` of an instruction row in the plain layout.
pub(crate) fn plain_instruction(instruction: &str, input: &str, output: &str) -> (String, String) {
    let prompt = if input.is_empty() {
        format!("### Instruction:\n{instruction}\n\n### Response:\n")
    } else {
        format!("### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
    };
    (prompt, output.to_string())
}

/// `(prompt, response)` of a Q&A row in the plain layout.
pub(crate) fn plain_qa(question: &str, answer: &str) -> (String, String) {
    (format!("Question: {question}\nAnswer:"), format!(" {answer}"))
}
