//! A minijinja environment set up like the Jinja2 environment of `transformers`.

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};

use crate::json::{dumps, DumpOptions};
use crate::nesting;

/// Marks the error of a `raise_exception` call so that [`crate::render`] can report it as such.
#[derive(Debug)]
pub(crate) struct Raised(pub String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// An environment with `trim_blocks`, `lstrip_blocks`, loop controls, `raise_exception`,
/// transformers' `tojson` and Python's string/list/dict methods.
pub(crate) fn chat_environment<'source>() -> Result<Environment<'source>, Error> {
    let mut env = Environment::new();
    env.set_syntax(SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build()?);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_filter("tojson", tojson);
    // Printing paths bounded in depth (see `nesting`: a namespace holding itself).
    env.set_formatter(nesting::formatter);
    env.add_filter("string", nesting::string);
    env.add_filter("join", nesting::join);
    env.add_filter("escape", nesting::escape);
    env.add_filter("e", nesting::escape);
    Ok(env)
}

/// `raise_exception(message)`: fails the rendering with `message`.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

/// `value | tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False)`, the
/// `json.dumps` call of `transformers`.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let mut options = DumpOptions {
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        ..Default::default()
    };
    if let Some(indent) = kwargs.get::<Option<Value>>("indent")? {
        options.indent = match indent.kind() {
            ValueKind::None | ValueKind::Undefined => None,
            ValueKind::String => Some(indent.as_str().unwrap_or_default().to_string()),
            ValueKind::Number => {
                let n = i64::try_from(indent)?;
                Some(" ".repeat(n.max(0) as usize))
            }
            _ => return Err(Error::new(ErrorKind::InvalidOperation, "tojson: indent must be an integer or a string")),
        };
    }
    if let Some(separators) = kwargs.get::<Option<Value>>("separators")? {
        if !separators.is_none() {
            let parts: Vec<String> = separators
                .try_iter()?
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .unwrap_or_default();
            let [item, key] = <[String; 2]>::try_from(parts).map_err(|_| {
                Error::new(ErrorKind::InvalidOperation, "tojson: separators must be two strings (item, key)")
            })?;
            options.separators = Some((item, key));
        }
    }
    kwargs.assert_all_used()?;
    nesting::check_printable(value)?;
    let json = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: cannot serialise: {e}")))?;
    Ok(Value::from(dumps(&json, &options)))
}
