//! Cutting rows to a sequence length, and saying what that did: how many rows lost tokens (and
//! the longest length seen), and which rows were left with no token to predict.
//!
//! A causal LM predicts `labels[t]` from positions `< t`, so a row trains on its labels at
//! positions `1..len` that are not -100 (transformers counts `labels[..., 1:] != -100`). A row
//! whose trained part (the response after a long prompt, say) lies past `seq_len` keeps none:
//! a batch of only such rows has nothing to predict, so they are named and, for training,
//! skipped rather than failing a run in the middle.

use crate::{Dataset, Example, IGNORE_INDEX};

/// What [`Dataset::truncate`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CutReport {
    pub seq_len: usize,
    /// Rows longer than `seq_len` (cut to it).
    pub truncated: usize,
    /// Tokens of the longest row before cutting.
    pub longest: usize,
    /// Rows with no token to predict after cutting, by their source (`file:line`).
    pub no_target: Vec<String>,
    /// Whether those rows were removed from the dataset.
    pub dropped: bool,
}

/// Counted targets of a row: labels at positions `1..` that are not ignored, the row's own
/// label (sequence classification), or an encoder-decoder row's decoder labels that are not
/// ignored (each predicted at its own position).
fn targets(e: &Example) -> usize {
    if e.target.is_some() {
        return 1;
    }
    if !e.decoder_labels.is_empty() {
        return e.decoder_labels.iter().filter(|&&l| l != IGNORE_INDEX).count();
    }
    e.labels.iter().skip(1).filter(|&&l| l != IGNORE_INDEX).count()
}

impl Dataset {
    /// Cuts every row to its first `seq_len` tokens (an encoder-decoder row's source and target
    /// each, as `max_source_length` and `max_target_length` of `run_translation`). Rows left with no token to predict are
    /// named in the report and removed when `drop_untrained` (training), kept otherwise (an
    /// evaluation lists each row).
    pub fn truncate(&mut self, seq_len: usize, drop_untrained: bool) -> CutReport {
        let mut report = CutReport { seq_len, dropped: drop_untrained, ..Default::default() };
        let mut keep = Vec::with_capacity(self.examples.len());
        for (i, e) in self.examples.iter_mut().enumerate() {
            report.longest = report.longest.max(e.input_ids.len()).max(e.decoder_labels.len());
            if e.decoder_labels.len() > seq_len {
                e.decoder_labels.truncate(seq_len);
                report.truncated += usize::from(e.input_ids.len() <= seq_len);
            }
            if e.input_ids.len() > seq_len {
                report.truncated += 1;
                e.input_ids.truncate(seq_len);
                e.labels.truncate(seq_len);
                e.token_types.truncate(seq_len);
            }
            let trained = targets(e) > 0;
            if !trained {
                let name = self.sources.get(i).map_or_else(|| format!("row {}", i + 1), |l| l.to_string());
                report.no_target.push(name);
            }
            keep.push(trained || !drop_untrained);
        }
        if drop_untrained && keep.contains(&false) {
            let mut flags = keep.iter();
            self.examples.retain(|_| *flags.next().unwrap_or(&true));
            if self.sources.len() == keep.len() {
                let mut flags = keep.iter();
                self.sources.retain(|_| *flags.next().unwrap_or(&true));
            }
        }
        report
    }
}

impl CutReport {
    /// One warning line per finding (none when nothing was cut or left without targets); at most
    /// ten rows are named, then a count.
    pub fn warnings(&self, what: &str) -> Vec<String> {
        let mut out = Vec::new();
        if self.truncated > 0 {
            out.push(format!(
                "warning: {what}: {} row{} longer than --seq-len {} cut to it (the longest has {} tokens)",
                self.truncated,
                if self.truncated == 1 { " is" } else { "s are" },
                self.seq_len,
                self.longest
            ));
        }
        if !self.no_target.is_empty() {
            let mut names = self.no_target.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
            if self.no_target.len() > 10 {
                names += &format!(" and {} more", self.no_target.len() - 10);
            }
            let action = if self.dropped { "skipped" } else { "not counted" };
            out.push(format!(
                "warning: {what}: {} row{} no token to predict within --seq-len {} ({action}): {names}",
                self.no_target.len(),
                if self.no_target.len() == 1 { " has" } else { "s have" },
                self.seq_len
            ));
        }
        out
    }
}
