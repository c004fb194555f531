//! Every rendering of tests/fixtures_chat/cases.json (made by tools/parity/chat_reference.py
//! with transformers' own chat-template code) reproduced byte for byte.

use std::path::PathBuf;

use serde_json::Value;
use vkformers_chat::{render, ChatError, Message, SpecialTokens};

fn fixtures() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_chat/cases.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn every_fixture_renders_byte_for_byte() {
    let doc = fixtures();
    let special = SpecialTokens {
        bos_token: doc["special_tokens"]["bos_token"].as_str().map(str::to_string),
        eos_token: doc["special_tokens"]["eos_token"].as_str().map(str::to_string),
        ..Default::default()
    };
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let (mut rendered, mut raised, mut failures) = (0, 0, Vec::new());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let template = doc["templates"][case["template"].as_str().unwrap()].as_str().unwrap();
        let messages: Vec<Message> = serde_json::from_value(case["messages"].clone()).unwrap();
        let agp = case["add_generation_prompt"].as_bool().unwrap();
        let got = render(template, &messages, agp, &special, &case["extra"]);
        match (case.get("expected").and_then(Value::as_str), case.get("error").and_then(Value::as_str), got) {
            (Some(want), _, Ok(got)) if got == want => rendered += 1,
            (_, Some(want), Err(ChatError::Raised { message, .. })) if message == want => raised += 1,
            (want, want_err, got) => {
                failures.push(format!("{name}: want {want:?} / error {want_err:?}\n  got {got:?}"))
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
    assert!(rendered > 0 && raised > 0);
    eprintln!("{rendered} renderings and {raised} raised errors equal to transformers'");
}
