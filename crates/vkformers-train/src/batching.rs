//! From tokenized examples to padded batches: truncation or packing into `seq_len`-token
//! sequences, a seeded order per epoch, right padding with an attention mask and -100 labels,
//! and a data position `(epoch, index)` that a checkpoint saves and a resume restores.

use serde::{Deserialize, Serialize};
use vkformers_data::{Example, SeqLabel};

use crate::error::{Result, TrainError};
use crate::mlm::MlmMasking;
use crate::rng::epoch_order;

/// Label of a token left out of the loss (transformers' `ignore_index`).
pub const IGNORE: i32 = -100;

/// Cuts every example to its first `seq_len` tokens (empty examples are dropped).
pub fn truncate(examples: &[Example], seq_len: usize) -> Vec<Example> {
    examples
        .iter()
        .filter(|e| !e.input_ids.is_empty())
        .map(|e| {
            let n = e.input_ids.len().min(seq_len);
            Example {
                input_ids: e.input_ids[..n].to_vec(),
                labels: e.labels[..n].to_vec(),
                token_types: e.token_types[..n.min(e.token_types.len())].to_vec(),
                target: e.target.clone(),
                decoder_labels: e.decoder_labels[..seq_len.min(e.decoder_labels.len())].to_vec(),
            }
        })
        .collect()
}

/// Concatenates the examples in order and splits the stream into `seq_len`-token blocks (as
/// transformers' `run_clm` groups texts); the last, shorter block is kept and padded later.
pub fn pack(examples: &[Example], seq_len: usize) -> Vec<Example> {
    let ids: Vec<u32> = examples.iter().flat_map(|e| e.input_ids.iter().copied()).collect();
    let labels: Vec<i32> = examples.iter().flat_map(|e| e.labels.iter().copied()).collect();
    ids.chunks(seq_len).zip(labels.chunks(seq_len)).map(|(i, l)| Example::new(i.to_vec(), l.to_vec())).collect()
}

/// Truncated or packed training sequences; checks that ids and labels line up.
pub fn sequences(examples: &[Example], seq_len: usize, packing: bool) -> Result<Vec<Example>> {
    if seq_len < 2 {
        return Err(TrainError::Config(format!("--seq-len must be at least 2, got {seq_len}")));
    }
    if let Some((i, e)) = examples.iter().enumerate().find(|(_, e)| e.input_ids.len() != e.labels.len()) {
        return Err(TrainError::Config(format!(
            "example {i} has {} input ids but {} labels",
            e.input_ids.len(),
            e.labels.len()
        )));
    }
    if packing && examples.iter().any(|e| e.target.is_some() || !e.token_types.is_empty()) {
        return Err(TrainError::Config(
            "classification rows (a row label or token types) cannot be packed: use --no-packing".into(),
        ));
    }
    if packing && examples.iter().any(|e| !e.decoder_labels.is_empty()) {
        return Err(TrainError::Config("encoder-decoder rows (a source and a target) cannot be packed".into()));
    }
    Ok(if packing { pack(examples, seq_len) } else { truncate(examples, seq_len) })
}

/// Removes the sequences with no token to predict (no row label, no label other than -100
/// at positions `1..`, no decoder label other than -100), returning the rest and how many were removed: a batch of only such
/// sequences would have no loss to train on.
pub fn drop_untrained(seqs: Vec<Example>) -> (Vec<Example>, usize) {
    let n = seqs.len();
    let trains = |e: &Example| {
        e.target.is_some()
            || e.labels.iter().skip(1).any(|&l| l != IGNORE)
            || e.decoder_labels.iter().any(|&l| l != IGNORE)
    };
    let kept: Vec<Example> = seqs.into_iter().filter(trains).collect();
    let dropped = n - kept.len();
    (kept, dropped)
}

/// What a batch's labels mean, so how its targets are counted and its loss taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Objective {
    /// Next-token prediction: `labels[t]` is predicted at position `t - 1`.
    #[default]
    CausalLm,
    /// Masked LM: `labels[t]` (-100 = not a target) is predicted at position `t`.
    MaskedLm,
    /// A class per position (`labels[t]`, -100 = not a target), predicted at position `t`.
    TokenClassification,
    /// One label per row (`TokenBatch::row_labels`).
    SequenceClassification,
    /// An encoder-decoder: `decoder_labels[t]` (-100 = not a target) is predicted at decoder
    /// position `t` (the model shifts the labels right into its decoder inputs).
    Seq2SeqLm,
}

/// A right-padded batch `[batch, seq]`: ids (padding = `pad_id`), attention mask (1 real, 0
/// padding), unshifted labels (-100 on padding), token types (0 on padding; `None` when no
/// row has any) and the rows' own labels (sequence classification); `seq` is the longest row.
/// Encoder-decoder batches add the decoder's labels `[batch, decoder_len]` (-100 on padding, as
/// `DataCollatorForSeq2Seq` pads them); `decoder_len` is 0 for every other batch.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBatch {
    pub ids: Vec<i32>,
    pub mask: Vec<i32>,
    pub labels: Vec<i32>,
    pub token_types: Option<Vec<i32>>,
    pub row_labels: Vec<SeqLabel>,
    pub batch: usize,
    pub seq: usize,
    pub decoder_labels: Vec<i32>,
    pub decoder_len: usize,
    /// Each row's global sample index, `epoch · 2^32 + place in the epoch's order` (the key of
    /// its dropout masks: the same on any rank and in a batch of any size); empty when the
    /// batch was not drawn from a `Loader`.
    pub samples: Vec<u64>,
}

impl TokenBatch {
    /// Pads `rows` on the right to the longest of them.
    pub fn pad(rows: &[&Example], pad_id: u32) -> TokenBatch {
        let seq = rows.iter().map(|r| r.input_ids.len()).max().unwrap_or(0);
        let typed = rows.iter().any(|r| !r.token_types.is_empty());
        let decoder_len = rows.iter().map(|r| r.decoder_labels.len()).max().unwrap_or(0);
        let mut b = TokenBatch {
            ids: vec![],
            mask: vec![],
            labels: vec![],
            token_types: typed.then(Vec::new),
            row_labels: rows.iter().filter_map(|r| r.target.clone()).collect(),
            batch: rows.len(),
            seq,
            decoder_labels: Vec::with_capacity(rows.len() * decoder_len),
            decoder_len,
            samples: Vec::new(),
        };
        for r in rows {
            let pad = decoder_len - r.decoder_labels.len();
            b.decoder_labels.extend(r.decoder_labels.iter().copied().chain(std::iter::repeat_n(IGNORE, pad)));
            let pad = seq - r.input_ids.len();
            b.ids.extend(r.input_ids.iter().map(|&t| t as i32).chain(std::iter::repeat_n(pad_id as i32, pad)));
            b.mask.extend(std::iter::repeat_n(1, r.input_ids.len()).chain(std::iter::repeat_n(0, pad)));
            b.labels.extend(r.labels.iter().copied().chain(std::iter::repeat_n(IGNORE, pad)));
            if let Some(tt) = b.token_types.as_mut() {
                let types = r.token_types.iter().map(|&t| t as i32).chain(std::iter::repeat(0));
                tt.extend(types.take(seq));
            }
        }
        b
    }

    /// Tokens the causal-LM loss counts: positions `t < seq - 1` whose next label is not
    /// ignored (transformers counts `labels[..., 1:] != -100`).
    pub fn targets(&self) -> usize {
        self.targets_for(Objective::CausalLm)
    }

    /// The targets `objective`'s loss averages over: shifted labels (causal LM), labels that
    /// are not -100 (masked LM, token classification) or rows (sequence classification).
    pub fn targets_for(&self, objective: Objective) -> usize {
        match objective {
            Objective::CausalLm => {
                self.labels.chunks(self.seq.max(1)).map(|row| row[1..].iter().filter(|&&l| l >= 0).count()).sum()
            }
            Objective::MaskedLm | Objective::TokenClassification => self.labels.iter().filter(|&&l| l >= 0).count(),
            Objective::SequenceClassification => self.row_labels.len(),
            Objective::Seq2SeqLm => self.decoder_labels.iter().filter(|&&l| l >= 0).count(),
        }
    }

    /// Real (unpadded) tokens.
    pub fn tokens(&self) -> usize {
        self.mask.iter().filter(|&&m| m != 0).count()
    }

    /// The graph's view of the batch.
    pub fn as_model_batch(&self) -> vkformers_models::decoder::Batch<'_> {
        vkformers_models::decoder::Batch { ids: &self.ids, mask: &self.mask, batch: self.batch, seq: self.seq }
    }
}

/// Where the loader stands: `index` sequences of epoch `epoch`'s order have been consumed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataPosition {
    pub epoch: u64,
    pub index: usize,
}

/// Hands out batches of `batch_size` sequences in a seeded order per epoch.
pub struct Loader {
    seqs: Vec<Example>,
    batch_size: usize,
    shuffle: bool,
    seed: u64,
    pad_id: u32,
    pos: DataPosition,
    order: Vec<usize>,
    mlm: Option<MlmMasking>,
    /// Data parallelism: this rank's place among `world` (0 of 1 alone).
    rank: usize,
    world: usize,
}

impl Loader {
    pub fn new(seqs: Vec<Example>, batch_size: usize, shuffle: bool, seed: u64, pad_id: u32) -> Result<Self> {
        if seqs.is_empty() {
            return Err(TrainError::Config("the training data has no examples".into()));
        }
        if batch_size == 0 {
            return Err(TrainError::Config("--batch-size must be at least 1".into()));
        }
        let order = epoch_order(seqs.len(), seed, 0, shuffle);
        let pos = DataPosition::default();
        Ok(Loader { seqs, batch_size, shuffle, seed, pad_id, pos, order, mlm: None, rank: 0, world: 1 })
    }

    /// Sequences per epoch.
    pub fn len(&self) -> usize {
        self.seqs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Batches per epoch (the last one may be smaller); with several ranks, windows of one
    /// batch per rank.
    pub fn batches_per_epoch(&self) -> usize {
        self.seqs.len().div_ceil(self.batch_size * self.world)
    }

    /// Makes this loader rank `rank` of `world`: each draw consumes a window of `world`
    /// batches of the global order and returns the `rank`-th (the HF Trainer's sharding of one
    /// shuffled order). The position stays global, so a checkpoint resumes on any world size.
    pub fn shard(&mut self, rank: usize, world: usize) {
        assert!(rank < world, "rank {rank} of {world}");
        (self.rank, self.world) = (rank, world);
    }

    pub fn position(&self) -> DataPosition {
        self.pos
    }

    /// Continues from `pos` (a position saved by `position`).
    pub fn set_position(&mut self, pos: DataPosition) -> Result<()> {
        if pos.index > self.seqs.len() {
            return Err(TrainError::Config(format!(
                "data position {} is past the {} sequences of this data: was the checkpoint made with other data \
                 or another --seq-len/--packing?",
                pos.index,
                self.seqs.len()
            )));
        }
        self.pos = pos;
        self.order = epoch_order(self.seqs.len(), self.seed, pos.epoch, self.shuffle);
        Ok(())
    }

    /// True when the current epoch has been consumed.
    pub fn epoch_done(&self) -> bool {
        self.pos.index >= self.seqs.len()
    }

    /// The next batch, starting the next epoch first when this one is done.
    pub fn next_batch(&mut self) -> TokenBatch {
        if self.epoch_done() {
            self.pos = DataPosition { epoch: self.pos.epoch + 1, index: 0 };
            self.order = epoch_order(self.seqs.len(), self.seed, self.pos.epoch, self.shuffle);
        }
        let n = self.seqs.len();
        let window_end = (self.pos.index + self.batch_size * self.world).min(n);
        let mut start = (self.pos.index + self.batch_size * self.rank).min(window_end);
        let mut end = (start + self.batch_size).min(window_end);
        if start == end {
            // The epoch's last window is short of this rank's batch: as accelerate's
            // `even_batches`, it takes the epoch's first rows again rather than none.
            (start, end) = (0, self.batch_size.min(n));
        }
        let rows: Vec<&Example> = self.order[start..end].iter().map(|&i| &self.seqs[i]).collect();
        self.pos.index = window_end;
        let samples = (start..end).map(|k| self.pos.epoch.wrapping_mul(1 << 32).wrapping_add(k as u64)).collect();
        let mut batch = match &self.mlm {
            // Each draw is a pure function of (seed, epoch, place in the epoch): a resumed run
            // masks exactly as the straight run did.
            Some(m) => {
                let masked: Vec<Example> = (start..end)
                    .zip(&rows)
                    .map(|(k, r)| m.mask(r, self.pos.epoch.wrapping_mul(1 << 32).wrapping_add(k as u64)))
                    .collect();
                TokenBatch::pad(&masked.iter().collect::<Vec<_>>(), self.pad_id)
            }
            None => TokenBatch::pad(&rows, self.pad_id),
        };
        batch.samples = samples;
        batch
    }

    /// Masks every batch as it is drawn (dynamic masked-LM masking, `DataCollatorForLanguageModeling`).
    pub fn set_mlm_masking(&mut self, masking: MlmMasking) {
        self.mlm = Some(masking);
    }
}

/// Batches of `examples` in order, `batch_size` rows each, for evaluation.
pub fn eval_batches(examples: &[Example], batch_size: usize, pad_id: u32) -> Vec<TokenBatch> {
    let rows: Vec<&Example> = examples.iter().collect();
    rows.chunks(batch_size.max(1)).map(|c| TokenBatch::pad(c, pad_id)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(ids: &[u32], labels: &[i32]) -> Example {
        Example::new(ids.to_vec(), labels.to_vec())
    }

    #[test]
    fn truncation_and_packing() {
        let data = [ex(&[1, 2, 3, 4, 5], &[1, 2, 3, 4, 5]), ex(&[6, 7], &[-100, 7]), ex(&[8, 9, 10], &[8, 9, 10])];
        let t = sequences(&data, 3, false).unwrap();
        assert_eq!(t, vec![ex(&[1, 2, 3], &[1, 2, 3]), ex(&[6, 7], &[-100, 7]), ex(&[8, 9, 10], &[8, 9, 10])]);
        let p = sequences(&data, 4, true).unwrap();
        assert_eq!(
            p,
            vec![ex(&[1, 2, 3, 4], &[1, 2, 3, 4]), ex(&[5, 6, 7, 8], &[5, -100, 7, 8]), ex(&[9, 10], &[9, 10])]
        );
        assert!(sequences(&[ex(&[1, 2], &[1])], 4, false).is_err(), "ids and labels must line up");
    }

    #[test]
    fn right_padding_masks_and_counts_targets() {
        let (a, b) = (ex(&[5, 6, 7], &[-100, 6, 7]), ex(&[8], &[8]));
        let batch = TokenBatch::pad(&[&a, &b], 0);
        assert_eq!((batch.batch, batch.seq), (2, 3));
        assert_eq!(batch.ids, vec![5, 6, 7, 8, 0, 0]);
        assert_eq!(batch.mask, vec![1, 1, 1, 1, 0, 0]);
        assert_eq!(batch.labels, vec![-100, 6, 7, 8, -100, -100]);
        // Row 0 predicts 6 and 7; row 1 has no next token.
        assert_eq!(batch.targets(), 2);
        assert_eq!(batch.tokens(), 4);
    }

    #[test]
    fn encoder_decoder_rows_pad_their_labels_apart_from_the_source() {
        let s2s = |src: &[u32], tgt: &[i32]| Example {
            decoder_labels: tgt.to_vec(),
            ..Example::new(src.to_vec(), vec![IGNORE; src.len()])
        };
        let (a, b) = (s2s(&[5, 6, 7], &[8, 9]), s2s(&[4], &[3, -100, 2, 1]));
        let batch = TokenBatch::pad(&[&a, &b], 0);
        assert_eq!((batch.seq, batch.decoder_len), (3, 4));
        assert_eq!(batch.ids, vec![5, 6, 7, 4, 0, 0]);
        assert_eq!(batch.decoder_labels, vec![8, 9, -100, -100, 3, -100, 2, 1]);
        // Every decoder label that is not -100 is a target (nothing is shifted away).
        assert_eq!(batch.targets_for(Objective::Seq2SeqLm), 5);
        let cut = sequences(std::slice::from_ref(&b), 2, false).unwrap();
        assert_eq!(cut[0].decoder_labels, vec![3, -100], "the target is cut to seq_len too");
        assert!(sequences(std::slice::from_ref(&a), 8, true).is_err(), "encoder-decoder rows do not pack");
        let (kept, dropped) = drop_untrained(vec![a, s2s(&[5], &[-100])]);
        assert_eq!((kept.len(), dropped), (1, 1));
    }

    #[test]
    fn position_restores_the_exact_stream() {
        let seqs: Vec<Example> = (0..7u32).map(|i| ex(&[i, i], &[i as i32, i as i32])).collect();
        let mut a = Loader::new(seqs.clone(), 2, true, 3, 0).unwrap();
        let mut first = Vec::new();
        for _ in 0..9 {
            first.push(a.next_batch());
        }
        let mut b = Loader::new(seqs.clone(), 2, true, 3, 0).unwrap();
        for _ in 0..5 {
            b.next_batch();
        }
        let saved = b.position();
        let mut c = Loader::new(seqs, 2, true, 3, 0).unwrap();
        c.set_position(saved).unwrap();
        let rest: Vec<TokenBatch> = (0..4).map(|_| c.next_batch()).collect();
        assert_eq!(rest, first[5..].to_vec());
        // Epochs of 4 batches (the last of one row); epoch 1 reorders.
        assert_eq!(first[3].batch, 1);
        let ids = |bs: &[TokenBatch]| bs.iter().flat_map(|b| b.ids.iter().step_by(2).copied()).collect::<Vec<_>>();
        let (e0, e1) = (ids(&first[0..4]), ids(&first[4..8]));
        assert_ne!(e0, e1);
        let mut s = e1.clone();
        s.sort();
        assert_eq!(s, (0..7).collect::<Vec<i32>>());
    }

    #[test]
    fn ranks_split_each_global_window_in_order() {
        // 7 sequences, 2 ranks of batch 2: windows of 4 rows; the last window (3 rows) gives
        // rank 0 two rows and rank 1 one; a third rank would get the epoch's first rows again.
        let seqs: Vec<Example> = (0..7u32).map(|i| ex(&[i, i], &[i as i32, i as i32])).collect();
        let mut one = Loader::new(seqs.clone(), 4, true, 5, 0).unwrap();
        let mut ranks: Vec<Loader> = (0..2).map(|_| Loader::new(seqs.clone(), 2, true, 5, 0).unwrap()).collect();
        for (r, l) in ranks.iter_mut().enumerate() {
            l.shard(r, 2);
            assert_eq!(l.batches_per_epoch(), 2);
        }
        for _ in 0..4 {
            let whole = one.next_batch();
            let parts: Vec<TokenBatch> = ranks.iter_mut().map(Loader::next_batch).collect();
            let joined: Vec<i32> = parts.iter().flat_map(|b| b.ids.iter().copied()).collect();
            assert_eq!(joined, whole.ids);
            let keys: Vec<u64> = parts.iter().flat_map(|b| b.samples.iter().copied()).collect();
            assert_eq!(keys, whole.samples, "each row keeps its global sample index");
            assert!(ranks.iter().all(|l| l.position() == one.position()), "the position is global");
        }
        let mut third = Loader::new(seqs.clone(), 2, true, 5, 0).unwrap();
        third.shard(2, 3);
        let first_rows = Loader::new(seqs, 2, true, 5, 0).unwrap().next_batch();
        third.next_batch();
        assert_eq!(third.next_batch(), first_rows, "an empty share repeats the epoch's first rows");
    }
}
