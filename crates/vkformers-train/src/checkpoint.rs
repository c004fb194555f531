//! Checkpoints `OUT/checkpoint-<step>/`: the trainable parameters (`trainable/model.safetensors`,
//! by their trainer names), AdamW's moments (`optimizer/model.safetensors`: `exp_avg.<name>`,
//! `exp_avg_sq.<name>`) and `trainer_state.json` (step, optimizer step and hyper-parameters,
//! schedule, RNG seed, data position, loss log), plus whatever the caller adds (a full model
//! adds a Hugging Face folder). Everything is written into `OUT/.checkpoint-<step>.tmp` and
//! that folder is renamed only once complete, so a kill mid-write leaves no `checkpoint-*`
//! that `--resume` would take but cannot read. The state records the size and SHA-256 of every
//! other file (`checksum`); a resume verifies them and falls back to the previous checkpoint when
//! the newest was damaged after it was written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::batching::DataPosition;
use crate::checksum::{self, FileSum};
use crate::error::{Result, TrainError};
use crate::schedule::Schedule;

pub const STATE_FILE: &str = "trainer_state.json";
/// Sub-folders holding a `model.safetensors` each.
pub const PARAMS_DIR: &str = "trainable";
pub const OPTIMIZER_DIR: &str = "optimizer";
const FORMAT: u32 = 1;

/// One optimizer step as logged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: u64,
    pub loss: f64,
    pub lr: f64,
    pub grad_norm: Option<f64>,
    pub eval_loss: Option<f64>,
}

/// `trainer_state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainerState {
    pub format: u32,
    /// Optimizer steps completed.
    pub step: u64,
    pub optimizer_steps: u64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub max_grad_norm: f32,
    pub schedule: Schedule,
    pub grad_accum: usize,
    /// The shuffling RNG: the permutation of epoch e is a function of (seed, e) only.
    pub seed: u64,
    pub shuffle: bool,
    pub data_position: DataPosition,
    /// Names of the trainable parameters, in order, and whether each decays.
    pub params: Vec<(String, bool)>,
    pub log: Vec<StepRecord>,
    /// fp16 runs: the loss scale and its clean-step count (absent in other runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<(f32, u32)>,
    /// Training sequences per epoch: the data position indexes them, so a resume over another
    /// count (other data, --seq-len or --packing) is refused (absent in older checkpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_sequences: Option<usize>,
    /// Size and SHA-256 of every other file of the checkpoint, by relative path (empty in
    /// checkpoints written before checksums, which are then not verified).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, FileSum>,
}

impl TrainerState {
    pub fn new_format() -> u32 {
        FORMAT
    }
}

/// The folder name of the checkpoint at `step`.
pub fn checkpoint_name(step: u64) -> String {
    format!("checkpoint-{step}")
}

fn step_of(dir: &Path) -> Option<u64> {
    dir.file_name()?.to_str()?.strip_prefix("checkpoint-")?.parse().ok()
}

/// The largest trainer state read.
const MAX_STATE_BYTES: u64 = 256 << 20;

/// Reads and checks a checkpoint folder's state (its files must be present).
pub fn read_state(dir: &Path) -> Result<TrainerState> {
    let path = dir.join(STATE_FILE);
    // The state grows with the loss log (~100 bytes a step): 256 MiB is millions of steps, and a
    // damaged or hostile file larger than that is refused before it is read.
    let size = std::fs::metadata(&path).map_err(|e| TrainError::checkpoint(dir, format!("{STATE_FILE}: {e}")))?.len();
    if size > MAX_STATE_BYTES {
        return Err(TrainError::checkpoint(
            dir,
            format!("{STATE_FILE} is {size} bytes, above the {MAX_STATE_BYTES}-byte limit"),
        ));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| TrainError::checkpoint(dir, format!("{STATE_FILE}: {e}")))?;
    let state: TrainerState =
        serde_json::from_str(&text).map_err(|e| TrainError::checkpoint(dir, format!("{STATE_FILE}: {e}")))?;
    if state.format != FORMAT {
        return Err(TrainError::checkpoint(dir, format!("format {} (this build reads {FORMAT})", state.format)));
    }
    for f in [PARAMS_DIR, OPTIMIZER_DIR] {
        if !dir.join(f).join(vkformers_io::WEIGHTS_NAME).is_file() {
            return Err(TrainError::checkpoint(dir, format!("{f}/{} is missing", vkformers_io::WEIGHTS_NAME)));
        }
    }
    Ok(state)
}

/// Reads the state of a checkpoint folder and verifies its files against their checksums.
pub fn read_verified(dir: &Path) -> Result<TrainerState> {
    let state = read_state(dir)?;
    checksum::verify(dir, &state.files)?;
    Ok(state)
}

/// Records the checksums of the files written so far into `tmp` in `state`.
pub fn record_checksums(tmp: &Path, state: &mut TrainerState) -> Result<()> {
    state.files = checksum::sums(tmp, STATE_FILE)?;
    Ok(())
}

/// Complete checkpoints under `out`, oldest first.
pub fn list_checkpoints(out: &Path) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(out)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).filter_map(|p| step_of(&p).map(|s| (s, p))).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// The checkpoint `--resume DIR` means: `DIR` itself when it is a checkpoint, else the newest
/// `checkpoint-*` inside it that is complete and passes its checksums; each newer one skipped is
/// named in a warning. None good is an error naming why each failed.
pub fn find_resume_dir(dir: &Path) -> Result<PathBuf> {
    if dir.join(STATE_FILE).exists() {
        read_verified(dir)?;
        return Ok(dir.to_path_buf());
    }
    if !dir.is_dir() {
        return Err(TrainError::file(dir, "--resume: no such folder"));
    }
    let mut bad = Vec::new();
    for (_, cp) in list_checkpoints(dir).into_iter().rev() {
        match read_verified(&cp) {
            Ok(_) => return Ok(cp),
            Err(e) => {
                eprintln!("warning: skipping {}: {e}; falling back to the previous checkpoint", cp.display());
                bad.push(e.to_string());
            }
        }
    }
    let why = if bad.is_empty() { String::new() } else { format!(" ({})", bad.join("; ")) };
    let msg = format!("--resume: no complete, intact checkpoint-<step> folder here{why}; start without --resume");
    Err(TrainError::file(dir, msg))
}

/// Moves the finished temporary folder `tmp` to `OUT/checkpoint-<step>` (replacing one of that
/// name) and keeps only the newest `keep` checkpoints (0 keeps all). A checkpoint leaves the
/// `checkpoint-*` names by one rename before its files are deleted, so a kill at any moment
/// never leaves a listed checkpoint with files missing.
pub fn publish(tmp: &Path, out: &Path, step: u64, keep: usize) -> Result<PathBuf> {
    let dst = out.join(checkpoint_name(step));
    if dst.exists() {
        discard(out, &dst)?;
    }
    std::fs::rename(tmp, &dst).map_err(|e| TrainError::file(&dst, e))?;
    if keep > 0 {
        let all = list_checkpoints(out);
        for (_, old) in all.iter().take(all.len().saturating_sub(keep)) {
            discard(out, old)?;
        }
    }
    Ok(dst)
}

/// Renames the checkpoint folder `dir` to a hidden name, then deletes it.
fn discard(out: &Path, dir: &Path) -> Result<()> {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let trash = out.join(format!(".{name}.discarded"));
    if trash.exists() {
        std::fs::remove_dir_all(&trash).map_err(|e| TrainError::file(&trash, e))?;
    }
    std::fs::rename(dir, &trash).map_err(|e| TrainError::file(dir, e))?;
    std::fs::remove_dir_all(&trash).map_err(|e| TrainError::file(&trash, e))
}

/// A fresh temporary folder for the checkpoint at `step` (a leftover of a killed run is removed).
pub fn temp_dir(out: &Path, step: u64) -> Result<PathBuf> {
    let tmp = out.join(format!(".{}.tmp", checkpoint_name(step)));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::file(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| TrainError::file(&tmp, e))?;
    Ok(tmp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_state_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::File::create(dir.path().join(STATE_FILE)).unwrap().set_len(MAX_STATE_BYTES + 1).unwrap();
        let e = read_state(dir.path()).unwrap_err().to_string();
        assert!(e.contains("limit"), "{e}");
    }
}
