//! The integer `#define`s of each compiled kernel, so a launcher reads a tile or workgroup size
//! from the shader instead of writing it a second time.
//!
//! A kernel's values are its variant's `NAME=INT` defines, then every `#define NAME INT` the
//! preprocessor always takes: one outside any `#if`, or a default inside `#ifndef NAME` that the
//! variant does not set; and every global `const uint NAME = INT` (outside any block or `#if`).
//! Values under other conditions, or not a single integer literal (`1u`, `0x80000000u` and
//! `(1u << 6)` count), are left out.
//! They come out as `code::defines::<family>_<source>[_<variant>]::NAME: u32`.

use std::fmt::Write as _;

/// The integer defines of one variant's resolved source: (name, value), variant's first.
pub fn integer_defines(text: &str, variant: &[(String, Option<String>)]) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> =
        variant.iter().filter_map(|(k, v)| Some((k.clone(), literal(v.as_deref()?)?))).collect();
    let set_by_variant = |n: &str| variant.iter().any(|(k, _)| k == n);
    // Each open conditional: `Some(name)` for `#ifndef name`, `None` for any other.
    let mut open: Vec<Option<String>> = Vec::new();
    let mut braces = 0i32;
    for line in text.lines() {
        let l = line.trim();
        let code = l.split("//").next().unwrap_or("");
        let global = braces == 0 && open.is_empty();
        braces += code.matches('{').count() as i32 - code.matches('}').count() as i32;
        let Some(directive) = l.strip_prefix('#') else {
            if global {
                for (name, v) in global_constants(code) {
                    if !out.iter().any(|(k, _)| *k == name) {
                        out.push((name, v));
                    }
                }
            }
            continue;
        };
        let mut words = directive.split_whitespace();
        match words.next() {
            Some("ifndef") => open.push(words.next().map(str::to_string)),
            Some("if" | "ifdef") => open.push(None),
            Some("else" | "elif") => {
                if let Some(top) = open.last_mut() {
                    *top = None;
                }
            }
            Some("endif") => {
                open.pop();
            }
            Some("define") => {
                let Some(name) = words.next() else { continue };
                let value = words.collect::<Vec<_>>().join(" ");
                let value = value.split("//").next().unwrap_or("").trim();
                let taken = match open.as_slice() {
                    [] => true,
                    [Some(guard)] => guard == name && !set_by_variant(name),
                    _ => false,
                };
                if let (true, Some(v)) = (taken, literal(value)) {
                    if !out.iter().any(|(k, _)| k == name) {
                        out.push((name.to_string(), v));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The `NAME = INT` declarators of a global `const uint`/`const int` line
/// (`const uint BM = 128, BN = 128, BK = 32;`); declarators with other initialisers are skipped.
fn global_constants(code: &str) -> Vec<(String, u32)> {
    let Some(rest) = code.strip_prefix("const uint ").or_else(|| code.strip_prefix("const int ")) else {
        return Vec::new();
    };
    rest.trim_end()
        .trim_end_matches(';')
        .split(',')
        .filter_map(|d| {
            let (name, value) = d.split_once('=')?;
            Some((name.trim().to_string(), literal(value.trim())?))
        })
        .collect()
}

/// An integer literal (decimal or `0x` hex), optionally `u`-suffixed, or a bit `(A << B)` of two such (flag
/// bits: `#define NORMED_BIT (1u << 6)`).
fn literal(s: &str) -> Option<u32> {
    let s = s.trim();
    let inner = s.strip_prefix('(').and_then(|r| r.strip_suffix(')')).unwrap_or(s);
    if let Some((a, b)) = inner.split_once("<<") {
        return literal(a)?.checked_shl(literal(b)?);
    }
    let digits = inner.strip_suffix('u').unwrap_or(inner);
    match digits.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => digits.parse().ok(),
    }
}

/// `pub mod defines` with one module of constants per kernel (`kernels`: name, defines).
pub fn generate(kernels: &[(String, Vec<(String, u32)>)]) -> String {
    let mut code = String::from(
        "\n/// Integer `#define`s of each kernel (build/defines.rs): tile and workgroup sizes written \
         once, in the shader.\npub mod defines {\n",
    );
    for (name, defines) in kernels.iter().filter(|(_, d)| !d.is_empty()) {
        let module = name.replace(['/', ':', '-'], "_").to_lowercase();
        writeln!(code, "    /// `{name}`\n    #[allow(non_upper_case_globals)]\n    pub mod {module} {{").unwrap();
        for (k, v) in defines {
            writeln!(code, "        pub const {k}: u32 = {v};").unwrap();
        }
        code.push_str("    }\n");
    }
    let table: Vec<String> = kernels
        .iter()
        .filter(|(_, d)| !d.is_empty())
        .map(|(name, d)| {
            let pairs: Vec<String> = d.iter().map(|(k, v)| format!("(\"{k}\", {v})")).collect();
            format!("        (\"{name}\", &[{}]),", pairs.join(", "))
        })
        .collect();
    writeln!(
        code,
        "\n    /// Every kernel's defines by name, for tests that check a launcher's table against them.\n    \
         pub const ALL: &[(&str, &[(&str, u32)])] = &[\n{}\n    ];",
        table.join("\n")
    )
    .unwrap();
    code.push_str(
        "\n    /// The value of `define` in `kernel` (`family/source:variant`), if it has one.\n    \
         pub fn value(kernel: &str, define: &str) -> Option<u32> {\n        \
         let (_, d) = ALL.iter().find(|(k, _)| *k == kernel)?;\n        \
         d.iter().find(|(n, _)| *n == define).map(|&(_, v)| v)\n    }\n}\n",
    );
    code
}
