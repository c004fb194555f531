//! Crash-safe file writing: the content goes to a temporary file next to the target (same folder,
//! so the same file system), is flushed and fsynced, and only then renamed over the final name.
//! A write that fails at any point removes the temporary file and leaves the final name untouched:
//! either the old file or the complete new one is there, never a partial one.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{IoError, Result};

/// Writes a file atomically: `write` fills it through a buffered writer; the file appears under
/// `path` only once `write` returned `Ok` and the data is on disk. On any error no file is left
/// under `path` (an existing one is kept as it was) and no temporary file is left either.
pub fn write_atomic(path: impl AsRef<Path>, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let path = path.as_ref();
    let staged = Staged::write(path, write)?;
    staged.commit()?;
    sync_dir(parent_of(path))
}

/// A complete, fsynced temporary file waiting to be renamed to its final name. Dropping it
/// without [`Staged::commit`] deletes the temporary file.
pub(crate) struct Staged {
    temp: tempfile::TempPath,
    target: PathBuf,
}

impl Staged {
    /// Writes the content to a temporary file in the target's folder and fsyncs it.
    pub(crate) fn write(target: &Path, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<Staged> {
        let dir = parent_of(target);
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        // tempfile creates 0600 files; saved models are meant to be shared like any file the
        // user writes, so ask for 0666 and let the umask narrow it (as `File::create` does).
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let temp = builder.tempfile_in(dir).map_err(|e| IoError::io(dir, e))?;
        let (file, temp) = temp.into_parts();
        fill(&file, write).map_err(|e| IoError::io(target, e))?;
        Ok(Staged { temp, target: target.to_path_buf() })
    }

    /// Renames the temporary file to the final name (replacing an existing file).
    pub(crate) fn commit(self) -> Result<()> {
        let Staged { temp, target } = self;
        temp.persist(&target).map_err(|e| IoError::io(&target, e.error))?;
        Ok(())
    }

    /// The final name this file will get.
    pub(crate) fn target(&self) -> &Path {
        &self.target
    }
}

fn fill(file: &File, write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, file);
    write(&mut w)?;
    w.flush()?;
    drop(w);
    file.sync_all()
}

/// The folder a path lives in (`.` for a bare file name).
pub(crate) fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Fsyncs a folder so that renames in it survive a crash. A no-op where folders cannot be opened.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let d = File::open(dir).map_err(|e| IoError::io(dir, e))?;
        d.sync_all().map_err(|e| IoError::io(dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    /// The process umask, read without changing it (Linux reports it in /proc).
    fn umask() -> Option<u32> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
        u32::from_str_radix(line.trim(), 8).ok()
    }

    #[test]
    fn written_files_follow_the_umask() {
        let Some(mask) = umask() else { return };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        super::write_atomic(&path, |w| w.write_all(b"{}")).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !mask, "mode {mode:o} with umask {mask:o}");
    }
}
