//! Hub ids as users write them: `name`, `org/name`, optionally `@revision`.

/// Models or datasets: they live under different URL and cache prefixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepoKind {
    Model,
    Dataset,
}

impl RepoKind {
    pub(crate) fn hf(self) -> hf_hub::RepoType {
        match self {
            RepoKind::Model => hf_hub::RepoType::Model,
            RepoKind::Dataset => hf_hub::RepoType::Dataset,
        }
    }

    /// URL path prefix of the repo's files (`/{prefix}{id}/resolve/...`).
    pub(crate) fn url_prefix(self) -> &'static str {
        match self {
            RepoKind::Model => "",
            RepoKind::Dataset => "datasets/",
        }
    }
}

/// A parsed Hub id with its revision (`main` unless `@rev` was given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoRef {
    pub id: String,
    pub revision: String,
    pub kind: RepoKind,
}

impl RepoRef {
    /// `org/name[@revision]`, or `None` when `arg` cannot be a Hub id (so it is a missing path).
    pub fn parse(arg: &str, kind: RepoKind) -> Option<RepoRef> {
        let (id, revision) = match arg.split_once('@') {
            Some((id, rev)) if !rev.is_empty() => (id, rev),
            Some(_) => return None,
            None => (arg, "main"),
        };
        let parts: Vec<&str> = id.split('/').collect();
        let valid = parts.len() <= 2 && parts.iter().all(|p| is_name_part(p));
        let revision_ok = !revision.split('/').any(|c| c.is_empty() || c == "." || c == "..");
        (valid && revision_ok).then(|| RepoRef { id: id.to_string(), revision: revision.to_string(), kind })
    }

    pub(crate) fn hf(&self) -> hf_hub::Repo {
        hf_hub::Repo::with_revision(self.id.clone(), self.kind.hf(), self.revision.clone())
    }

    /// The same repo at another revision (a commit sha, or the Parquet conversion branch).
    pub(crate) fn at(&self, revision: &str) -> RepoRef {
        RepoRef { revision: revision.to_string(), ..self.clone() }
    }
}

/// The Hub's rule for each half of an id: letters, digits, `-`, `_`, `.`; no `--`/`..`; not
/// starting or ending with `-`/`.`; at most 96 characters.
fn is_name_part(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 96
        && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !p.contains("--")
        && !p.contains("..")
        && !p.starts_with(['-', '.'])
        && !p.ends_with(['-', '.'])
}

/// A full 40-hex git commit sha.
pub(crate) fn is_commit_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ids_and_revisions() {
        let r = RepoRef::parse("org/name@v1.0", RepoKind::Model).unwrap();
        assert_eq!((r.id.as_str(), r.revision.as_str()), ("org/name", "v1.0"));
        assert_eq!(RepoRef::parse("gpt2", RepoKind::Model).unwrap().revision, "main");
        let r = RepoRef::parse("org/ds@refs/convert/parquet", RepoKind::Dataset).unwrap();
        assert_eq!(r.revision, "refs/convert/parquet");
    }

    #[test]
    fn rejects_paths_and_bad_names() {
        for bad in ["./model", "../x", "/abs/path", "a/b/c", "org/..", "org/na--me", "x@", "a/b@../main", ""] {
            assert!(RepoRef::parse(bad, RepoKind::Model).is_none(), "{bad}");
        }
    }
}
