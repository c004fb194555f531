//! The prompt files of `vkformers generate`: `--prompt-file` (one text prompt per non-empty
//! line) and `--prompt-ids-file` (one `{"input_ids": [...]}` row per non-empty line). `file`
//! names the file in the errors; a bad line is named by its file and line number.

use std::path::Path;

/// The text prompts of a `--prompt-file`'s contents.
pub fn text_prompts(text: &str, file: &Path) -> Result<Vec<String>, String> {
    let lines: Vec<String> = text.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect();
    if lines.is_empty() {
        return Err(format!("{} has no prompts (one per line)", file.display()));
    }
    Ok(lines)
}

/// The token-id prompts of a `--prompt-ids-file`'s contents.
pub fn id_prompts(text: &str, file: &Path) -> Result<Vec<Vec<u32>>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = format!("{}:{}", file.display(), i + 1);
        let row: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("{at}: {e}"))?;
        let ids = row["input_ids"].as_array().ok_or_else(|| format!("{at}: no `input_ids` list"))?;
        let ids: Option<Vec<u32>> = ids.iter().map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok())).collect();
        let ids = ids.ok_or_else(|| format!("{at}: `input_ids` must be token ids"))?;
        if ids.is_empty() {
            return Err(format!("{at}: an empty prompt"));
        }
        out.push(ids);
    }
    if out.is_empty() {
        return Err(format!("{} has no prompts (one {{\"input_ids\": [...]}} per line)", file.display()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_prompts_and_bad_lines_are_named() {
        let f = Path::new("p.jsonl");
        assert_eq!(text_prompts("a\n\n  \nb c\n", f).unwrap(), ["a", "b c"]);
        assert!(text_prompts(" \n", f).unwrap_err().contains("p.jsonl has no prompts"));
        assert_eq!(id_prompts("{\"input_ids\": [1, 2]}\n\n{\"input_ids\": [3]}", f).unwrap(), [vec![1, 2], vec![3]]);
        let bad = |text: &str| id_prompts(text, f).unwrap_err();
        assert!(bad("\n{\"input_ids\": [1, 4294967296]}").starts_with("p.jsonl:2: `input_ids` must be token ids"));
        assert!(bad("{\"input_ids\": []}").starts_with("p.jsonl:1: an empty prompt"));
        assert!(bad("{\"ids\": [1]}").starts_with("p.jsonl:1: no `input_ids` list"));
        assert!(bad("{").starts_with("p.jsonl:1: EOF while parsing"));
    }
}
