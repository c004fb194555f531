//! DeBERTa-v2/v3 folders that ship only a sentencepiece `spm.model` (no `tokenizer.json`): the
//! tokenizer built from the model proto as transformers' `DebertaV2Tokenizer` builds it (5.x,
//! tokenization_deberta_v2.py, after `SentencePieceExtractor`): a Unigram model of every piece
//! with its score; the normalizer `[Lowercase] → Replace(\s{2,}|[\n\r\t] → " ") → NFC →
//! Strip(right)`; the pre-tokenizer `[Punctuation(isolated)] → Metaspace(▁, always|first)`;
//! `[CLS] A [SEP] (B [SEP])` around the ids; control and user-defined pieces and the config's
//! special tokens matched whole in the raw text (added tokens, not normalized).
//!
//! The proto is read here (three fields of `ModelProto`, see sentencepiece_model.proto): no
//! protobuf dependency for a file format this small.

use std::path::Path;

use serde_json::{json, Value};

use crate::error::{IoError, Result};

/// File name of a DeBERTa-v2/v3 sentencepiece model.
pub const SPM_MODEL: &str = "spm.model";

/// A sentencepiece piece: text, score, type (1 normal, 2 unknown, 3 control, 4 user-defined,
/// 5 byte, 6 unused).
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    pub piece: String,
    pub score: f32,
    pub kind: u64,
}

/// The parts of `ModelProto` the tokenizer needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpmModel {
    pub pieces: Vec<Piece>,
    /// `trainer_spec.unk_id` (field 40; 0 when absent).
    pub unk_id: u64,
    /// `trainer_spec.model_type` (field 3; 1 = Unigram, the default).
    pub model_type: u64,
}

/// One field of a protobuf message: number and value.
enum Field<'a> {
    Varint(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

/// A protobuf reader over one message's bytes.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.at)?;
            self.at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    /// The next field, `None` at the end; `Err` on malformed bytes.
    fn next(&mut self) -> std::result::Result<Option<(u64, Field<'a>)>, String> {
        if self.at >= self.buf.len() {
            return Ok(None);
        }
        let at = self.at;
        let bad = || format!("malformed protobuf at byte {at}");
        let key = self.varint().ok_or_else(bad)?;
        let field = match key & 7 {
            0 => Field::Varint(self.varint().ok_or_else(bad)?),
            1 => {
                self.take(8).ok_or_else(bad)?;
                Field::Varint(0) // fixed64: no field read here has this type
            }
            2 => {
                let n = self.varint().ok_or_else(bad)? as usize;
                Field::Bytes(self.take(n).ok_or_else(bad)?)
            }
            5 => Field::Fixed32(u32::from_le_bytes(self.take(4).ok_or_else(bad)?.try_into().map_err(|_| bad())?)),
            w => return Err(format!("unsupported protobuf wire type {w}")),
        };
        Ok(Some((key >> 3, field)))
    }
}

fn fields(
    buf: &[u8],
    mut each: impl FnMut(u64, Field<'_>) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    let mut r = Reader { buf, at: 0 };
    while let Some((n, f)) = r.next()? {
        each(n, f)?;
    }
    Ok(())
}

impl SpmModel {
    /// Parses the bytes of a sentencepiece `.model` file.
    pub fn parse(bytes: &[u8]) -> std::result::Result<SpmModel, String> {
        let mut m = SpmModel { model_type: 1, ..SpmModel::default() };
        fields(bytes, |n, f| {
            match (n, f) {
                (1, Field::Bytes(b)) => m.pieces.push(parse_piece(b)?),
                (2, Field::Bytes(b)) => fields(b, |n, f| {
                    match (n, f) {
                        (3, Field::Varint(v)) => m.model_type = v,
                        (40, Field::Varint(v)) => m.unk_id = v,
                        _ => {}
                    }
                    Ok(())
                })?,
                _ => {}
            }
            Ok(())
        })?;
        if m.pieces.is_empty() {
            return Err("no pieces (is it a sentencepiece model?)".into());
        }
        Ok(m)
    }

    /// Reads `path`.
    pub fn read(path: &Path) -> Result<SpmModel> {
        let bytes =
            std::fs::read(path).map_err(|e| IoError::TokenizerLoad { path: path.into(), message: e.to_string() })?;
        Self::parse(&bytes).map_err(|message| IoError::TokenizerLoad { path: path.into(), message })
    }
}

fn parse_piece(b: &[u8]) -> std::result::Result<Piece, String> {
    let mut p = Piece { piece: String::new(), score: 0.0, kind: 1 };
    fields(b, |n, f| {
        match (n, f) {
            (1, Field::Bytes(s)) => p.piece = String::from_utf8(s.to_vec()).map_err(|e| e.to_string())?,
            (2, Field::Fixed32(v)) => p.score = f32::from_bits(v),
            (3, Field::Varint(v)) => p.kind = v,
            _ => {}
        }
        Ok(())
    })?;
    Ok(p)
}

/// A special token of `tokenizer_config.json` (a string or an AddedToken object), or `default`.
fn config_token(config: &Value, key: &str, default: &str) -> String {
    let v = &config[key];
    v.as_str().or_else(|| v["content"].as_str()).unwrap_or(default).to_string()
}

/// `DebertaV2Tokenizer`'s special tokens and their defaults, in transformers' attribute order
/// (the order it adds those missing from the vocabulary).
const SPECIALS: [(&str, &str); 7] = [
    ("bos_token", "[CLS]"),
    ("eos_token", "[SEP]"),
    ("unk_token", "[UNK]"),
    ("sep_token", "[SEP]"),
    ("pad_token", "[PAD]"),
    ("cls_token", "[CLS]"),
    ("mask_token", "[MASK]"),
];

/// The `tokenizer.json` of a DeBERTa-v2 sentencepiece model with its `tokenizer_config.json`
/// (`config`: `do_lower_case`, `split_by_punct`, `add_prefix_space`, the special tokens).
pub fn deberta_v2_tokenizer_json(spm: &SpmModel, config: &Value) -> std::result::Result<Value, String> {
    if spm.model_type != 1 {
        return Err(format!("sentencepiece model_type {} (DeBERTa-v2 uses Unigram, 1)", spm.model_type));
    }
    let flag = |k: &str, default: bool| config[k].as_bool().unwrap_or(default);
    let mut vocab: Vec<(String, f32)> = spm.pieces.iter().map(|p| (p.piece.clone(), p.score)).collect();
    let unk = config_token(config, "unk_token", "[UNK]");
    // As `vocab.index((unk_token, 0.0))`, else the proto's unk_id.
    let unk_id = vocab.iter().position(|(p, s)| *p == unk && *s == 0.0).unwrap_or(spm.unk_id as usize);
    // Added tokens: the control and user-defined pieces, then the config's special tokens (new
    // ids after the pieces for those the model lacks), all matched whole and special.
    let mut added: Vec<(usize, String)> = Vec::new();
    for (id, p) in spm.pieces.iter().enumerate().filter(|(_, p)| p.kind == 3 || p.kind == 4) {
        added.push((id, p.piece.clone()));
    }
    for (key, default) in SPECIALS {
        let t = config_token(config, key, default);
        if added.iter().any(|(_, a)| *a == t) {
            continue;
        }
        let id = match vocab.iter().position(|(p, _)| *p == t) {
            Some(id) => id,
            None => {
                vocab.push((t.clone(), 0.0));
                vocab.len() - 1
            }
        };
        added.push((id, t));
    }
    added.sort();
    let id_of =
        |t: &str| vocab.iter().position(|(p, _)| p == t).ok_or_else(|| format!("`{t}` is not in the vocabulary"));
    let (cls, sep) = (config_token(config, "cls_token", "[CLS]"), config_token(config, "sep_token", "[SEP]"));
    let (cls_id, sep_id) = (id_of(&cls)?, id_of(&sep)?);
    let prepend = if flag("add_prefix_space", true) { "always" } else { "first" };
    let metaspace = json!({"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": prepend, "split": true});
    let mut normalizers = Vec::new();
    if flag("do_lower_case", false) {
        normalizers.push(json!({"type": "Lowercase"}));
    }
    normalizers.push(json!({"type": "Replace", "pattern": {"Regex": "\\s{2,}|[\\n\\r\\t]"}, "content": " "}));
    normalizers.push(json!({"type": "NFC"}));
    normalizers.push(json!({"type": "Strip", "strip_left": false, "strip_right": true}));
    let mut pre = Vec::new();
    if flag("split_by_punct", false) {
        pre.push(json!({"type": "Punctuation", "behavior": "Isolated"}));
    }
    pre.push(metaspace.clone());
    let special = |t: &str, type_id: u32| json!({"SpecialToken": {"id": t, "type_id": type_id}});
    let seq = |s: &str, type_id: u32| json!({"Sequence": {"id": s, "type_id": type_id}});
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added.iter().map(|(id, t)| json!({
            "id": id, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
            "normalized": false, "special": true,
        })).collect::<Vec<_>>(),
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(&cls, 0), seq("A", 0), special(&sep, 0)],
            "pair": [special(&cls, 0), seq("A", 0), special(&sep, 0), seq("B", 1), special(&sep, 1)],
            "special_tokens": {
                cls.clone(): {"id": cls, "ids": [cls_id], "tokens": [cls]},
                sep.clone(): {"id": sep, "ids": [sep_id], "tokens": [sep]},
            },
        },
        "decoder": metaspace,
        "model": {
            "type": "Unigram",
            "unk_id": unk_id,
            "vocab": vocab.iter().map(|(p, s)| json!([p, s])).collect::<Vec<_>>(),
            "byte_fallback": false,
        },
    }))
}

/// Whether a folder's tokenizer is DeBERTa-v2's (`tokenizer_class` DebertaV2Tokenizer[Fast], or
/// a `deberta-v2` config).
pub fn is_deberta_v2(dir: &Path, tokenizer_config: &Value) -> bool {
    let class = tokenizer_config["tokenizer_class"].as_str().unwrap_or_default();
    if class.starts_with("DebertaV2Tokenizer") {
        return true;
    }
    let config = crate::read_json(dir.join("config.json")).unwrap_or(Value::Null);
    config["model_type"].as_str() == Some("deberta-v2")
}

/// The tokenizer of a DeBERTa-v2 folder with `spm.model` and no `tokenizer.json`.
pub fn load_deberta_v2(dir: &Path, tokenizer_config: &Value) -> Result<tokenizers::Tokenizer> {
    let path = dir.join(SPM_MODEL);
    let spm = SpmModel::read(&path)?;
    let err = |message: String| IoError::TokenizerLoad { path: path.clone(), message };
    let json = deberta_v2_tokenizer_json(&spm, tokenizer_config).map_err(err)?;
    tokenizers::Tokenizer::from_bytes(serde_json::to_vec(&json).map_err(|e| err(e.to_string()))?)
        .map_err(|e| err(e.to_string()))
}
