//! Classification rows tokenized as transformers does (references written by
//! tools/parity/encoder_train_reference.py into tests/fixtures_data/wordpiece/): a text and its
//! label, a text pair with segment ids, and words whose labels sit on each word's first sub-word.

mod common;

use serde_json::Value;
use vkformers_data::{read_dataset, LabelMap, ReadOptions, SeqLabel};

#[test]
fn classification_rows_match_transformers() {
    let dir = common::root().join("tests/fixtures_data/wordpiece");
    let tok = vkformers_io::HfTokenizer::from_dir(&dir).unwrap();
    let label2id: LabelMap = (0..5).map(|i| (format!("LABEL_{i}"), i)).collect();
    let opts = ReadOptions { label2id, add_eos: false, ..Default::default() };
    let got = read_dataset(&[dir.join("text_rows.jsonl")], &tok, &opts).unwrap();
    assert!(!got.plain_text);
    let expected = std::fs::read_to_string(dir.join("text_expected.jsonl")).unwrap();
    for (i, (line, e)) in expected.lines().zip(&got.examples).enumerate() {
        let want: Value = serde_json::from_str(line).unwrap();
        let ints = |k: &str| -> Vec<i64> { want[k].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect() };
        assert_eq!(e.input_ids.iter().map(|&x| i64::from(x)).collect::<Vec<_>>(), ints("input_ids"), "row {i}");
        assert_eq!(e.token_types.iter().map(|&x| i64::from(x)).collect::<Vec<_>>(), ints("token_type_ids"), "row {i}");
        match want.get("label") {
            Some(l) => {
                assert_eq!(e.target, Some(SeqLabel::Class(l.as_i64().unwrap())), "row {i}");
                assert!(e.labels.iter().all(|&l| l == -100), "row {i}: no token targets");
            }
            None => {
                assert_eq!(e.target, None);
                assert_eq!(e.labels.iter().map(|&x| i64::from(x)).collect::<Vec<_>>(), ints("labels"), "row {i}");
            }
        }
    }
    assert_eq!(got.examples.len(), expected.lines().count());
}

#[test]
fn a_label_name_the_config_lacks_is_an_error_naming_the_row() {
    let dir = common::root().join("tests/fixtures_data/wordpiece");
    let tok = vkformers_io::HfTokenizer::from_dir(&dir).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let rows = common::write(
        tmp.path(),
        "rows.jsonl",
        "{\"text\": \"a cat\", \"label\": 0}\n{\"text\": \"a dog\", \"label\": \"POSITIVE\"}\n",
    );
    let e = read_dataset(&[rows], &tok, &ReadOptions::default()).unwrap_err().to_string();
    assert!(e.contains("rows.jsonl:2") && e.contains("POSITIVE") && e.contains("label2id"), "{e}");
}
