//! The tokenizer wrapper over tokenizers built in the test with the `tokenizers` API.

use std::path::Path;

use serde_json::json;
use vkformers_io::tokenizers::models::bpe::BPE;
use vkformers_io::tokenizers::models::wordlevel::WordLevel;
use vkformers_io::tokenizers::pre_tokenizers::byte_level::ByteLevel;
use vkformers_io::tokenizers::pre_tokenizers::whitespace::Whitespace;
use vkformers_io::tokenizers::processors::template::TemplateProcessing;
use vkformers_io::tokenizers::{AddedToken, Tokenizer};
use vkformers_io::{copy_tokenizer_files, write_json_atomic, HfTokenizer, IoError, SpecialToken, TokenizerConfig};

const WORDS: [&str; 9] = ["<unk>", "<s>", "</s>", "<pad>", "hello", "world", "the", "cat", "!"];

/// A word-level tokenizer that prepends `<s>`, saved as `dir/tokenizer.json`.
fn save_word_level(dir: &Path) {
    let vocab = WORDS.iter().enumerate().map(|(i, w)| (w.to_string(), i as u32)).collect();
    let model = WordLevel::builder().vocab(vocab).unk_token("<unk>".to_string()).build().unwrap();
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(Whitespace {}));
    let template =
        TemplateProcessing::builder().try_single("<s> $0").unwrap().special_tokens(vec![("<s>", 1)]).build().unwrap();
    tokenizer.with_post_processor(Some(template));
    let specials = ["<unk>", "<s>", "</s>", "<pad>"].map(|t| AddedToken::from(t, true));
    tokenizer.add_special_tokens(specials).unwrap();
    tokenizer.save(dir.join("tokenizer.json"), true).unwrap();
}

fn write_config(dir: &Path, config: serde_json::Value) {
    write_json_atomic(dir.join("tokenizer_config.json"), &config).unwrap();
}

fn special(content: &str, id: u32) -> Option<SpecialToken> {
    Some(SpecialToken { content: content.to_string(), id })
}

#[test]
fn word_level_encode_decode_and_special_tokens() {
    let dir = tempfile::tempdir().unwrap();
    save_word_level(dir.path());
    write_config(
        dir.path(),
        json!({
            "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false, "normalized": false,
                          "rstrip": false, "single_word": false, "special": true},
            "eos_token": "</s>",
            "pad_token": "<pad>",
            "unk_token": null,
            "add_bos_token": true,
            "add_eos_token": false,
            "chat_template": [
                {"name": "default", "template": "{% for m in messages %}{{ m.content }}{% endfor %}"},
                {"name": "tool_use", "template": "{{ tools }}"}
            ],
            "model_max_length": 1000000000000000019884624838656_f64,
            "tokenizer_class": "PreTrainedTokenizerFast"
        }),
    );
    let tok = HfTokenizer::from_dir(dir.path()).unwrap();

    assert_eq!(tok.encode("hello world!", true).unwrap(), [1, 4, 5, 8]);
    assert_eq!(tok.encode("hello world!", false).unwrap(), [4, 5, 8]);
    assert_eq!(tok.encode("the dog", false).unwrap(), [6, 0]);
    assert_eq!(tok.decode(&[1, 4, 5, 8], true).unwrap(), "hello world !");
    assert_eq!(tok.decode(&[1, 4, 5, 8], false).unwrap(), "<s> hello world !");
    let ids = tok.encode("the cat", true).unwrap();
    assert_eq!(tok.encode(&tok.decode(&ids, true).unwrap(), true).unwrap(), ids);

    assert_eq!(tok.vocab_size(), WORDS.len());
    assert_eq!(tok.token_to_id("cat"), Some(7));
    assert_eq!(tok.id_to_token(5).as_deref(), Some("world"));

    assert_eq!(tok.bos().cloned(), special("<s>", 1));
    assert_eq!(tok.eos().cloned(), special("</s>", 2));
    assert_eq!(tok.pad().cloned(), special("<pad>", 3));
    assert_eq!(tok.unk(), None);

    let config = tok.config();
    assert_eq!(config.add_bos_token, Some(true));
    assert_eq!(config.add_eos_token, Some(false));
    let templates = config.chat_template.as_ref().unwrap();
    assert_eq!(templates.get(None), Some("{% for m in messages %}{{ m.content }}{% endfor %}"));
    assert_eq!(templates.get(Some("tool_use")), Some("{{ tools }}"));
    assert_eq!(templates.named.len(), 2);
    assert_eq!(config.raw["tokenizer_class"], "PreTrainedTokenizerFast");
}

#[test]
fn special_tokens_map_and_chat_template_jinja_fill_the_gaps() {
    let dir = tempfile::tempdir().unwrap();
    save_word_level(dir.path());
    write_config(dir.path(), json!({"eos_token": "</s>"}));
    write_json_atomic(
        dir.path().join("special_tokens_map.json"),
        &json!({"eos_token": "<s>", "unk_token": {"content": "<unk>", "special": true}}),
    )
    .unwrap();
    std::fs::write(dir.path().join("chat_template.jinja"), "{{ messages }}").unwrap();

    let tok = HfTokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(tok.eos().cloned(), special("</s>", 2), "tokenizer_config.json wins");
    assert_eq!(tok.unk().cloned(), special("<unk>", 0));
    assert_eq!(tok.bos(), None);
    assert_eq!(tok.config().add_bos_token, None);
    assert_eq!(tok.config().chat_template.as_ref().unwrap().get(None), Some("{{ messages }}"));

    // A string template in tokenizer_config.json.
    write_config(dir.path(), json!({"chat_template": "{{ x }}"}));
    let config = TokenizerConfig::from_dir(dir.path()).unwrap();
    assert_eq!(config.chat_template.unwrap().default.as_deref(), Some("{{ x }}"));
}

#[test]
fn tokenizer_json_alone_loads_without_config() {
    let dir = tempfile::tempdir().unwrap();
    save_word_level(dir.path());
    let tok = HfTokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(tok.bos(), None);
    assert!(tok.config().chat_template.is_none());
    let tok = HfTokenizer::from_file(dir.path().join("tokenizer.json")).unwrap();
    assert_eq!(tok.encode("hello", true).unwrap(), [1, 4]);
}

#[test]
fn byte_level_bpe_round_trips_any_text() {
    let dir = tempfile::tempdir().unwrap();
    // The 256 byte symbols of GPT-2's byte-level alphabet, then two merges.
    let mut vocab: Vec<(String, u32)> =
        ByteLevel::alphabet().into_iter().map(|c| c.to_string()).enumerate().map(|(i, s)| (s, i as u32)).collect();
    vocab.sort();
    let vocab: Vec<(String, u32)> = vocab.into_iter().enumerate().map(|(i, (s, _))| (s, i as u32)).collect();
    let mut vocab_file = serde_json::Map::new();
    for (s, i) in &vocab {
        vocab_file.insert(s.clone(), json!(i));
    }
    vocab_file.insert("he".to_string(), json!(256));
    vocab_file.insert("hel".to_string(), json!(257));
    let vocab_path = dir.path().join("vocab.json");
    let merges_path = dir.path().join("merges.txt");
    write_json_atomic(&vocab_path, &serde_json::Value::Object(vocab_file)).unwrap();
    std::fs::write(&merges_path, "#version: 0.2\nh e\nhe l\n").unwrap();
    let model = BPE::from_file(vocab_path.to_str().unwrap(), merges_path.to_str().unwrap()).build().unwrap();
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tokenizer.with_decoder(Some(ByteLevel::default()));
    tokenizer.save(dir.path().join("tokenizer.json"), false).unwrap();

    let tok = HfTokenizer::from_dir(dir.path()).unwrap();
    let text = "hello, wörld — ünïcode ✓ 123";
    let ids = tok.encode(text, true).unwrap();
    assert_eq!(ids[0], 257, "`hel` merged: {ids:?}");
    assert_eq!(tok.decode(&ids, false).unwrap(), text);
}

#[test]
fn special_token_missing_from_vocab_is_an_error_naming_role_and_file() {
    let dir = tempfile::tempdir().unwrap();
    save_word_level(dir.path());
    write_config(dir.path(), json!({"pad_token": "[PAD]"}));
    let e = HfTokenizer::from_dir(dir.path()).unwrap_err();
    match &e {
        IoError::SpecialTokenNotInVocab { path, role, token } => {
            assert_eq!(path, &dir.path().join("tokenizer_config.json"));
            assert_eq!(role, "pad_token");
            assert_eq!(token, "[PAD]");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("`[PAD]`"));
}

#[test]
fn tokenizer_load_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = HfTokenizer::from_dir(dir.path()).unwrap_err();
    assert!(matches!(e, IoError::FileNotFound { .. }), "{e:?}");
    assert!(e.to_string().contains("tokenizer.json"));

    let e = HfTokenizer::from_dir(dir.path().join("absent")).unwrap_err();
    assert!(matches!(e, IoError::FolderNotFound { .. }), "{e:?}");

    std::fs::write(dir.path().join("tokenizer.json"), r#"{"model": {"type": "Nope"}}"#).unwrap();
    let e = HfTokenizer::from_dir(dir.path()).unwrap_err();
    assert!(matches!(e, IoError::TokenizerLoad { .. }), "{e:?}");
    assert!(e.to_string().contains("tokenizer.json"));

    save_word_level(dir.path());
    for (config, field) in [
        (json!({"bos_token": 5}), "bos_token"),
        (json!({"eos_token": {"special": true}}), "eos_token"),
        (json!({"add_bos_token": "yes"}), "add_bos_token"),
        (json!({"chat_template": [{"name": "default"}]}), "chat_template[0]"),
        (json!({"chat_template": 3}), "chat_template"),
    ] {
        write_config(dir.path(), config);
        let e = HfTokenizer::from_dir(dir.path()).unwrap_err();
        assert!(matches!(&e, IoError::BadField { field: f, .. } if f == field), "{e:?}");
        assert!(e.to_string().contains("tokenizer_config.json"));
    }
    std::fs::write(dir.path().join("tokenizer_config.json"), "{\"bos_token\": \"<s>\",}").unwrap();
    let e = HfTokenizer::from_dir(dir.path()).unwrap_err();
    assert!(matches!(e, IoError::Json { line: 1, .. }), "{e:?}");
}

#[test]
fn copy_tokenizer_files_copies_what_exists() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let dst = dst.path().join("out");
    save_word_level(src.path());
    write_config(src.path(), json!({"bos_token": "<s>", "eos_token": "</s>"}));
    for (name, text) in [
        ("special_tokens_map.json", "{}"),
        ("generation_config.json", "{\"eos_token_id\": 2}"),
        ("vocab.json", "{}"),
        ("merges.txt", "#version: 0.2\n"),
        ("config.json", "{}"),
        ("model.safetensors", "weights"),
    ] {
        std::fs::write(src.path().join(name), text).unwrap();
    }
    let copied = copy_tokenizer_files(src.path(), &dst).unwrap();
    let mut names: Vec<String> = copied.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "generation_config.json",
            "merges.txt",
            "special_tokens_map.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "vocab.json"
        ]
    );
    let mut present: Vec<String> =
        std::fs::read_dir(&dst).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    present.sort();
    assert_eq!(present, names);
    for name in &names {
        assert_eq!(std::fs::read(src.path().join(name)).unwrap(), std::fs::read(dst.join(name)).unwrap(), "{name}");
    }
    let tok = HfTokenizer::from_dir(&dst).unwrap();
    assert_eq!(tok.eos().cloned(), special("</s>", 2));

    let e = copy_tokenizer_files(src.path().join("absent"), &dst).unwrap_err();
    assert!(matches!(e, IoError::FolderNotFound { .. }), "{e:?}");
}
