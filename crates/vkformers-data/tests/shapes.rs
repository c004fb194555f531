//! Options and row shapes beyond the transformers parity rows: joint tokenization across the
//! prompt/response boundary, train_on_prompt, add_eos, max_rows, JSON arrays, other templates.

mod common;

use common::{data, tokenizer, write};
use vkformers_data::{read_dataset, Example, ReadOptions, IGNORE_INDEX};
use vkformers_io::HfTokenizer;

fn read(files: &[std::path::PathBuf], tok: &HfTokenizer, opts: &ReadOptions) -> Vec<Example> {
    read_dataset(files, tok, opts).unwrap().examples
}

/// Ids of the tokens whose label is trained (not -100).
fn trained_ids(e: &Example) -> Vec<u32> {
    e.input_ids.iter().zip(&e.labels).filter(|(_, &l)| l != IGNORE_INDEX).map(|(&i, _)| i).collect()
}

#[test]
fn a_token_across_the_prompt_boundary_is_trained_and_ids_are_the_joint_tokenization() {
    let tok = tokenizer("bpe");
    let eos = tok.eos().unwrap().id;
    let dir = tempfile::tempdir().unwrap();
    let (prompt, completion) = ("The capital of Fra", "nce is Paris.");
    let row = serde_json::json!({"prompt": prompt, "completion": completion}).to_string();
    let file = write(dir.path(), "cut.jsonl", &row);
    let e = &read(&[file], &tok, &ReadOptions::default())[0];

    let mut joint = tok.encode(&format!("{prompt}{completion}"), true).unwrap();
    joint.push(eos);
    assert_eq!(e.input_ids, joint, "ids are the tokenization of the full text");
    let mut apart = tok.encode(prompt, true).unwrap();
    apart.extend(tok.encode(completion, false).unwrap());
    apart.push(eos);
    assert_ne!(e.input_ids, apart, "this row has a merge across the boundary, which tokenizing apart misses");

    // Labels: masked prefix, then every token to the end trained (with its own id).
    let first = e.labels.iter().position(|&l| l != IGNORE_INDEX).unwrap();
    assert!(e.labels[first..].iter().zip(&e.input_ids[first..]).all(|(&l, &i)| l == i as i32));
    let masked = tok.decode(&e.input_ids[..first], true).unwrap();
    let trained = tok.decode(&trained_ids(e), true).unwrap();
    assert!(prompt.starts_with(&masked) && masked.len() < prompt.len(), "{masked:?}");
    assert!(trained.ends_with(completion) && trained.len() > completion.len(), "{trained:?}");
}

#[test]
fn train_on_prompt_trains_every_token() {
    let tok = tokenizer("chatml");
    let files = [data("prompts.jsonl"), data("chat.jsonl")];
    let masked = read(&files, &tok, &ReadOptions::default());
    let all = read(&files, &tok, &ReadOptions { train_on_prompt: true, ..Default::default() });
    let mut masked_rows = 0;
    for (i, (m, a)) in masked.iter().zip(&all).enumerate() {
        assert_eq!(m.input_ids, a.input_ids);
        masked_rows += usize::from(m.labels.contains(&IGNORE_INDEX));
        if a.input_ids == [5, 6, 7, 8, 9] {
            // A pre-tokenized row keeps its own labels.
            assert_eq!(a.labels, [-100, -100, 7, 8, 9]);
        } else {
            let ids: Vec<i32> = a.input_ids.iter().map(|&i| i as i32).collect();
            assert_eq!(a.labels, ids, "row {i}");
        }
    }
    assert_eq!(masked_rows, masked.len() - 1, "every row but `input_ids` without labels masks its prompt");
}

#[test]
fn eos_is_appended_once_and_only_when_asked() {
    let tok = tokenizer("bpe");
    let eos = tok.eos().unwrap().id;
    let with = read(&[data("text.jsonl")], &tok, &ReadOptions::default());
    let without = read(&[data("text.jsonl")], &tok, &ReadOptions { add_eos: false, ..Default::default() });
    for w in &with {
        assert_eq!(*w.input_ids.last().unwrap(), eos);
        assert_ne!(w.input_ids[w.input_ids.len() - 2], eos, "EOS doubled");
        assert_eq!(w.input_ids.len(), w.labels.len());
    }
    // Row 4 ends with `</s>` in its text: that token is the EOS, nothing is added.
    assert_eq!(with[3], without[3]);
    for i in [0, 1, 2, 4] {
        assert_eq!(with[i].input_ids[..with[i].input_ids.len() - 1], without[i].input_ids[..]);
        assert_ne!(*without[i].input_ids.last().unwrap(), eos);
    }
}

#[test]
fn max_rows_counts_over_files_and_plain_text_needs_every_row_to_be_text() {
    let tok = tokenizer("bpe");
    let files = [data("text.jsonl"), data("prompts.jsonl")];
    let two = read_dataset(&files, &tok, &ReadOptions { max_rows: Some(2), ..Default::default() }).unwrap();
    assert_eq!(two.examples.len(), 2);
    assert!(two.plain_text);
    let seven = read_dataset(&files, &tok, &ReadOptions { max_rows: Some(7), ..Default::default() }).unwrap();
    assert_eq!(seven.examples.len(), 7);
    assert!(!seven.plain_text);
    let all = read_dataset(&files, &tok, &ReadOptions::default()).unwrap();
    assert_eq!(all.examples.len(), 13);
    assert_eq!(all.examples[..7], seven.examples[..]);
}

#[test]
fn json_array_and_json_lines_files_read_like_jsonl() {
    let tok = tokenizer("chatml");
    let dir = tempfile::tempdir().unwrap();
    let jsonl = std::fs::read_to_string(data("chat.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = jsonl.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let array = write(dir.path(), "rows.json", &format!("\n  {}", serde_json::to_string_pretty(&rows).unwrap()));
    let lines = write(dir.path(), "lines.json", &jsonl);
    let want = read(&[data("chat.jsonl")], &tok, &ReadOptions::default());
    assert_eq!(read(&[array], &tok, &ReadOptions::default()), want);
    assert_eq!(read(&[lines], &tok, &ReadOptions::default()), want);
}

#[test]
fn pre_tokenized_rows_are_used_as_they_are() {
    let tok = tokenizer("bpe");
    let dir = tempfile::tempdir().unwrap();
    let file =
        write(dir.path(), "ids.jsonl", "{\"input_ids\": [3, 1, 4], \"labels\": [-100, 1, -100]}\n{\"input_ids\": [7]}");
    let got = read(&[file], &tok, &ReadOptions { train_on_prompt: true, ..Default::default() });
    assert_eq!(got[0], Example::new(vec![3, 1, 4], vec![-100, 1, -100]));
    assert_eq!(got[1], Example::new(vec![7], vec![7]));
}

/// A template with no special tokens, no `add_generation_prompt` branch and no generation
/// markers: the assistant turn is found from the renderings alone (its `assistant: ` header
/// is trained since the template gives no generation prompt to tell it apart).
#[test]
fn a_bare_template_still_finds_the_assistant_turns() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = common::root().join("tests/fixtures_data/plain");
    std::fs::copy(fixture.join("tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
    let template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
    let config = serde_json::json!({"eos_token": "</s>", "chat_template": template});
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
    let tok = HfTokenizer::from_dir(dir.path()).unwrap();
    let row = serde_json::json!({"messages": [
        {"role": "user", "content": "What is two plus two?"}, {"role": "assistant", "content": "Four."},
        {"role": "user", "content": "And three?"}, {"role": "assistant", "content": "Six, no: five."}]});
    let file = write(dir.path(), "chat.jsonl", &row.to_string());
    let e = &read(&[file], &tok, &ReadOptions::default())[0];
    let text = "user: What is two plus two?\nassistant: Four.\nuser: And three?\nassistant: Six, no: five.\n";
    assert_eq!(e.input_ids, tok.encode(text, false).unwrap(), "no BOS and no EOS added to chat rows");
    let trained = tok.decode(&trained_ids(e), false).unwrap();
    assert_eq!(trained, "assistant: Four.assistant: Six, no: five.");
}

/// Instruction and Q&A rows go through the chat template when there is one, as a user and an
/// assistant message.
#[test]
fn instruction_rows_use_the_chat_template_when_there_is_one() {
    let tok = tokenizer("bpe");
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "i.jsonl", r#"{"instruction": "Translate.", "input": "hi", "output": "Salut."}"#);
    let e = &read(&[file], &tok, &ReadOptions::default())[0];
    let text = "<s><|user|>\nTranslate.\n\nhi</s>\n<|assistant|>\nSalut.</s>\n";
    assert_eq!(e.input_ids, tok.encode(text, false).unwrap());
    assert_eq!(tok.decode(&trained_ids(e), false).unwrap(), "Salut.</s>");
}

/// A corpus of text files: one document per file, like a `text` row each.
#[test]
fn text_files_are_one_document_each() {
    let tok = tokenizer("bpe");
    let dir = tempfile::tempdir().unwrap();
    let docs = ["fn main() {\n    println!(\"hi\");\n}\n", "# Title\n\nSome prose.\n"];
    let a = write(dir.path(), "a.rs", docs[0]);
    let blank = write(dir.path(), "blank.md", " \n\n");
    let b = write(dir.path(), "b.md", docs[1]);
    let got = vkformers_data::read_text_files(&[a, blank.clone(), b], &tok, &ReadOptions::default()).unwrap();
    assert!(got.plain_text);
    let lines: Vec<String> = docs.iter().map(|d| serde_json::json!({ "text": d }).to_string()).collect();
    let jsonl = write(dir.path(), "docs.jsonl", &lines.join("\n"));
    assert_eq!(got.examples, read(&[jsonl], &tok, &ReadOptions::default()));

    let e = vkformers_data::read_text_files(&[blank], &tok, &ReadOptions::default()).unwrap_err();
    assert!(matches!(e, vkformers_data::DataError::Empty { .. }), "{e:?}");
    let latin1 = dir.path().join("latin1.txt");
    std::fs::write(&latin1, b"caf\xe9").unwrap();
    let e = vkformers_data::read_text_files(&[latin1], &tok, &ReadOptions::default()).unwrap_err();
    assert!(e.to_string().contains("latin1.txt: not UTF-8 text"), "{e}");
}
