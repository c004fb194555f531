//! Checksums of a checkpoint's files: the size and SHA-256 of every file under the checkpoint
//! folder (but `trainer_state.json`, which records them), so that a resume can tell a checkpoint
//! that was damaged after it was written (a truncated copy, garbage bytes of the right size)
//! from a good one before loading moments that would turn every loss into NaN.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Result, TrainError};

/// One file's size and hex SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSum {
    pub bytes: u64,
    pub sha256: String,
}

/// The checksum of every file under `dir` except `skip` (a name at the top level), by its path
/// relative to `dir` with `/` separators.
pub fn sums(dir: &Path, skip: &str) -> Result<BTreeMap<String, FileSum>> {
    let mut out = BTreeMap::new();
    walk(dir, "", skip, &mut out)?;
    Ok(out)
}

fn walk(dir: &Path, prefix: &str, skip: &str, out: &mut BTreeMap<String, FileSum>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| TrainError::file(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| TrainError::file(dir, e))?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let rel = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
        if path.is_dir() {
            walk(&path, &rel, skip, out)?;
        } else if rel != skip {
            out.insert(rel, sum_file(&path)?);
        }
    }
    Ok(())
}

/// Streams the file through SHA-256 (1 MiB at a time: weights may be gigabytes).
pub fn sum_file(path: &Path) -> Result<FileSum> {
    let mut f = std::fs::File::open(path).map_err(|e| TrainError::file(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| TrainError::file(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    let sha256 = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok(FileSum { bytes, sha256 })
}

/// Checks every recorded file of the checkpoint `dir`: present, of its size, of its SHA-256.
pub fn verify(dir: &Path, recorded: &BTreeMap<String, FileSum>) -> Result<()> {
    for (rel, want) in recorded {
        let path = dir.join(rel);
        let meta = std::fs::metadata(&path)
            .map_err(|e| TrainError::checkpoint(dir, format!("{rel} is missing or unreadable: {e}")))?;
        if meta.len() != want.bytes {
            let what = if meta.len() < want.bytes { "truncated" } else { "longer than written" };
            let msg = format!("{rel} is {what}: {} bytes, {} when saved", meta.len(), want.bytes);
            return Err(TrainError::checkpoint(dir, msg));
        }
        if sum_file(&path)?.sha256 != want.sha256 {
            let msg = format!("{rel} does not match its SHA-256 recorded in the checkpoint (the file is corrupt)");
            return Err(TrainError::checkpoint(dir, msg));
        }
    }
    Ok(())
}
