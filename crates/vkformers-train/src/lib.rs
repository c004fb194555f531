//! Training: batches from a tokenized dataset, learning-rate schedules, AdamW steps with
//! gradient accumulation, checkpoints with exact resume, and evaluation.
