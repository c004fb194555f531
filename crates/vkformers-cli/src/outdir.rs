//! The `--out` folder of `train` and `finetune`: which folders a run may write into, what a
//! failed or killed run leaves behind, and the final save.
//!
//! The final save must never leave a half-written model under names a loader takes. A whole
//! folder cannot simply be renamed into place, because `--out` also holds this run's
//! checkpoints and metrics (and `--resume` reads them from there). So:
//!
//! 1. every final file is written into `OUT/.final.tmp/` (a kill here leaves only that
//!    folder, which the next run deletes);
//! 2. the marker `OUT/.vkformers-incomplete` is written: from now on the model files in OUT
//!    are a mix of old and new, and every command that loads a model refuses the folder;
//! 3. weight files of an older save that the new one does not have (another sharding) are
//!    deleted, then each new file is renamed into OUT (one rename each, same file system);
//! 4. the marker is deleted last: its absence means the folder is complete.
//!
//! A marker of "incomplete" rather than one of "complete" keeps every folder that vkformers
//! did not write (a Hub download, a `save_pretrained` folder) loadable as it is.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

/// Present while the model files of a folder are being replaced.
pub const INCOMPLETE_MARKER: &str = ".vkformers-incomplete";
const FINAL_TMP: &str = ".final.tmp";

/// Files that only a vkformers run writes into its `--out`: a folder holding one of them (or a
/// `checkpoint-*` folder) is this tool's own output and may be written into again.
const OWN_FILES: [&str; 3] = ["metrics.jsonl", "trainer_state.json", INCOMPLETE_MARKER];

/// Refuses a `--model` folder whose last save by vkformers was interrupted.
pub fn check_complete(dir: &Path) -> anyhow::Result<()> {
    if dir.join(INCOMPLETE_MARKER).exists() {
        bail!(
            "{}: the final save of the vkformers run that wrote this folder was interrupted, so its \
             model files may be a mix of two saves; run that training again (with --resume to \
             continue from its checkpoints), or delete the folder",
            dir.display()
        );
    }
    Ok(())
}

/// Leftovers of a killed run: temporary files and folders (`.*.tmp`) and checkpoints caught
/// between their rename and their deletion (`.*.discarded`).
fn is_leftover(name: &str) -> bool {
    name.starts_with('.') && (name.ends_with(".tmp") || name.ends_with(".discarded"))
}

/// Whether two paths name the same existing folder.
pub fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// What `--out` held before this run, so a failed run can take back what it added.
pub struct OutDir {
    path: PathBuf,
    existed: bool,
}

impl OutDir {
    /// Checks `out` before anything is loaded: it must not be the model folder, and a folder
    /// with files must be this tool's own output (a run to continue or redo), unless
    /// `--overwrite-output-dir`. Leftovers of a killed run in it are deleted.
    pub fn check(out: &Path, model: Option<&Path>, overwrite: bool) -> anyhow::Result<OutDir> {
        if out.exists() && !out.is_dir() {
            bail!("--out {} is a file, not a folder", out.display());
        }
        if let Some(model) = model.filter(|m| same_folder(out, m)) {
            if !overwrite {
                bail!(
                    "--out {} is the --model folder {}: the run would replace the model it reads; give \
                     another --out (or --overwrite-output-dir to replace it on purpose)",
                    out.display(),
                    model.display()
                );
            }
        }
        let existed = out.is_dir();
        if existed {
            let names = entries(out)?;
            let foreign = names.iter().any(|n| !is_leftover(n));
            let own = names.iter().any(|n| OWN_FILES.contains(&n.as_str()) || n.starts_with("checkpoint-"));
            if foreign && !own && !overwrite {
                bail!(
                    "--out {} already holds files that are not the output of a vkformers run (no \
                     metrics.jsonl or checkpoint-*); give an empty or new folder, or \
                     --overwrite-output-dir to write into it anyway",
                    out.display()
                );
            }
            for name in names.iter().filter(|n| is_leftover(n)) {
                remove(&out.join(name))?;
            }
        }
        Ok(OutDir { path: out.to_path_buf(), existed })
    }

    /// Creates the folder (when this run is the first to write into it).
    pub fn create(&self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.path).with_context(|| format!("creating {}", self.path.display()))
    }

    /// After a failed run: deletes an empty `metrics.jsonl`, leftovers, and the folder itself
    /// when this run created it and nothing else is in it. Checkpoints stay (to resume from).
    pub fn clean_after_failure(&self) {
        let metrics = self.path.join("metrics.jsonl");
        if std::fs::metadata(&metrics).is_ok_and(|m| m.len() == 0) {
            let _ = std::fs::remove_file(&metrics);
        }
        let Ok(names) = entries(&self.path) else { return };
        for name in names.iter().filter(|n| is_leftover(n)) {
            let _ = remove(&self.path.join(name));
        }
        if !self.existed && entries(&self.path).is_ok_and(|n| n.is_empty()) {
            let _ = std::fs::remove_dir(&self.path);
        }
    }

    /// The final save: `write` fills a temporary folder, whose files then replace the model
    /// files of OUT as the module comment says.
    pub fn publish(&self, write: impl FnOnce(&Path) -> anyhow::Result<()>) -> anyhow::Result<()> {
        let out = &self.path;
        let tmp = out.join(FINAL_TMP);
        if tmp.exists() {
            remove(&tmp)?;
        }
        std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        write(&tmp)?;
        let new = entries(&tmp)?;
        vkformers_io::write_atomic(out.join(INCOMPLETE_MARKER), |w| {
            w.write_all(b"vkformers is replacing the model files of this folder\n")
        })?;
        if new.iter().any(|n| is_model_weights(n)) {
            for old in entries(out)?.iter().filter(|n| is_model_weights(n) && !new.contains(n)) {
                remove(&out.join(old))?;
            }
        }
        for name in &new {
            let (from, to) = (tmp.join(name), out.join(name));
            std::fs::rename(&from, &to).with_context(|| format!("moving {} to {}", from.display(), to.display()))?;
        }
        std::fs::remove_dir(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
        sync_dir(out)?;
        std::fs::remove_file(out.join(INCOMPLETE_MARKER)).context("removing the save marker")?;
        sync_dir(out)
    }
}

/// A model's weights and index as `save_pretrained` names them (`model.safetensors`,
/// `model-00001-of-00003.safetensors`, `model.safetensors.index.json`): what a save with
/// another sharding would leave stale. Only these go, and only when the new save has weights of
/// its own (an adapter saved into a model folder leaves the model's weights alone).
fn is_model_weights(name: &str) -> bool {
    let shard =
        name.strip_prefix("model-").and_then(|r| r.strip_suffix(".safetensors")).and_then(|r| r.split_once("-of-"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    matches!(name, "model.safetensors" | "model.safetensors.index.json")
        || shard.is_some_and(|(a, b)| digits(a) && digits(b))
}

fn entries(dir: &Path) -> anyhow::Result<Vec<String>> {
    let rd = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut names = Vec::new();
    for e in rd {
        names.push(e.with_context(|| format!("reading {}", dir.display()))?.file_name().to_string_lossy().into_owned());
    }
    Ok(names)
}

fn remove(path: &Path) -> anyhow::Result<()> {
    let r = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
    r.with_context(|| format!("removing {}", path.display()))
}

/// Makes the renames in `dir` durable before the marker goes.
fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("syncing {}", dir.display()))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut n = entries(dir).unwrap();
        n.sort();
        n
    }

    #[test]
    fn a_failed_final_save_leaves_the_old_model_and_no_marker() {
        let out = tempfile::tempdir().unwrap();
        std::fs::write(out.path().join("metrics.jsonl"), "{}\n").unwrap();
        std::fs::write(out.path().join("model.safetensors"), "old").unwrap();
        let dir = OutDir::check(out.path(), None, false).unwrap();
        let e = dir.publish(|tmp| {
            std::fs::write(tmp.join("model.safetensors"), "half")?;
            anyhow::bail!("disk full")
        });
        assert!(e.is_err());
        assert_eq!(std::fs::read_to_string(out.path().join("model.safetensors")).unwrap(), "old");
        assert!(check_complete(out.path()).is_ok());
        // The next run deletes the temporary folder.
        OutDir::check(out.path(), None, false).unwrap();
        assert_eq!(names(out.path()), ["metrics.jsonl", "model.safetensors"]);
    }

    #[test]
    fn a_final_save_replaces_the_model_files_and_drops_stale_shards() {
        let out = tempfile::tempdir().unwrap();
        for f in ["metrics.jsonl", "model-00001-of-00002.safetensors", "model.safetensors.index.json"] {
            std::fs::write(out.path().join(f), "old").unwrap();
        }
        std::fs::create_dir(out.path().join("checkpoint-2")).unwrap();
        let dir = OutDir::check(out.path(), None, false).unwrap();
        dir.publish(|tmp| {
            std::fs::write(tmp.join("model.safetensors"), "new")?;
            std::fs::write(tmp.join("config.json"), "{}")?;
            Ok(())
        })
        .unwrap();
        assert_eq!(names(out.path()), ["checkpoint-2", "config.json", "metrics.jsonl", "model.safetensors"]);
        assert_eq!(std::fs::read_to_string(out.path().join("model.safetensors")).unwrap(), "new");
    }

    #[test]
    fn an_adapter_saved_into_a_model_folder_keeps_the_model_weights() {
        let out = tempfile::tempdir().unwrap();
        for f in ["model.safetensors", "notes.safetensors"] {
            std::fs::write(out.path().join(f), "base").unwrap();
        }
        let dir = OutDir::check(out.path(), None, true).unwrap();
        dir.publish(|tmp| Ok(std::fs::write(tmp.join("adapter_model.safetensors"), "lora")?)).unwrap();
        assert_eq!(names(out.path()), ["adapter_model.safetensors", "model.safetensors", "notes.safetensors"]);
        assert!(is_model_weights("model-00002-of-00003.safetensors") && !is_model_weights("model-x-of-y.safetensors"));
    }

    #[test]
    fn an_interrupted_save_is_refused_by_loaders() {
        let out = tempfile::tempdir().unwrap();
        std::fs::write(out.path().join(INCOMPLETE_MARKER), "").unwrap();
        let e = check_complete(out.path()).unwrap_err().to_string();
        assert!(e.contains("interrupted"), "{e}");
    }
}
