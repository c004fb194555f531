//! One row of known shape to one [`Example`].

use vkformers_chat::Message;
use vkformers_io::HfTokenizer;

use crate::chat::{chat_example, ChatTemplate};
use crate::encode::{encode_spans, Spans};
use crate::error::{DataError, Location, Result};
use crate::label::{parse_label, token_class};
use crate::prompt::{instruction_message, plain_instruction, plain_qa};
use crate::shape::Row;
use crate::{Example, ReadOptions, IGNORE_INDEX};
use serde_json::Value;

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
            Row::Tokens { input_ids, labels } => Ok(Example::new(
                input_ids.clone(),
                labels.clone().unwrap_or_else(|| input_ids.iter().map(|&id| id as i32).collect()),
            )),
            Row::Classify { text, text_pair, label } => self.classify(text, text_pair.as_deref(), label, location),
            Row::Tagged { words, labels } => self.tagged(words, labels, location),
        }
    }

    /// `text` (+ `text_pair`) as the tokenizer encodes a (pair of) sequence(s) with its special
    /// tokens and segment ids; no per-token target, the row's label as the target.
    fn classify(&self, text: &str, pair: Option<&str>, label: &Value, location: &Location) -> Result<Example> {
        let encoded = match pair {
            Some(p) => self.tok.inner().encode((text, p), true),
            None => self.tok.inner().encode(text, true),
        };
        let e = encoded.map_err(|e| DataError::Tokenize { location: location.clone(), message: e.to_string() })?;
        let target =
            parse_label(label, &self.opts.label2id, "label").map_err(|reason| DataError::bad_row(location, reason))?;
        Ok(Example {
            input_ids: e.get_ids().to_vec(),
            labels: vec![IGNORE_INDEX; e.get_ids().len()],
            token_types: e.get_type_ids().to_vec(),
            target: Some(target),
            ..Default::default()
        })
    }

    /// Words encoded as pre-split input (`is_split_into_words=True`); each word's label on its
    /// first sub-word, -100 on its other sub-words and on special tokens (transformers'
    /// token-classification recipe).
    fn tagged(&self, words: &[String], labels: &[Value], location: &Location) -> Result<Example> {
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let e = self
            .tok
            .inner()
            .encode(words.as_slice(), true)
            .map_err(|e| DataError::Tokenize { location: location.clone(), message: e.to_string() })?;
        let classes = labels
            .iter()
            .map(|v| token_class(v, &self.opts.label2id, "labels"))
            .collect::<std::result::Result<Vec<i64>, String>>()
            .map_err(|reason| DataError::bad_row(location, reason))?;
        let mut previous = None;
        let token_labels = e
            .get_word_ids()
            .iter()
            .map(|w| {
                let first = w.is_some() && *w != previous;
                previous = *w;
                match w {
                    Some(i) if first => classes.get(*i as usize).map_or(IGNORE_INDEX, |&c| c as i32),
                    _ => IGNORE_INDEX,
                }
            })
            .collect();
        Ok(Example {
            input_ids: e.get_ids().to_vec(),
            labels: token_labels,
            token_types: e.get_type_ids().to_vec(),
            target: None,
            ..Default::default()
        })
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
