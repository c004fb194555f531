//! Typed push-constant structs from the reflected push blocks (see `build.rs`): one plain struct
//! of the scalar members (GLSL names, Rust types) per distinct layout, so a launcher builds its
//! scalars by name and a renamed or inserted shader field is a compile error.
//!
//! Naming: `<Family><Source>Push` (`attention/decode` → `AttentionDecodePush`). Where variants of
//! one source differ (`#if` members), each further layout adds the variant-name tokens all its
//! variants share and no other layout's variants have (`AttentionDecodeRopePush`). A layout
//! equal to an earlier one of the same family folder is a type alias of it, so one struct serves
//! every kernel that reads the same block (attention forward and backward).

use std::fmt::Write as _;

/// Type of a scalar push member.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scalar {
    U32,
    I32,
    F32,
}

impl Scalar {
    fn rust(self) -> &'static str {
        match self {
            Scalar::U32 => "u32",
            Scalar::I32 => "i32",
            Scalar::F32 => "f32",
        }
    }
}

/// A scalar member: its GLSL name, type and byte offset from the first scalar (the block's
/// offset minus the pointers' 8 bytes each).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Member {
    pub name: String,
    pub ty: Scalar,
    pub offset: u32,
}

/// One compiled kernel's scalars: kernel name (`family/source:variant`), the source
/// (`family/source`), the variant suffix and the names of its defines, the members and their
/// byte length.
pub struct KernelPush {
    pub kernel: String,
    pub source: String,
    pub suffix: String,
    pub defines: Vec<String>,
    /// `local_size_x` (0: not a literal).
    pub local_x: u32,
    pub members: Vec<Member>,
    pub bytes: u32,
}

/// Fewest members a layout of another source of the family must have to be taken as a `base`:
/// a shared header (attention's 11 scalars), not a coincidence of `n` alone.
const MIN_SHARED_HEADER: usize = 4;

/// A distinct layout and the kernels that read it.
struct Layout {
    name: String,
    members: Vec<Member>,
    bytes: u32,
    kernels: Vec<String>,
    /// The kernels' common literal `local_size_x`, 0 where they differ or have none.
    local_x: u32,
    alias_of: Option<usize>,
    /// A layout of the same source (or a long one of the family) whose members are a prefix of
    /// this one's: this struct holds it as `base` (the `#if` members a variant adds, or a
    /// kernel's own after a shared header, come after the shared ones).
    base: Option<usize>,
}

/// Rust code of every push struct, its `Push` impl and aliases, for the kernels in `all`
/// (in source order; kernels without scalars are skipped).
pub fn generate(all: &[KernelPush]) -> String {
    let layouts = layouts(all);
    let mut code = String::from("\n// Push-constant scalars, one struct per layout (build.rs, build/push_types.rs).\n");
    for (i, l) in layouts.iter().enumerate() {
        match l.alias_of {
            Some(i) => {
                let first = &layouts[i].name;
                writeln!(code, "\n/// Push scalars of `{}`: the same block as [`{first}`].", l.kernels[0]).unwrap();
                writeln!(code, "pub type {} = {first};", l.name).unwrap();
            }
            None => write_struct(&mut code, i, &layouts),
        }
    }
    let table: Vec<String> = layouts
        .iter()
        .filter(|l| l.alias_of.is_none())
        .map(|l| format!("    (\"{}\", <{} as crate::launch::Push>::KERNELS, {}),", l.name, l.name, l.bytes))
        .collect();
    writeln!(
        code,
        "\n/// Every push struct: (name, kernels, bytes), for tests that check the grouping.\n\
         #[cfg(test)]\npub(crate) const PUSH_STRUCTS: &[(&str, &[&str], usize)] = &[\n{}\n];",
        table.join("\n")
    )
    .unwrap();
    code
}

/// The struct of layout `i` with its `Push` impl, whose kernels include its aliases'.
fn write_struct(code: &mut String, i: usize, layouts: &[Layout]) {
    let l = &layouts[i];
    let kernels: Vec<&String> = layouts
        .iter()
        .enumerate()
        .filter(|(j, o)| *j == i || o.alias_of == Some(i))
        .flat_map(|(_, o)| &o.kernels)
        .collect();
    writeln!(
        code,
        "\n/// Push-constant scalars (after the buffer pointers) of `{}` and {} kernel(s) in all.",
        l.kernels[0],
        kernels.len()
    )
    .unwrap();
    writeln!(
        code,
        "#[allow(non_snake_case)]\n#[derive(Clone, Copy, Debug, Default, PartialEq)]\npub struct {} {{",
        l.name
    )
    .unwrap();
    let own = match l.base {
        Some(b) => {
            writeln!(code, "    pub base: {},", layouts[b].name).unwrap();
            &l.members[layouts[b].members.len()..]
        }
        None => &l.members[..],
    };
    for m in own {
        writeln!(code, "    pub {}: {},", field(&m.name), m.ty.rust()).unwrap();
    }
    writeln!(code, "}}\n\nimpl crate::launch::Push for {} {{", l.name).unwrap();
    let names: Vec<String> = kernels.iter().map(|k| format!("\"{k}\"")).collect();
    writeln!(code, "    const KERNELS: &'static [&'static str] = &[{}];", names.join(", ")).unwrap();
    let group = || layouts.iter().enumerate().filter(|(j, o)| *j == i || o.alias_of == Some(i));
    let local_x = if group().all(|(_, o)| o.local_x == l.local_x) { l.local_x } else { 0 };
    writeln!(code, "    const LOCAL_X: u32 = {local_x};").unwrap();
    writeln!(code, "    type Bytes = [u8; {}];", l.bytes).unwrap();
    writeln!(code, "    fn bytes(&self) -> [u8; {}] {{\n        let mut b = [0u8; {}];", l.bytes, l.bytes).unwrap();
    if let Some(base) = l.base {
        let n = layouts[base].bytes;
        writeln!(code, "        b[..{n}].copy_from_slice(&crate::launch::Push::bytes(&self.base));").unwrap();
    }
    for m in own {
        let (o, e) = (m.offset, m.offset + 4);
        writeln!(code, "        b[{o}..{e}].copy_from_slice(&self.{}.to_le_bytes());", field(&m.name)).unwrap();
    }
    writeln!(code, "        b\n    }}\n}}").unwrap();
}

/// A Rust field name for a GLSL member (a raw identifier where it is a Rust keyword).
fn field(name: &str) -> String {
    const KEYWORDS: &[&str] = &[
        "as", "box", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "fn", "for", "if", "impl",
        "in", "let", "loop", "match", "mod", "move", "mut", "priv", "pub", "ref", "return", "static", "struct",
        "trait", "type", "unsafe", "use", "where", "while", "yield", "async", "await", "try", "gen", "macro",
    ];
    if KEYWORDS.contains(&name) {
        format!("r#{name}")
    } else {
        name.to_string()
    }
}

/// Groups kernels by source, then by layout; names each layout; aliases repeats within a family.
fn layouts(all: &[KernelPush]) -> Vec<Layout> {
    let mut sources: Vec<&str> = Vec::new();
    for k in all {
        if !sources.contains(&k.source.as_str()) {
            sources.push(&k.source);
        }
    }
    let mut out: Vec<Layout> = Vec::new();
    for src in sources {
        let kernels: Vec<&KernelPush> = all.iter().filter(|k| k.source == src && !k.members.is_empty()).collect();
        let mut groups: Vec<Vec<&KernelPush>> = Vec::new();
        for k in kernels {
            match groups.iter_mut().find(|g| g[0].members == k.members) {
                Some(g) => g.push(k),
                None => groups.push(vec![k]),
            }
        }
        let names = group_names(src, &groups);
        let first = out.len();
        let family_dir = format!("{}/", src.split('/').next().unwrap_or(src));
        for (g, name) in groups.iter().zip(names) {
            let alias_of = out.iter().position(|l| {
                l.alias_of.is_none() && l.members == g[0].members && l.kernels[0].starts_with(&family_dir)
            });
            let members = &g[0].members;
            let base = (0..out.len()).find(|&i| {
                let b = &out[i];
                let near =
                    i >= first || (b.members.len() >= MIN_SHARED_HEADER && b.kernels[0].starts_with(&family_dir));
                near && b.alias_of.is_none()
                    && b.base.is_none()
                    && b.members.len() < members.len()
                    && members.starts_with(&b.members)
            });
            out.push(Layout {
                base,
                name,
                members: g[0].members.clone(),
                bytes: g[0].bytes,
                kernels: g.iter().map(|k| k.kernel.clone()).collect(),
                local_x: if g.iter().all(|k| k.local_x == g[0].local_x) { g[0].local_x } else { 0 },
                alias_of,
            });
        }
    }
    out
}

/// The struct name of each layout group of source `src`: the first group without distinguishing
/// tokens (variant-name parts, else define names: `out16`) gets the plain name.
fn group_names(src: &str, groups: &[Vec<&KernelPush>]) -> Vec<String> {
    let base = camel(&src.replace('/', "_"));
    if groups.len() == 1 {
        return vec![format!("{base}Push")];
    }
    let suffix_tokens = |k: &KernelPush| -> Vec<String> { k.suffix.split('_').map(str::to_string).collect() };
    let define_tokens = |k: &KernelPush| -> Vec<String> { k.defines.iter().map(|d| d.to_lowercase()).collect() };
    let mut names = Vec::new();
    let mut plain_taken = false;
    for (i, g) in groups.iter().enumerate() {
        let mut own = distinguishing(groups, i, suffix_tokens);
        if own.is_empty() {
            own = distinguishing(groups, i, define_tokens);
        }
        let name = if own.is_empty() && !plain_taken {
            plain_taken = true;
            format!("{base}Push")
        } else if own.is_empty() {
            format!("{base}Push{}", camel(&g[0].suffix))
        } else {
            format!("{base}Push{}", camel(&own.join("_")))
        };
        names.push(name);
    }
    names
}

/// The tokens every kernel of `groups[i]` has and no kernel of another group has.
fn distinguishing(groups: &[Vec<&KernelPush>], i: usize, tokens: impl Fn(&KernelPush) -> Vec<String>) -> Vec<String> {
    let others: Vec<String> = groups
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .flat_map(|(_, o)| o.iter().flat_map(|k| tokens(k)))
        .collect();
    let g = &groups[i];
    let shared = |t: &String| !t.is_empty() && g.iter().all(|k| tokens(k).contains(t)) && !others.contains(t);
    tokens(g[0]).into_iter().filter(shared).collect()
}

/// `snake_case` (or `a-b`) → `CamelCase`.
fn camel(s: &str) -> String {
    s.split(['_', '-'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}
