//! Mutations of seed inputs: byte-level (bit flips, interesting bytes and numbers, cut, repeat,
//! splice) and, for JSON, structure-aware (a value anywhere in the tree replaced by an
//! interesting one, a key removed or added), since a config parser is reached by well-formed
//! JSON with bad values far more than by broken bytes.

use serde_json::{json, Value};
use vkformers_train::rng::SplitMix64;

/// The trainer's SplitMix64: seeded, the same sequence on every machine.
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Byte strings that break parsers: boundary numbers, JSON punctuation, odd Unicode.
const TOKENS: &[&str] = &[
    "0",
    "-1",
    "-0",
    "1.5",
    "1e309",
    "-1e309",
    "4294967295",
    "4294967296",
    "2147483648",
    "18446744073709551616",
    "9007199254740993",
    "null",
    "true",
    "\"\"",
    "[]",
    "{}",
    "NaN",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "\u{10FFFF}",
    "\u{feff}",
    "\n",
    "\\",
    "\"",
];

/// Values that break what reads a JSON field.
fn interesting_value(rng: &mut Rng) -> Value {
    match rng.below(16) {
        0 => json!(0),
        1 => json!(-1),
        2 => json!(1u64 << 40),
        3 => json!(u64::MAX),
        4 => json!(1.5),
        5 => json!(-1e300),
        6 => Value::Null,
        7 => json!(""),
        8 => json!("x"),
        9 => json!([]),
        10 => json!({}),
        11 => json!(true),
        12 => json!([0, -1, 1.5, null]),
        13 => (0..200).fold(json!(1), |v, _| json!([v])),
        14 => json!("y".repeat(100_000)),
        _ => json!(1),
    }
}

/// Keys our configs read, added with bad values to reach code that reads optional fields.
const KEYS: &[&str] = &[
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_size",
    "vocab_size",
    "num_hidden_layers",
    "intermediate_size",
    "rope_scaling",
    "rope_parameters",
    "rope_theta",
    "partial_rotary_factor",
    "sliding_window",
    "layer_types",
    "tie_word_embeddings",
    "hidden_act",
    "max_position_embeddings",
    "pad_token_id",
    "eos_token_id",
    "chat_template",
    "bos_token",
    "eos_token",
    "added_tokens_decoder",
    "model_type",
    "torch_dtype",
    "dtype",
    "quantization_config",
    "n_head",
    "n_embd",
    "word_embed_proj_dim",
    "attn_logit_softcapping",
    "rope_type",
    "factor",
    "original_max_position_embeddings",
    "short_factor",
    "long_factor",
    "dtype",
    "shape",
    "data_offsets",
];

/// A byte-level mutation of `input`, with `others` to splice from.
pub fn bytes(rng: &mut Rng, input: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..=rng.below(4) {
        let n = v.len();
        match rng.below(8) {
            0 if n > 0 => {
                let i = rng.below(n);
                v[i] ^= 1 << rng.below(8);
            }
            1 if n > 0 => {
                let i = rng.below(n);
                v[i] = *rng.pick(b"\0\xff\"{}[],:-09 \n\\");
            }
            2 if n > 0 => {
                let i = rng.below(n);
                let len = (1 + rng.below(16)).min(n - i);
                v.drain(i..i + len);
            }
            3 => {
                let i = rng.below(n + 1);
                let t = rng.pick(TOKENS).as_bytes().to_vec();
                v.splice(i..i, t);
            }
            4 if n > 0 => {
                let i = rng.below(n);
                let len = (1 + rng.below(64)).min(n - i);
                let piece = v[i..i + len].to_vec();
                let at = rng.below(n + 1);
                v.splice(at..at, piece);
            }
            5 => replace_number(rng, &mut v),
            6 if !others.is_empty() => {
                let o = rng.pick(others);
                let (i, j) = (rng.below(n + 1), rng.below(o.len() + 1));
                v.truncate(i);
                v.extend_from_slice(&o[j..]);
            }
            7 if n > 0 => v.truncate(rng.below(n)),
            _ => {}
        }
    }
    v
}

/// The first run of digits at or after a random point replaced by a boundary number.
fn replace_number(rng: &mut Rng, v: &mut Vec<u8>) {
    let start = rng.below(v.len() + 1);
    let Some(i) = (start..v.len()).find(|&i| v[i].is_ascii_digit()) else { return };
    let j = (i..v.len()).find(|&j| !v[j].is_ascii_digit()).unwrap_or(v.len());
    let t = rng.pick(&TOKENS[..10]).as_bytes().to_vec();
    v.splice(i..j, t);
}

/// A structure-aware mutation of a JSON document; byte-level when `input` is not JSON.
pub fn json(rng: &mut Rng, input: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let Ok(mut value) = serde_json::from_slice::<Value>(input) else { return bytes(rng, input, others) };
    for _ in 0..=rng.below(3) {
        mutate_value(rng, &mut value, 0);
    }
    let text = serde_json::to_vec(&value).unwrap_or_default();
    if rng.below(8) == 0 {
        bytes(rng, &text, others)
    } else {
        text
    }
}

/// Walks down to a random node and changes it: replace, remove a key, or add a known key.
fn mutate_value(rng: &mut Rng, v: &mut Value, depth: usize) {
    let descend = depth < 6 && rng.below(3) != 0;
    match v {
        Value::Object(map) if !map.is_empty() => {
            if descend {
                let key = map.keys().nth(rng.below(map.len())).cloned().unwrap_or_default();
                if let Some(child) = map.get_mut(&key) {
                    return mutate_value(rng, child, depth + 1);
                }
            }
            match rng.below(3) {
                0 => {
                    let key = map.keys().nth(rng.below(map.len())).cloned().unwrap_or_default();
                    map.remove(&key);
                }
                1 => {
                    map.insert(rng.pick(KEYS).to_string(), interesting_value(rng));
                }
                _ => {
                    let key = map.keys().nth(rng.below(map.len())).cloned().unwrap_or_default();
                    map.insert(key, interesting_value(rng));
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let i = rng.below(items.len());
            if descend {
                mutate_value(rng, &mut items[i], depth + 1);
            } else if rng.below(2) == 0 {
                items.remove(i);
            } else {
                items[i] = interesting_value(rng);
            }
        }
        _ => *v = interesting_value(rng),
    }
}
