//! Which files of a model or adapter repo we need: config, generation config, tokenizer files and
//! safetensors weights (one file, or the shards its index names). Pickle weights are never taken.

use crate::error::HubError;
use std::path::Path;

/// What the caller expects the repo to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    Model,
    Adapter,
    /// An adapter when the repo has `adapter_config.json` and no `config.json`, else a model.
    Auto,
}

/// Needed when present; loading works without them.
const OPTIONAL: [&str; 7] = [
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    // DeBERTa-v3 repos ship only the sentencepiece model (no tokenizer.json).
    "spm.model",
    "chat_template.jinja",
];

const INDEX: &str = "model.safetensors.index.json";

/// The files to fetch; `index` is set for sharded weights, whose shards come from the index.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub files: Vec<String>,
    pub index: Option<String>,
}

/// The fetch plan for a repo holding `names`.
pub(crate) fn plan(id: &str, names: &[String], want: Want) -> Result<Plan, HubError> {
    let has = |n: &str| names.iter().any(|x| x == n);
    let adapter = match want {
        Want::Adapter => true,
        Want::Model => false,
        Want::Auto => has("adapter_config.json") && !has("config.json"),
    };
    let mut files: Vec<String> = Vec::new();
    let mut index = None;
    if adapter {
        require(id, names, "adapter_config.json")?;
        files.push("adapter_config.json".into());
        weights_or_refuse(id, names, "adapter_model.safetensors")?;
        files.push("adapter_model.safetensors".into());
    } else {
        require(id, names, "config.json")?;
        files.push("config.json".into());
        if has(INDEX) {
            files.push(INDEX.into());
            index = Some(INDEX.to_string());
        } else {
            weights_or_refuse(id, names, "model.safetensors")?;
            files.push("model.safetensors".into());
        }
    }
    files.extend(OPTIONAL.iter().filter(|n| has(n)).map(|n| n.to_string()));
    Ok(Plan { files, index })
}

fn require(id: &str, names: &[String], name: &str) -> Result<(), HubError> {
    if names.iter().any(|x| x == name) {
        Ok(())
    } else {
        Err(HubError::NoWeights { id: id.to_string(), expected: format!("`{name}` in the repo") })
    }
}

/// `weights` must be there; a repo with pickle weights instead gets a clear refusal.
fn weights_or_refuse(id: &str, names: &[String], weights: &str) -> Result<(), HubError> {
    if names.iter().any(|x| x == weights) {
        return Ok(());
    }
    let pickles: Vec<&str> = names.iter().map(String::as_str).filter(|n| is_pickle(n)).collect();
    if pickles.is_empty() {
        let expected = format!("`{weights}` or `{INDEX}`");
        Err(HubError::NoWeights { id: id.to_string(), expected })
    } else {
        Err(HubError::PickleOnly { id: id.to_string(), files: pickles.join(", ") })
    }
}

fn is_pickle(name: &str) -> bool {
    [".bin", ".pt", ".pth", ".ckpt", ".pkl"].iter().any(|ext| name.ends_with(ext))
}

/// The largest safetensors index read (16 MiB).
const MAX_INDEX_BYTES: u64 = 16 << 20;

/// The shard file names a `model.safetensors.index.json` maps tensors to, sorted, unique.
pub(crate) fn shards(id: &str, index: &Path) -> Result<Vec<String>, HubError> {
    let corrupt = |what: String| HubError::Corrupt { id: id.to_string(), name: INDEX.to_string(), what };
    // An index maps names to shard files: a few MB for the largest models; refuse more before
    // reading it (as every JSON file we read is capped).
    let size = std::fs::metadata(index).map_err(HubError::io(index))?.len();
    if size > MAX_INDEX_BYTES {
        return Err(corrupt(format!("{size} bytes, above the {MAX_INDEX_BYTES}-byte limit for an index")));
    }
    let text = std::fs::read_to_string(index).map_err(HubError::io(index))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| corrupt("no weight_map".into()))?;
    let mut shards: Vec<String> = Vec::new();
    for file in map.values() {
        let file = file.as_str().ok_or_else(|| corrupt("weight_map value is not a string".into()))?;
        crate::cache::check_repo_path(id, file)?;
        shards.push(file.to_string());
    }
    shards.sort();
    shards.dedup();
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_oversized_index_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join(INDEX);
        std::fs::File::create(&index).unwrap().set_len(MAX_INDEX_BYTES + 1).unwrap();
        let e = shards("o/m", &index).unwrap_err().to_string();
        assert!(e.contains("limit"), "{e}");
    }

    #[test]
    fn model_takes_only_what_loading_needs() {
        let repo = names(&[
            "config.json",
            "model.safetensors",
            "pytorch_model.bin",
            "tokenizer.json",
            "README.md",
            "flax_model.msgpack",
        ]);
        let p = plan("o/m", &repo, Want::Auto).unwrap();
        assert_eq!(p.files, names(&["config.json", "model.safetensors", "tokenizer.json"]));
        assert_eq!(p.index, None);
    }

    #[test]
    fn sharded_model_uses_the_index() {
        let repo = names(&["config.json", INDEX, "model-00001-of-00002.safetensors", "model.safetensors"]);
        let p = plan("o/m", &repo, Want::Model).unwrap();
        assert_eq!(p.index.as_deref(), Some(INDEX));
        assert!(!p.files.contains(&"model.safetensors".to_string()));
    }

    #[test]
    fn pickle_only_is_refused_and_adapters_detected() {
        let err = plan("o/m", &names(&["config.json", "pytorch_model.bin"]), Want::Auto).unwrap_err();
        assert!(matches!(err, HubError::PickleOnly { .. }), "{err}");
        let p = plan("o/a", &names(&["adapter_config.json", "adapter_model.safetensors"]), Want::Auto).unwrap();
        assert_eq!(p.files, names(&["adapter_config.json", "adapter_model.safetensors"]));
        let err = plan("o/a", &names(&["adapter_config.json", "adapter_model.bin"]), Want::Auto).unwrap_err();
        assert!(matches!(err, HubError::PickleOnly { .. }), "{err}");
        let err = plan("o/m", &names(&["config.json"]), Want::Model).unwrap_err();
        assert!(matches!(err, HubError::NoWeights { .. }), "{err}");
    }
}
