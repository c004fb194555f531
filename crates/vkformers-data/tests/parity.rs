//! Ids and labels equal to transformers' for every row of tests/data/*.jsonl, under four
//! tokenizers (tests/fixtures_data/reference.json, written by tools/parity/data_reference.py:
//! chat labels from `apply_chat_template(return_assistant_tokens_mask=True)` with
//! `{% generation %}`-marked copies of the templates; vkformers is given the unmarked ones).

mod common;

use common::{data, root, tokenizer};
use serde_json::Value;
use vkformers_data::{read_dataset, DataError, Example, ReadOptions};

fn reference() -> Value {
    let path = root().join("tests/fixtures_data/reference.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn example(v: &Value) -> Example {
    let ids = v["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let labels = v["labels"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap() as i32).collect();
    Example::new(ids, labels)
}

#[test]
fn every_row_matches_transformers() {
    let reference = reference();
    let mut compared = 0;
    for (name, tok_ref) in reference.as_object().unwrap() {
        let tok = tokenizer(name);
        for (file, rows) in tok_ref["files"].as_object().unwrap() {
            let got = read_dataset(&[data(file)], &tok, &ReadOptions::default()).unwrap();
            let want: Vec<Example> = rows.as_array().unwrap().iter().map(example).collect();
            assert_eq!(got.examples.len(), want.len(), "{name} {file}");
            for (i, (g, w)) in got.examples.iter().zip(&want).enumerate() {
                assert_eq!(g, w, "{name} {file} row {}", i + 1);
                compared += 1;
            }
            assert_eq!(got.plain_text, file == "text.jsonl", "{name} {file}");
        }
    }
    assert_eq!(compared, 3 * 17 + 13, "rows of bpe, chatml, llama3 (text, prompts, chat) and plain (no chat)");
}

#[test]
fn encoding_matches_transformers() {
    for (name, tok_ref) in reference().as_object().unwrap() {
        let tok = tokenizer(name);
        for sample in tok_ref["samples"].as_array().unwrap() {
            let want: Vec<u32> = sample["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert_eq!(tok.encode(sample["text"].as_str().unwrap(), true).unwrap(), want, "{name}");
        }
    }
}

#[test]
fn chat_rows_without_a_chat_template_are_an_error() {
    let e = read_dataset(&[data("chat.jsonl")], &tokenizer("plain"), &ReadOptions::default()).unwrap_err();
    assert!(matches!(e, DataError::Chat { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("chat.jsonl:1:") && text.contains("chat_template"), "{text}");
}

/// The committed bpe tokenizer is what `train_bpe_tokenizer` writes for the committed corpus,
/// so transformers' view of it above is a check of the trainer's output.
#[test]
fn bpe_fixture_is_the_trainers_output() {
    let dir = tempfile::tempdir().unwrap();
    vkformers_data::train_bpe_tokenizer(&[data("corpus.txt")], 400, dir.path()).unwrap();
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        let got = std::fs::read_to_string(dir.path().join(file)).unwrap();
        let want = std::fs::read_to_string(root().join("tests/fixtures_data/bpe").join(file)).unwrap();
        assert!(got == want, "{file} differs from the committed fixture");
    }
}
