//! The Python `huggingface_hub` cache layout, read and written the same way:
//! `{cache}/{models|datasets}--{org}--{name}/blobs/{etag}`, `refs/{revision}` (a commit sha), and
//! `snapshots/{sha}/{file}` as relative symlinks into `blobs/`.

use crate::error::HubError;
use crate::repo_id::{is_commit_sha, RepoRef};
use std::io::Write;
use std::path::{Component, Path, PathBuf};

/// One repo's folder in the cache.
pub(crate) struct CacheRepo {
    pub root: PathBuf,
    /// `{cache}/.locks/{folder}`: where Python keeps the per-blob download locks.
    locks: PathBuf,
}

impl CacheRepo {
    pub fn new(cache_dir: &Path, repo: &RepoRef) -> CacheRepo {
        // hf-hub names the folder exactly as Python does (`models--org--name`).
        let folder = repo.hf().folder_name();
        CacheRepo { root: cache_dir.join(&folder), locks: cache_dir.join(".locks").join(folder) }
    }

    /// Holds Python's lock for blob `etag` (an exclusive `flock` on `.locks/{folder}/{etag}.lock`,
    /// as its `filelock` takes), so concurrent downloads of one blob, by us or by Python, take
    /// turns instead of appending to the same partial file. Released when dropped.
    pub fn lock_blob(&self, etag: &str, name: &str) -> Result<std::fs::File, HubError> {
        std::fs::create_dir_all(&self.locks).map_err(HubError::io(&self.locks))?;
        let path = self.locks.join(format!("{etag}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(HubError::io(&path))?;
        if fs4::FileExt::try_lock(&file).is_err() {
            eprintln!("waiting for another download of `{name}` to finish ({})", path.display());
            fs4::FileExt::lock(&file).map_err(HubError::io(&path))?;
        }
        Ok(file)
    }

    pub fn blob(&self, etag: &str) -> PathBuf {
        self.root.join("blobs").join(etag)
    }

    /// Python's name for a partial download, so either side can resume the other's.
    pub fn incomplete(&self, etag: &str) -> PathBuf {
        self.root.join("blobs").join(format!("{etag}.incomplete"))
    }

    pub fn snapshot(&self, sha: &str) -> PathBuf {
        self.root.join("snapshots").join(sha)
    }

    /// The commit `revision` points to in the cache: itself when it is a sha, else `refs/{revision}`.
    pub fn commit_of(&self, revision: &str) -> Option<String> {
        if is_commit_sha(revision) {
            return Some(revision.to_string());
        }
        let sha = std::fs::read_to_string(self.root.join("refs").join(revision)).ok()?;
        let sha = sha.trim().to_string();
        is_commit_sha(&sha).then_some(sha)
    }

    /// Records `refs/{revision}` = `sha` (skipped for a sha, as Python does), atomically.
    pub fn write_ref(&self, revision: &str, sha: &str) -> Result<(), HubError> {
        if revision == sha {
            return Ok(());
        }
        let path = self.root.join("refs").join(revision);
        let dir = path.parent().expect("refs path has a parent");
        std::fs::create_dir_all(dir).map_err(HubError::io(dir))?;
        // A temporary file of its own per writer: concurrent resolutions each rename a whole ref.
        // 0666 narrowed by the umask, as Python's cache writes it (tempfile alone gives 0600).
        let mut tmp = tempfile::Builder::new()
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .tempfile_in(dir)
            .map_err(HubError::io(dir))?;
        tmp.write_all(sha.as_bytes()).map_err(HubError::io(tmp.path()))?;
        tmp.persist(&path).map_err(|e| HubError::Io { path: path.clone(), source: e.error })?;
        Ok(())
    }

    /// Points `snapshots/{sha}/{name}` at `blobs/{etag}` with a relative link (a copy where
    /// links are unavailable), the way Python does.
    pub fn link(&self, sha: &str, name: &str, etag: &str) -> Result<PathBuf, HubError> {
        let entry = self.snapshot(sha).join(name);
        if entry.exists() {
            return Ok(entry);
        }
        let dir = entry.parent().expect("snapshot entry has a parent");
        std::fs::create_dir_all(dir).map_err(HubError::io(dir))?;
        // From snapshots/{sha}/{name}: up once per folder in `name`, then snapshots/{sha}, then blobs.
        let depth = name.split('/').count() + 1;
        let target = PathBuf::from("../".repeat(depth)).join("blobs").join(etag);
        if entry.symlink_metadata().is_ok() {
            let _ = std::fs::remove_file(&entry); // a dangling link to a blob since removed
        }
        match make_link(&target, &entry, &self.blob(etag)) {
            Ok(()) => Ok(entry),
            // Another resolution of the same commit linked it first.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && entry.exists() => Ok(entry),
            Err(e) => Err(HubError::Io { path: entry, source: e }),
        }
    }
}

#[cfg(unix)]
fn make_link(target: &Path, entry: &Path, _blob: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, entry)
}

#[cfg(not(unix))]
fn make_link(_target: &Path, entry: &Path, blob: &Path) -> std::io::Result<()> {
    std::fs::copy(blob, entry).map(|_| ())
}

/// A repo file name from the Hub that is safe to join under a snapshot folder: relative, made
/// of normal components only (no `..`, `.`, root, drive prefix or backslash), not empty.
pub(crate) fn check_repo_path(id: &str, name: &str) -> Result<(), HubError> {
    let unsafe_path = || HubError::UnsafePath { id: id.to_string(), name: name.to_string() };
    if name.is_empty() || name.contains('\\') || name.contains('\0') || name.split('/').any(|c| c.is_empty()) {
        return Err(unsafe_path());
    }
    if Path::new(name).components().all(|c| matches!(c, Component::Normal(_))) {
        Ok(())
    } else {
        Err(unsafe_path())
    }
}

/// A blob name (etag) from the Hub: a git sha1 or a sha256, hex only.
pub(crate) fn check_etag(id: &str, etag: &str) -> Result<(), HubError> {
    if (etag.len() == 40 || etag.len() == 64) && etag.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(HubError::UnsafePath { id: id.to_string(), name: format!("blob {etag}") })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_paths_stay_inside() {
        for ok in ["config.json", "data/train-0000.jsonl", "a.b/c..d.json"] {
            assert!(check_repo_path("o/n", ok).is_ok(), "{ok}");
        }
        for bad in ["../x", "a/../../x", "/etc/passwd", "a//b", "./x", "a\\..\\x", "", "a/"] {
            assert!(check_repo_path("o/n", bad).is_err(), "{bad}");
        }
        assert!(check_etag("o/n", "../../x").is_err());
        assert!(check_etag("o/n", &"a".repeat(64)).is_ok());
    }

    /// Refs are written 0666 narrowed by the umask, as Python's cache writes them, not 0600.
    #[test]
    fn refs_follow_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let repo = RepoRef::parse("org/name", crate::repo_id::RepoKind::Model).unwrap();
        let cache = CacheRepo::new(dir.path(), &repo);
        cache.write_ref("main", &"a".repeat(40)).unwrap();
        let mode = std::fs::metadata(cache.root.join("refs/main")).unwrap().permissions().mode() & 0o777;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let Some(mask) =
            status.lines().find_map(|l| l.strip_prefix("Umask:")).and_then(|m| u32::from_str_radix(m.trim(), 8).ok())
        else {
            return;
        };
        assert_eq!(mode, 0o666 & !mask, "ref mode {mode:o} with umask {mask:o}");
    }
}
