//! `json.dumps` as Python writes it, for the `tojson` filter `transformers` installs.
//!
//! `transformers` replaces Jinja's `tojson` with `json.dumps(x, ensure_ascii=False, indent=None,
//! separators=None, sort_keys=False)`: `", "` and `": "` between items (`","` once indenting),
//! no HTML escaping, floats as Python's `repr`.

use serde_json::{Number, Value};

/// Options of `json.dumps` the filter accepts.
#[derive(Debug, Clone, Default)]
pub(crate) struct DumpOptions {
    /// Escape every character outside printable ASCII as `\uXXXX`.
    pub ensure_ascii: bool,
    /// Indentation string per level; `None` writes everything on one line.
    pub indent: Option<String>,
    /// Item and key separators; `None` takes Python's defaults.
    pub separators: Option<(String, String)>,
    /// Write object keys in sorted order.
    pub sort_keys: bool,
}

/// `value` serialised as `json.dumps` would with `options`.
pub(crate) fn dumps(value: &Value, options: &DumpOptions) -> String {
    let (item_sep, key_sep) = match (&options.separators, &options.indent) {
        (Some((item, key)), _) => (item.clone(), key.clone()),
        (None, Some(_)) => (",".to_string(), ": ".to_string()),
        (None, None) => (", ".to_string(), ": ".to_string()),
    };
    let mut out = String::new();
    Writer { options, item_sep, key_sep }.write(&mut out, value, 0);
    out
}

struct Writer<'a> {
    options: &'a DumpOptions,
    item_sep: String,
    key_sep: String,
}

impl Writer<'_> {
    fn write(&self, out: &mut String, value: &Value, depth: usize) {
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => out.push_str(&number(n)),
            Value::String(s) => self.string(out, s),
            Value::Array(items) => {
                if items.is_empty() {
                    out.push_str("[]");
                    return;
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.separate(out, i, depth + 1);
                    self.write(out, item, depth + 1);
                }
                self.newline(out, depth);
                out.push(']');
            }
            Value::Object(map) => {
                if map.is_empty() {
                    out.push_str("{}");
                    return;
                }
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                if self.options.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    self.separate(out, i, depth + 1);
                    self.string(out, key);
                    out.push_str(&self.key_sep);
                    self.write(out, item, depth + 1);
                }
                self.newline(out, depth);
                out.push('}');
            }
        }
    }

    /// What goes before item `i` of a container whose items sit at `depth`.
    fn separate(&self, out: &mut String, i: usize, depth: usize) {
        if i > 0 {
            out.push_str(&self.item_sep);
        }
        self.newline(out, depth);
    }

    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = &self.options.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(indent);
            }
        }
    }

    fn string(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c if self.options.ensure_ascii && !(' '..='~').contains(&c) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A JSON number as Python prints it (`repr` for floats).
fn number(n: &Number) -> String {
    match n.as_f64() {
        Some(f) if n.is_f64() => python_float(f),
        _ => n.to_string(),
    }
}

/// Python's `float.__repr__`: shortest round-trip digits, positional for exponents in
/// `-4..16`, otherwise `d.ddde+XX`; `NaN`/`Infinity` as `json.dumps` writes them.
pub(crate) fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits, e.g. `-1.25e-7`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let body = if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                format!("{digits}{}.0", "0".repeat(int_len - digits.len()))
            } else {
                format!("{}.{}", &digits[..int_len], &digits[int_len..])
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{body}")
    } else {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_like_python_repr() {
        let cases = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (2.5, "2.5"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789.125, "123456789.125"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-1.25e-7, "-1.25e-07"),
            (1.5e300, "1.5e+300"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (f, want) in cases {
            assert_eq!(python_float(f), want, "{f}");
        }
    }

    #[test]
    fn separators_indent_and_escapes() {
        let v = json!({"b": [1, 2.0, {}], "a": "é\"\u{1}\u{1F600}", "c": []});
        assert_eq!(dumps(&v, &DumpOptions::default()), r#"{"b": [1, 2.0, {}], "a": "é\"\u0001😀", "c": []}"#);
        let opts = DumpOptions { ensure_ascii: true, sort_keys: true, ..Default::default() };
        assert_eq!(dumps(&v, &opts), r#"{"a": "\u00e9\"\u0001\ud83d\ude00", "b": [1, 2.0, {}], "c": []}"#);
        let opts = DumpOptions { indent: Some(" ".into()), ..Default::default() };
        assert_eq!(dumps(&json!({"a": [1]}), &opts), "{\n \"a\": [\n  1\n ]\n}");
        let opts = DumpOptions { separators: Some((",".into(), ":".into())), ..Default::default() };
        assert_eq!(dumps(&json!({"a": [1, 2]}), &opts), r#"{"a":[1,2]}"#);
    }
}
