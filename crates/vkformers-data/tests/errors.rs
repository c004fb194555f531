//! Bad input: every malformed row is reported with its file and line (or array item / Parquet
//! row) and the accepted shapes; missing, unknown and empty files say so.

mod common;

use common::{tokenizer, write};
use vkformers_data::{read_dataset, DataError, Location, Place, ReadOptions};

fn read_err(files: &[std::path::PathBuf]) -> DataError {
    read_dataset(files, &tokenizer("chatml"), &ReadOptions::default()).unwrap_err()
}

/// A file whose first two lines are a good row and a blank line, then `line` on line 3.
fn bad_line_error(line: &str) -> (DataError, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "rows.jsonl", &format!("{{\"text\": \"fine\"}}\n\n{line}\n{{\"text\": \"fine\"}}\n"));
    (read_err(std::slice::from_ref(&file)), file, dir)
}

#[test]
fn each_malformed_row_names_file_line_and_reason() {
    let cases = [
        (r#"{"text": "unterminated"#, "not valid JSON at column 22: EOF while parsing a string"),
        (r#"{"foo": 1, "bar": 2}"#, "no known row shape; the row has `foo`, `bar`"),
        ("{}", "the row is empty"),
        ("[1, 2]", "the row is a list, not a JSON object"),
        (r#"{"text": 5}"#, "`text` must be a string, not a number"),
        (r#"{"text": ""}"#, "`text` is empty"),
        (r#"{"content": null}"#, "no known row shape"),
        (r#"{"prompt": "only a prompt"}"#, "the row has `prompt` but no `completion`"),
        (r#"{"prompt": [{"role": "user", "content": "x"}], "completion": "y"}"#, "both be lists of messages"),
        (r#"{"instruction": "x", "output": ["y"]}"#, "`output` must be a string, not a list"),
        (r#"{"instruction": "x", "input": 3, "output": "y"}"#, "`input` must be a string"),
        (r#"{"question": "why?"}"#, "no `answer`"),
        (r#"{"messages": "hi"}"#, "`messages` must be a list"),
        (r#"{"messages": []}"#, "`messages` is an empty list"),
        (r#"{"messages": [{"role": "user"}]}"#, "`messages[0]` must be an object with string `role` and `content`"),
        (r#"{"messages": [{"role": "user", "content": "hi"}]}"#, "no `assistant` message"),
        (r#"{"input_ids": []}"#, "`input_ids` is an empty list"),
        (r#"{"input_ids": [1, -2]}"#, "`input_ids[1]` is -2, not a valid token id"),
        (r#"{"input_ids": [1, 2], "labels": [1]}"#, "`labels` has 1 entries but `input_ids` has 2"),
        (r#"{"input_ids": [1, 2], "labels": [1, -5]}"#, "`labels[1]` is -5"),
        (r#"{"input_ids": "1 2"}"#, "`input_ids` must be a list of integers"),
    ];
    for (line, reason) in cases {
        let (e, file, _dir) = bad_line_error(line);
        let text = e.to_string();
        assert!(text.starts_with(&format!("{}:3: ", file.display())), "{line}: {text}");
        assert!(text.contains(reason), "{line}: want {reason:?} in {text}");
        match &e {
            DataError::BadRow { location, .. } => {
                assert_eq!(location, &Location { file: file.clone(), place: Place::Line(3) });
                assert!(text.contains("`messages`") && text.contains("`input_ids`"), "accepted shapes listed: {text}");
            }
            DataError::Chat { location, .. } => assert_eq!(location.place, Place::Line(3)),
            other => panic!("{line}: {other:?}"),
        }
    }
}

#[test]
fn files_that_are_missing_unknown_empty_or_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.jsonl");
    let e = read_err(std::slice::from_ref(&missing));
    assert!(matches!(&e, DataError::FileNotFound { path } if path == &missing), "{e:?}");
    assert!(e.to_string().contains("no such file"));

    let csv = write(dir.path(), "rows.csv", "text\nhello\n");
    assert!(matches!(read_err(&[csv]), DataError::UnknownFormat { .. }));

    assert!(matches!(read_err(&[]), DataError::NoFiles));

    let empty = write(dir.path(), "empty.jsonl", "");
    let blank = write(dir.path(), "blank.jsonl", "\n  \n\n");
    let e = read_err(&[empty, blank]);
    assert!(matches!(e, DataError::Empty { .. }), "{e:?}");
    assert!(e.to_string().contains("empty.jsonl, ") && e.to_string().contains("blank.jsonl"), "{e}");
    let none = write(dir.path(), "none.json", "[]");
    assert!(matches!(read_err(&[none]), DataError::Empty { .. }));

    let bad_array = write(dir.path(), "bad.json", "[\n  {\"text\": \"a\"},\n  {\"text\": }\n]");
    let e = read_err(&[bad_array]);
    assert!(matches!(e, DataError::BadJsonFile { line: 3, .. }), "{e:?}");
    assert!(e.to_string().contains("bad.json:3:"), "{e}");

    let item = write(dir.path(), "item.json", "[{\"text\": \"a\"}, {\"txt\": \"b\"}]");
    let e = read_err(&[item]);
    assert!(e.to_string().contains("item.json: array item 2: no known row shape"), "{e}");

    let utf8 = dir.path().join("latin1.jsonl");
    std::fs::write(&utf8, b"{\"text\": \"ok\"}\n{\"text\": \"caf\xe9\"}\n").unwrap();
    let e = read_err(&[utf8]);
    assert!(e.to_string().contains("latin1.jsonl:2: the line is not valid UTF-8"), "{e}");

    let bom = write(dir.path(), "bom.jsonl", "\u{feff}{\"text\": \"a byte-order mark first\"}\n");
    assert_eq!(read_dataset(&[bom], &tokenizer("bpe"), &ReadOptions::default()).unwrap().examples.len(), 1);

    let corrupt = write(dir.path(), "corrupt.parquet", "PAR1 this is not parquet");
    let e = read_err(&[corrupt]);
    assert!(matches!(e, DataError::Parquet { .. }), "{e:?}");
    assert!(e.to_string().contains("corrupt.parquet: cannot read Parquet"), "{e}");
}

/// A conversation the template refuses (`raise_exception`) is reported with its line and the
/// template's own message.
#[test]
fn a_template_rejecting_a_conversation_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = common::root().join("tests/fixtures_data/plain");
    std::fs::copy(fixture.join("tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
    let template = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}\
                    {% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
    let config = serde_json::json!({"eos_token": "</s>", "chat_template": template});
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
    let tok = vkformers_io::HfTokenizer::from_dir(dir.path()).unwrap();
    let rows = [
        r#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}"#,
        r#"{"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}"#,
    ];
    let file = write(dir.path(), "chat.jsonl", &rows.join("\n"));
    let e = read_dataset(std::slice::from_ref(&file), &tok, &ReadOptions::default()).unwrap_err();
    assert!(matches!(e, DataError::Chat { .. }), "{e:?}");
    let want = format!("{}:2: chat template rejected the conversation: System role not supported", file.display());
    assert_eq!(e.to_string(), want);
}
