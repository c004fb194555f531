//! Which files of a dataset repo `--data org/name` means, following the `datasets` library's
//! conventions: `--data-files GLOB`, else the data files (JSONL/JSON/Parquet) whose path names
//! the split (`train`, `validation`/`valid`/`dev`/`val`, `test`/`eval`), with everything being
//! `train` when no file names a split. On the auto-converted Parquet branch
//! (`refs/convert/parquet`) files live under `{config}/{split}/` or `{config}/partial-{split}/`.

use crate::DatasetQuery;
use glob::{MatchOptions, Pattern};

/// Extensions of files we can read; builder scripts (`.py`) are never fetched nor run.
const DATA_EXTENSIONS: [&str; 3] = [".jsonl", ".json", ".parquet"];
/// JSON files that describe a dataset instead of holding rows.
const METADATA_JSON: [&str; 4] = ["dataset_infos.json", "dataset_info.json", "dataset_dict.json", "state.json"];

/// The files of a repo (listing `names`) that `query` selects, sorted; `Err` says why none.
pub(crate) fn select(names: &[String], query: &DatasetQuery, parquet_branch: bool) -> Result<Vec<String>, String> {
    if let Some(glob) = &query.files {
        return select_glob(names, glob);
    }
    let data: Vec<&str> = names.iter().map(String::as_str).filter(|n| is_data_file(n)).collect();
    if data.is_empty() {
        return Err("the repo has no JSONL/JSON/Parquet data files".into());
    }
    let data = if parquet_branch { in_parquet_config(&data, query)? } else { in_config(&data, query)? };
    let split = query.split.as_deref().unwrap_or("train");
    select_split(&data, split)
}

fn select_glob(names: &[String], glob: &str) -> Result<Vec<String>, String> {
    let pattern = Pattern::new(glob).map_err(|e| format!("--data-files `{glob}` is not a valid glob: {e}"))?;
    // `*` stays within one folder and `**` crosses folders, as in `datasets` data_files patterns.
    let options =
        MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: true };
    let mut hits: Vec<String> = names.iter().filter(|n| pattern.matches_with(n, options)).cloned().collect();
    if hits.is_empty() {
        return Err(format!("no file matches --data-files `{glob}`; the repo has: {}", preview(names)));
    }
    if let Some(bad) = hits.iter().find(|n| !is_data_file(n)) {
        return Err(format!("--data-files `{glob}` matches `{bad}`, which is not JSONL, JSON or Parquet"));
    }
    hits.sort();
    Ok(hits)
}

fn is_data_file(name: &str) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name);
    DATA_EXTENSIONS.iter().any(|ext| name.ends_with(ext))
        && !name.split('/').any(|c| c.starts_with('.'))
        && !METADATA_JSON.contains(&base)
}

/// On the main branch a config other than `default` is a top-level folder of that name.
fn in_config<'a>(data: &[&'a str], query: &DatasetQuery) -> Result<Vec<&'a str>, String> {
    match query.config.as_deref() {
        None | Some("default") => Ok(data.to_vec()),
        Some(config) => {
            let hits: Vec<&str> = data.iter().copied().filter(|n| first_folder(n) == Some(config)).collect();
            if hits.is_empty() {
                Err(format!("no data files under a folder `{config}/` for --data-config {config}"))
            } else {
                Ok(hits)
            }
        }
    }
}

/// On the Parquet branch every file sits under its config's folder; `default`, or the only
/// config, is taken when none is asked for.
fn in_parquet_config<'a>(data: &[&'a str], query: &DatasetQuery) -> Result<Vec<&'a str>, String> {
    let mut configs: Vec<&str> = data.iter().filter_map(|n| first_folder(n)).collect();
    configs.sort();
    configs.dedup();
    let config = match query.config.as_deref() {
        Some(c) => c,
        None if configs.contains(&"default") => "default",
        None if configs.len() == 1 => configs[0],
        None => return Err(format!("it has several configs, pick one with --data-config: {}", configs.join(", "))),
    };
    if !configs.contains(&config) {
        return Err(format!("no config `{config}` in its Parquet conversion; configs: {}", configs.join(", ")));
    }
    Ok(data.iter().copied().filter(|n| first_folder(n) == Some(config)).collect())
}

fn first_folder(name: &str) -> Option<&str> {
    name.split_once('/').map(|(first, _)| first)
}

/// Names a split is known by in file and folder names.
fn split_aliases(split: &str) -> Vec<&str> {
    match split {
        "train" => vec!["train", "training"],
        "validation" => vec!["validation", "valid", "dev", "val"],
        "test" => vec!["test", "testing", "eval", "evaluation"],
        other => vec![other],
    }
}

/// Words of a path: its parts between non-alphanumeric characters (`data/train-00000.jsonl` ->
/// data, train, 00000, jsonl), so `train` matches `train-0.jsonl` but not `constrained.jsonl`.
fn words(name: &str) -> Vec<String> {
    name.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_ascii_lowercase).collect()
}

fn names_split(name: &str, split: &str) -> bool {
    let aliases = split_aliases(split);
    words(name).iter().any(|w| aliases.contains(&w.as_str()))
}

fn select_split(data: &[&str], split: &str) -> Result<Vec<String>, String> {
    let mut hits: Vec<String> = data.iter().filter(|n| names_split(n, split)).map(|n| n.to_string()).collect();
    let any_split_named = data.iter().any(|n| ["train", "validation", "test"].iter().any(|s| names_split(n, s)));
    if hits.is_empty() && !any_split_named && split == "train" {
        hits = data.iter().map(|n| n.to_string()).collect();
    }
    if hits.is_empty() {
        let all: Vec<String> = data.iter().map(|s| s.to_string()).collect();
        return Err(format!("no files for split `{split}` (--data-split); data files: {}", preview(&all)));
    }
    hits.sort();
    Ok(hits)
}

fn preview(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(12).map(String::as_str).collect();
    let more = names.len().saturating_sub(shown.len());
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn query(config: Option<&str>, split: Option<&str>, files: Option<&str>) -> DatasetQuery {
        DatasetQuery { config: config.map(Into::into), split: split.map(Into::into), files: files.map(Into::into) }
    }

    #[test]
    fn splits_by_file_name() {
        let repo = names(&["README.md", "data/train-00000.jsonl", "data/validation-0.jsonl", "data/test.parquet"]);
        assert_eq!(select(&repo, &query(None, None, None), false).unwrap(), names(&["data/train-00000.jsonl"]));
        let val = select(&repo, &query(None, Some("validation"), None), false).unwrap();
        assert_eq!(val, names(&["data/validation-0.jsonl"]));
        assert!(select(&repo, &query(None, Some("extra"), None), false).is_err());
    }

    #[test]
    fn unnamed_files_are_train_and_scripts_are_ignored() {
        let repo = names(&["ds.py", "rows.jsonl", "constrained.json", "dataset_infos.json"]);
        let train = select(&repo, &query(None, None, None), false).unwrap();
        assert_eq!(train, names(&["constrained.json", "rows.jsonl"]));
        assert!(select(&names(&["ds.py", "README.md"]), &query(None, None, None), false).is_err());
    }

    #[test]
    fn globs_stay_in_their_folder() {
        let repo = names(&["a/x.jsonl", "a/b/y.jsonl", "a/z.csv"]);
        assert_eq!(select(&repo, &query(None, None, Some("a/*.jsonl")), false).unwrap(), names(&["a/x.jsonl"]));
        assert_eq!(select(&repo, &query(None, None, Some("a/**/*.jsonl")), false).unwrap().len(), 2);
        assert!(select(&repo, &query(None, None, Some("a/*")), false).unwrap_err().contains("a/z.csv"));
    }

    #[test]
    fn parquet_branch_configs() {
        let repo = names(&["default/train/0000.parquet", "default/test/0000.parquet", "other/partial-train/0.parquet"]);
        let got = select(&repo, &query(None, None, None), true).unwrap();
        assert_eq!(got, names(&["default/train/0000.parquet"]));
        let got = select(&repo, &query(Some("other"), Some("train"), None), true).unwrap();
        assert_eq!(got, names(&["other/partial-train/0.parquet"]));
        assert!(select(&repo, &query(Some("missing"), None, None), true).unwrap_err().contains("other"));
    }
}
