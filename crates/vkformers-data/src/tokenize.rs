//! One row of known shape to one [`Example`].

use vkformers_chat::Message;
use vkformers_io::HfTokenizer;

use crate::chat::{chat_example, ChatTemplate};
use crate::encode::{encode_spans, Spans};
use crate::error::{DataError, Location, Result};
use crate::prompt::{instruction_message, plain_instruction, plain_qa};
use crate::shape::Row;
use crate::{Example, ReadOptions};

/// What every row of a dataset is tokenized with.
pub(crate) struct Tokenize<'a> {
    pub tok: &'a HfTokenizer,
    pub chat: Option<ChatTemplate>,
    pub opts: &'a ReadOptions,
}

impl Tokenize<'_> {
    pub(crate) fn example(&self, row: &Row, location: &Location) -> Result<Example> {
        match row {
            Row::Text(text) => self.text(text, location),
            Row::Completion { prompt, completion } => self.prompt_response(prompt, completion, location),
            Row::Instruction { instruction, input, output } => match &self.chat {
                Some(_) => self.single_turn(instruction_message(instruction, input), output, location),
                None => {
                    let (prompt, response) = plain_instruction(instruction, input, output);
                    self.prompt_response(&prompt, &response, location)
                }
            },
            Row::Qa { question, answer } => match &self.chat {
                Some(_) => self.single_turn(question.clone(), answer, location),
                None => {
                    let (prompt, response) = plain_qa(question, answer);
                    self.prompt_response(&prompt, &response, location)
                }
            },
            Row::Chat(messages) => self.conversation(messages, 0, location),
            Row::ChatCompletion { prompt, completion } => {
                let messages: Vec<Message> = prompt.iter().chain(completion).cloned().collect();
                self.conversation(&messages, prompt.len(), location)
            }
            Row::Tokens { input_ids, labels } => Ok(Example {
                input_ids: input_ids.clone(),
                labels: labels.clone().unwrap_or_else(|| input_ids.iter().map(|&id| id as i32).collect()),
            }),
        }
    }

    /// Plain text: BOS from the post-processor, EOS appended, every token trained.
    pub(crate) fn text(&self, text: &str, location: &Location) -> Result<Example> {
        let whole = std::iter::once(0..text.len()).collect();
        let spans =
            Spans { text, trained: whole, add_special_tokens: true, add_eos: self.opts.add_eos, train_all: true };
        encode_spans(self.tok, &spans, location)
    }

    /// `prompt` followed literally by `response`, tokenized as one text; the response trained.
    fn prompt_response(&self, prompt: &str, response: &str, location: &Location) -> Result<Example> {
        let text = format!("{prompt}{response}");
        let trained = std::iter::once(prompt.len()..text.len()).collect();
        let spans = Spans {
            text: &text,
            trained,
            add_special_tokens: true,
            add_eos: self.opts.add_eos,
            train_all: self.opts.train_on_prompt,
        };
        encode_spans(self.tok, &spans, location)
    }

    /// A user message and the assistant's answer, through the chat template.
    fn single_turn(&self, user: String, answer: &str, location: &Location) -> Result<Example> {
        self.conversation(&[Message::user(user), Message::assistant(answer)], 0, location)
    }

    fn conversation(&self, messages: &[Message], trained_from: usize, location: &Location) -> Result<Example> {
        let Some(chat) = &self.chat else {
            return Err(DataError::Chat {
                location: location.clone(),
                reason: "chat rows need the tokenizer's chat template, and its tokenizer_config.json has no \
                         `chat_template`; add one, or use `prompt`/`completion` rows"
                    .to_string(),
            });
        };
        chat_example(self.tok, chat, messages, trained_from, self.opts.train_on_prompt, location)
    }
}
