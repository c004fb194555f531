//! Source and target ids of multilingual tokenizers equal transformers':
//! tests/fixtures_train/seq2seq/lang/cases.json holds what `tokenizer(source, text_target=target)`
//! gives for mBART, mBART-50, NLLB and legacy NLLB tokenizers with `src_lang`/`tgt_lang` set (or
//! the saved defaults) and with `max_length` truncation (tools/parity/seq2seq_lang_reference.py).

use std::path::PathBuf;

use serde_json::Value;
use vkformers_data::{read_seq2seq_dataset, PairEncoder, Seq2SeqRead};
use vkformers_io::HfTokenizer;

fn lang_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_train/seq2seq/lang")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

fn read_of(case: &Value) -> Seq2SeqRead {
    let s = |k: &str| case[k].as_str().map(str::to_string);
    let n = |k: &str| case[k].as_u64().map(|v| v as usize);
    Seq2SeqRead {
        source_lang: s("source_lang"),
        target_lang: s("target_lang"),
        max_source_len: n("max_source_len"),
        max_target_len: n("max_target_len"),
        ..Default::default()
    }
}

fn cases() -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(lang_dir().join("cases.json")).unwrap();
    serde_json::from_str::<Value>(&text).unwrap().as_object().unwrap().clone()
}

#[test]
fn language_tokens_and_truncation_equal_transformers_tokenizers() {
    let all = cases();
    assert_eq!(all.len(), 4);
    for (name, rows) in &all {
        let tok = HfTokenizer::from_dir(lang_dir().join(format!("{name}_tokenizer"))).unwrap();
        for case in rows.as_array().unwrap() {
            let enc = PairEncoder::new(&tok, &read_of(case)).unwrap();
            let what = format!("{name}: {case}");
            assert_eq!(enc.source(case["source"].as_str().unwrap()).unwrap(), ids(&case["input_ids"]), "{what}");
            assert_eq!(enc.target(case["target"].as_str().unwrap()).unwrap(), ids(&case["labels"]), "{what}");
            let forced = enc.langs().expect("a multilingual tokenizer").target.1;
            assert_eq!(forced as u64, case["forced_bos_token_id"].as_u64().unwrap(), "{what}");
        }
    }
}

/// Translation rows keyed `en`/`ro` read with `--source-lang en_XX --target-lang ro_RO`, as
/// run_translation.py splits the codes, tokenized with those languages' tokens.
#[test]
fn translation_rows_read_with_language_codes() {
    let all = cases();
    let truncated: Vec<&Value> =
        all["mbart"].as_array().unwrap().iter().filter(|c| c["max_source_len"].is_u64()).collect();
    let file = std::env::temp_dir().join(format!("vkformers-lang-{}.jsonl", std::process::id()));
    let lines: Vec<String> = truncated
        .iter()
        .map(|c| serde_json::json!({"translation": {"en": c["source"], "ro": c["target"]}}).to_string())
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let tok = HfTokenizer::from_dir(lang_dir().join("mbart_tokenizer")).unwrap();
    // add_eos must not add a second EOS after mBART's `</s> lang`.
    let read = Seq2SeqRead { add_eos: true, ..read_of(truncated[0]) };
    let data = read_seq2seq_dataset(std::slice::from_ref(&file), Some(&tok), &read);
    let _ = std::fs::remove_file(&file);
    let data = data.unwrap();
    for (ex, c) in data.examples.iter().zip(&truncated) {
        assert_eq!(ex.input_ids, ids(&c["input_ids"]));
        let labels: Vec<u32> = ex.decoder_labels.iter().map(|&l| l as u32).collect();
        assert_eq!(labels, ids(&c["labels"]));
    }
}

#[test]
fn an_unknown_language_is_named() {
    let tok = HfTokenizer::from_dir(lang_dir().join("nllb_tokenizer")).unwrap();
    let read =
        Seq2SeqRead { source_lang: Some("xx_Yyyy".into()), target_lang: Some("deu_Latn".into()), ..Default::default() };
    let err = PairEncoder::new(&tok, &read).err().unwrap();
    assert!(err.contains("NllbTokenizer") && err.contains("xx_Yyyy"), "{err}");
}
