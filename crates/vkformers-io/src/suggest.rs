//! "Did you mean" suggestions for names that were not found.

/// Up to three of `candidates` closest to `wanted`: first names that end with it or that it ends
/// with (a missing or extra `model.` prefix), then the smallest edit distances, up to a third of
/// the name's length.
pub(crate) fn close_names<'a>(wanted: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let limit = (wanted.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .filter_map(|c| {
            let d = if c.ends_with(wanted) || wanted.ends_with(c) { 0 } else { edit_distance(wanted, c) };
            (d <= limit).then_some((d, c))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, c)| c.to_string()).collect()
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn suggestions() {
        let names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"];
        assert_eq!(close_names("model.embed_token.weight", names), vec!["model.embed_tokens.weight"]);
        assert_eq!(close_names("embed_tokens.weight", names), vec!["model.embed_tokens.weight"]);
        assert!(close_names("something.else.entirely", names).is_empty());
    }
}
