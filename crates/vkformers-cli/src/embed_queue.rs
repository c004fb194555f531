//! `embed`'s overlap of host and device (issue 19): the host records and submits batch i+1
//! while the device runs batch i. Each batch copies its result rows, inside its own
//! submission, into a host-visible buffer, so reading them waits for that batch alone
//! (`Graph::wait_submitted`), never for the one queued behind it; the kernels are the ones the
//! sequential path runs, so the vectors are bit for bit the same.

use std::collections::VecDeque;
use std::time::Instant;

use vkformers_models::encoder;
use vkformers_tensor::{Graph, Tensor};
use vkformers_vk::{Buffer, BufferKind};

use crate::st_modules::{pool_host, PoolMode};

/// How the values read back become one vector per row.
pub struct Finish {
    /// `Some`: the read tensor is the hidden state `[B·T, D]`, pooled on the host by this mode
    /// over `mask [B·T]`; `None`: it is already pooled, `[B, D]`.
    pub host_pool: Option<(PoolMode, Vec<i32>, (usize, usize))>,
    pub normalize: bool,
    pub dim: usize,
}

impl Finish {
    /// One vector per row from the read values.
    pub fn apply(self, read: Vec<f32>) -> Vec<Vec<f32>> {
        let mut flat = match self.host_pool {
            Some((mode, mask, bt)) => pool_host(&read, &mask, bt, mode),
            None => read,
        };
        if self.normalize {
            encoder::normalize_rows(&mut flat, self.dim);
        }
        flat.chunks(self.dim).map(<[f32]>::to_vec).collect()
    }
}

/// A batch recorded on the graph, not yet submitted: `out` (f32) is what the host reads.
pub struct Recorded {
    pub out: Tensor,
    pub finish: Finish,
}

/// A submitted batch: its ticket (`Graph::submissions` after its flush) and the host-visible
/// copy of its result.
struct InFlight {
    /// The batch's texts (their places in the output).
    texts: Vec<usize>,
    ticket: usize,
    readback: Buffer,
    floats: usize,
    finish: Finish,
}

/// Batches in flight, oldest first.
pub struct EmbedQueue<'g, 'c> {
    g: &'g Graph<'c>,
    /// Batches left running while the host records the next (0: each batch is read before the
    /// next is recorded).
    depth: usize,
    queue: VecDeque<InFlight>,
    /// Read-back buffers of finished batches, for reuse.
    spare: Vec<Buffer>,
    /// Seconds the host waited for the device to finish a batch it wanted to read.
    pub device_wait: f64,
    /// Seconds spent recording the read-back copy and submitting (`--profile`'s host share).
    pub submit_secs: f64,
    /// Seconds spent copying finished vectors out of the mapped buffer and pooling/normalising them.
    pub readback_secs: f64,
}

/// A finished batch: its texts' places and their vectors.
pub type Done = (Vec<usize>, Vec<Vec<f32>>);

impl<'g, 'c> EmbedQueue<'g, 'c> {
    pub fn new(g: &'g Graph<'c>, depth: usize) -> Self {
        EmbedQueue {
            g,
            depth,
            queue: VecDeque::new(),
            spare: Vec::new(),
            device_wait: 0.0,
            submit_secs: 0.0,
            readback_secs: 0.0,
        }
    }

    /// Submits `batch` (rows of `texts`) and returns the batches that finished meanwhile:
    /// the oldest, once more than `depth` run.
    pub fn submit(&mut self, texts: Vec<usize>, batch: Recorded) -> anyhow::Result<Vec<Done>> {
        let start = Instant::now();
        let floats = batch.out.numel();
        let bytes = (floats * 4) as u64;
        let readback = match self.spare.iter().position(|b| b.size() >= bytes) {
            Some(at) => self.spare.swap_remove(at),
            None => self.g.ctx().buffer_of_kind(bytes, BufferKind::Download, "embed readback")?,
        };
        self.g.record(|rec| rec.copy(batch.out.view(), readback.slice(0, bytes)))?;
        self.g.flush()?;
        let ticket = self.g.submissions();
        self.queue.push_back(InFlight { texts, ticket, readback, floats, finish: batch.finish });
        self.submit_secs += start.elapsed().as_secs_f64();
        let mut done = Vec::new();
        while self.queue.len() > self.depth {
            done.push(self.complete_oldest()?);
        }
        Ok(done)
    }

    /// Waits for every batch still running; then reclaims the buffers they used.
    pub fn drain(&mut self) -> anyhow::Result<Vec<Done>> {
        let mut done = Vec::new();
        while !self.queue.is_empty() {
            done.push(self.complete_oldest()?);
        }
        self.g.sync()?;
        Ok(done)
    }

    fn complete_oldest(&mut self) -> anyhow::Result<Done> {
        let b = self.queue.pop_front().ok_or_else(|| anyhow::anyhow!("no batch in flight"))?;
        let start = Instant::now();
        self.g.wait_submitted(b.ticket)?;
        self.device_wait += start.elapsed().as_secs_f64();
        let start = Instant::now();
        let mut bytes = vec![0u8; b.floats * 4];
        if !b.readback.read_mapped(&mut bytes) {
            anyhow::bail!("the embeddings' read-back buffer is not mapped");
        }
        self.spare.push(b.readback);
        let read = bytes.chunks_exact(4).map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
        let vectors = b.finish.apply(read);
        self.readback_secs += start.elapsed().as_secs_f64();
        Ok((b.texts, vectors))
    }
}
