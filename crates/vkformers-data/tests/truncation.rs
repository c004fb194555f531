//! `Dataset::truncate`: rows cut to the sequence length are counted (with the longest length),
//! rows left with no token to predict are named by file:line and dropped for training.

use std::path::PathBuf;

use vkformers_data::{Dataset, Example, Location, Place};

fn ex(ids: &[u32], labels: &[i32]) -> Example {
    Example::new(ids.to_vec(), labels.to_vec())
}

fn dataset() -> Dataset {
    let examples = vec![
        ex(&[1, 2, 3, 4, 5, 6], &[-100, -100, -100, -100, 5, 6]),
        ex(&[1, 2, 3, 4, 5, 6, 7, 8, 9], &[1, 2, 3, 4, 5, 6, 7, 8, 9]),
        ex(&[7, 8], &[7, 8]),
        ex(&[9], &[9]),
    ];
    let file = PathBuf::from("data.jsonl");
    let sources = (1..=4).map(|n| Location { file: file.clone(), place: Place::Line(n) }).collect();
    Dataset { examples, plain_text: false, sources }
}

#[test]
fn training_drops_and_names_rows_left_without_targets() {
    let mut d = dataset();
    let r = d.truncate(4, true);
    assert_eq!((r.truncated, r.longest), (2, 9));
    // Row 1 keeps only its masked prompt; row 4 has one token, so nothing to predict either.
    assert_eq!(r.no_target, vec!["data.jsonl:1".to_string(), "data.jsonl:4".to_string()]);
    assert_eq!(d.examples, vec![ex(&[1, 2, 3, 4], &[1, 2, 3, 4]), ex(&[7, 8], &[7, 8])]);
    assert_eq!(d.sources.len(), 2);
    let w = r.warnings("training data");
    assert_eq!(
        w,
        vec![
            "warning: training data: 2 rows are longer than --seq-len 4 cut to it (the longest has 9 tokens)",
            "warning: training data: 2 rows have no token to predict within --seq-len 4 (skipped): data.jsonl:1, \
             data.jsonl:4",
        ]
    );
}

#[test]
fn evaluation_keeps_every_row_and_nothing_cut_says_nothing() {
    let mut d = dataset();
    let r = d.truncate(4, false);
    assert_eq!(d.examples.len(), 4, "rows keep their numbers in an evaluation");
    assert!(r.warnings("data")[1].contains("(not counted)"));
    let mut short = Dataset { examples: vec![ex(&[1, 2], &[1, 2])], ..Default::default() };
    assert!(short.truncate(4, true).warnings("data").is_empty());
}

#[test]
fn encoder_decoder_rows_cut_source_and_target_and_count_every_target() {
    let s2s = |src: &[u32], tgt: &[i32]| Example { decoder_labels: tgt.to_vec(), ..ex(src, &vec![-100; src.len()]) };
    // A one-token target still trains (no shift); a row whose target is all -100 does not.
    let examples = vec![s2s(&[1, 2, 3, 4, 5], &[6]), s2s(&[1], &[2, 3, 4, 5, 6, 7]), s2s(&[1, 2], &[-100, -100])];
    let file = PathBuf::from("pairs.jsonl");
    let sources = (1..=3).map(|n| Location { file: file.clone(), place: Place::Line(n) }).collect();
    let mut d = Dataset { examples, plain_text: false, sources };
    let r = d.truncate(3, true);
    assert_eq!((r.truncated, r.longest), (2, 6));
    assert_eq!(r.no_target, vec!["pairs.jsonl:3".to_string()]);
    assert_eq!(d.examples, vec![s2s(&[1, 2, 3], &[6]), s2s(&[1], &[2, 3, 4])]);
}
