//! The BERT family's config checks: options the encoder graph does not model are refused by
//! name, and RoBERTa's offset positions need room in the table.

use serde_json::json;

use vkformers_models::spec_from_config;

fn bert(edit: impl Fn(&mut serde_json::Value)) -> String {
    let mut c = json!({
        "model_type": "bert", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 48
    });
    edit(&mut c);
    match spec_from_config(&c) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn options_the_graph_does_not_model_are_refused_by_name() {
    assert_eq!(bert(|_| {}), "");
    for (key, v, named) in [
        ("is_decoder", json!(true), "is_decoder"),
        ("use_task_id", json!(true), "use_task_id"),
        ("tie_word_embeddings", json!(false), "tie_word_embeddings"),
        ("position_embedding_type", json!("relative_key"), "relative_key"),
        ("hidden_act", json!("mish"), "mish"),
        ("num_attention_heads", json!(5), "attention heads"),
    ] {
        let e = bert(|c| c[key] = v.clone());
        assert!(e.contains(named), "{key}={v}: {e:?}");
    }
}

#[test]
fn roberta_needs_room_for_its_offset_positions() {
    let c = json!({
        "model_type": "roberta", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 4, "intermediate_size": 48, "max_position_embeddings": 2
    });
    let e = spec_from_config(&c).expect_err("error").to_string();
    assert!(e.contains("max_position_embeddings 2"), "{e}");
}
