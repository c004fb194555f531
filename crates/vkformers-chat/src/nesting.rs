//! A bound on how deep a value a template may print or serialise.
//!
//! A namespace can be assigned into itself (`{% set ns.x = ns %}`, or a list or map holding it).
//! minijinja prints and serialises values by recursion, so printing such a value would recurse
//! until the thread's stack overflows, and a stack overflow aborts the process: no error, no
//! chance to say which template did it. Python's Jinja prints the cycle as `...` and its
//! `tojson` raises "Circular reference detected". Here every path that prints a whole container
//! (`{{ value }}`, `tojson`, `string`, `join`, `escape`) first walks it to a bounded depth and
//! fails with a render error past it. (String concatenation with `~` prints through minijinja's
//! own operator, which this environment cannot wrap.)

use minijinja::value::{Kwargs, StringInput, Value, ValueKind};
use minijinja::{Error, ErrorKind, Output, State};

/// Deepest nesting of lists and maps printed; no chat template's data comes near it.
pub(crate) const MAX_PRINT_DEPTH: usize = 128;
/// Most elements visited in one check (a cycle through two or more paths doubles at every level:
/// this stops it long before the depth bound would).
const MAX_PRINT_ITEMS: usize = 1 << 20;

/// Ok when `value` nests at most [`MAX_PRINT_DEPTH`] lists and maps deep (and holds at most
/// [`MAX_PRINT_ITEMS`] elements in all); a render error naming the likely cause otherwise.
pub(crate) fn check_printable(value: &Value) -> Result<(), Error> {
    let mut items = 0;
    walk(value, 0, &mut items)
}

fn walk(value: &Value, depth: usize, items: &mut usize) -> Result<(), Error> {
    let kind = value.kind();
    if !matches!(kind, ValueKind::Map | ValueKind::Seq) {
        return Ok(());
    }
    if depth >= MAX_PRINT_DEPTH {
        return Err(too_deep(format!("nested more than {MAX_PRINT_DEPTH} lists or maps deep")));
    }
    for item in value.try_iter()? {
        *items += 1;
        if *items > MAX_PRINT_ITEMS {
            return Err(too_deep(format!("more than {MAX_PRINT_ITEMS} elements")));
        }
        // A map iterates its keys: the values are what nests.
        let inner = if kind == ValueKind::Map { value.get_item(&item)? } else { item };
        walk(&inner, depth + 1, items)?;
    }
    Ok(())
}

fn too_deep(what: String) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("cannot print a value {what}: does a namespace hold itself (`{{% set ns.x = ns %}}`)?"),
    )
}

/// The output formatter: minijinja's, after the check.
pub(crate) fn formatter(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    check_printable(value)?;
    minijinja::escape_formatter(out, state, value)
}

/// `value | string`, after the check.
pub(crate) fn string(state: &State, value: &Value) -> Result<Value, Error> {
    check_printable(value)?;
    minijinja::filters::string(state, value)
}

/// `value | join(joiner, attribute)`, after the check.
pub(crate) fn join(
    state: &mut State,
    value: &Value,
    joiner: Option<StringInput<'_>>,
    attribute: Option<&str>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    check_printable(value)?;
    minijinja::filters::join(state, value, joiner, attribute, kwargs)
}

/// `value | escape` (`e`), after the check.
pub(crate) fn escape(state: &mut State, value: &Value) -> Result<Value, Error> {
    check_printable(value)?;
    minijinja::filters::escape(state, value)
}
