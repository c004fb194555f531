//! Gradient buckets all-reduced as backward produces them (torch DDP's overlap).
//!
//! The layout is fixed once from the parameter list, identical on every rank: parameters in
//! reverse order (the last layer's gradients are final first), cut into buckets of about
//! `bucket_elems` f32 values. A bucket of `k` parameters holding `n` values is `n + k` f32: the
//! gradients back to back, then one presence flag per parameter (1 when this rank has its
//! gradient), so the summed flags tell whether a gradient exists on every rank or on none
//! without a collective of its own.
//!
//! During the optimizer step's last backward the graph's grad-ready hook marks parameters
//! final; once every parameter of the next bucket in order is, its download is submitted as
//! its own small batch (the gradients copied into the bucket's host-visible staging buffer,
//! ordered after the backward batches submitted before it) and handed to the communication
//! thread, which waits for that batch's fence, reads the bucket and all-reduces it while
//! backward keeps running. Buckets go to MPI strictly in layout order, the same on every rank,
//! whatever order their gradients become final in. `finish` launches the buckets left (those
//! with a gradient the hook never reported: gradient checkpointing, parameters read only
//! inside a closure), then writes each sum back into its gradients with one upload batch per
//! bucket, through the same staging buffer. Staging buffers (one per bucket, host-visible, the
//! gradients' size in all) and host vectors are allocated once and reused every step.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::rc::Rc;
use std::sync::mpsc::Receiver;

use vkformers_tensor::optim::Param;
use vkformers_tensor::{Graph, Tensor};
use vkformers_train::Result;
use vkformers_vk::BufferKind;

use crate::comm::{BucketJob, Comm};
use crate::engine::{check_f32, mpi_err, CommStats};

/// A parameter's place in its bucket: element offset and count.
struct Member {
    param: usize,
    at: usize,
    numel: usize,
}

struct Bucket {
    members: Vec<Member>,
    /// Gradient values, and with the zero padding (ZeRO-1: a multiple of the ranks).
    grads: usize,
    padded: usize,
    /// Where the summed presence flags start in a job's `sum`.
    flags_at: usize,
    /// Members marked final in this step.
    ready: usize,
    /// Its staging buffer and host vectors while not on the communication thread.
    job: Option<BucketJob>,
}

/// The buckets of one `MpiParallel` and the state of the step in progress.
pub(crate) struct Buckets {
    comm: Rc<Comm>,
    params: Vec<Tensor>,
    buckets: Vec<Bucket>,
    /// Parameter tensor id → (bucket, parameter index).
    place: HashMap<u64, (usize, usize)>,
    ready: Vec<bool>,
    /// The next bucket to hand to MPI (all before it are in flight).
    next: usize,
    in_flight: VecDeque<(usize, Receiver<BucketJob>)>,
    /// Buckets launched from the hook (during backward) and in all, over the run.
    pub launched_early: u64,
    pub launched: u64,
}

fn vk_err(e: String) -> vkformers_tensor::VkError {
    vkformers_tensor::VkError::Kernel { kernel: "gradient all-reduce".into(), message: e }
}

/// The buckets of `params` as lists of parameter indices: last parameter first (the order
/// backward finishes them), a new bucket once one holds `bucket_elems` values. The same layout
/// on every rank, for the all-reduce buckets and ZeRO-1's shards alike.
pub(crate) fn bucket_groups(params: &[Param], bucket_elems: usize) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut filled = bucket_elems;
    for i in (0..params.len()).rev() {
        if filled >= bucket_elems {
            groups.push(Vec::new());
            filled = 0;
        }
        if let Some(b) = groups.last_mut() {
            b.push(i);
        }
        filled += params[i].tensor.numel();
    }
    groups
}

impl Buckets {
    /// Lays out `params` in buckets and allocates their staging buffers.
    /// `scatter`: ZeRO-1's reduce-scatter instead of the all-reduce (`finish` then returns
    /// this rank's slices of the sums instead of writing them into the gradients).
    pub fn new(g: &Graph<'_>, comm: Rc<Comm>, params: &[Param], bucket_elems: usize, scatter: bool) -> Result<Buckets> {
        let world = if scatter { comm.world } else { 1 };
        let groups = bucket_groups(params, bucket_elems);
        let mut buckets = Vec::new();
        let mut place = HashMap::new();
        for members in groups.into_iter().filter(|m| !m.is_empty()) {
            let mut at = 0;
            let members: Vec<Member> = members
                .into_iter()
                .map(|param| {
                    let numel = params[param].tensor.numel();
                    place.insert(params[param].tensor.id(), (buckets.len(), param));
                    at += numel;
                    Member { param, at: at - numel, numel }
                })
                .collect();
            buckets.push(Bucket::new(g, members, at, world, scatter)?);
        }
        Ok(Buckets {
            comm,
            params: params.iter().map(|p| p.tensor.clone()).collect(),
            buckets,
            place,
            ready: vec![false; params.len()],
            next: 0,
            in_flight: VecDeque::new(),
            launched_early: 0,
            launched: 0,
        })
    }

    /// Starts a step: no gradient is final yet.
    pub fn begin_step(&mut self) {
        self.ready.iter_mut().for_each(|r| *r = false);
        self.buckets.iter_mut().for_each(|b| b.ready = 0);
        self.next = 0;
    }

    /// The grad-ready hook: `leaf`'s gradient is final; launches every bucket now complete
    /// that is next in order.
    pub fn on_ready(&mut self, g: &Graph<'_>, leaf: &Tensor) -> vkformers_tensor::Result<()> {
        let Some(&(b, i)) = self.place.get(&leaf.id()) else { return Ok(()) };
        if !std::mem::replace(&mut self.ready[i], true) {
            self.buckets[b].ready += 1;
        }
        while self.next < self.buckets.len() && self.buckets[self.next].ready == self.buckets[self.next].members.len() {
            self.launch(g, self.next).map_err(|e| vk_err(e.to_string()))?;
            self.launched_early += 1;
            self.next += 1;
        }
        Ok(())
    }

    /// Submits bucket `b`'s download (after everything recorded so far) and hands it to the
    /// communication thread.
    fn launch(&mut self, g: &Graph<'_>, b: usize) -> Result<()> {
        // The batch holding the commands that wrote these gradients goes first.
        g.flush()?;
        let bucket = &mut self.buckets[b];
        let mut job = bucket.job.take().ok_or_else(|| mpi_err("a gradient bucket is still in flight".into()))?;
        let mut rec = g.ctx().recorder(false)?;
        // A fresh batch knows nothing of the backward batches in flight: order after them.
        rec.order_after_earlier_batches();
        for (k, m) in bucket.members.iter().enumerate() {
            let grad = self.params[m.param].grad();
            job.host[bucket.padded + k] = f32::from(u8::from(grad.is_some()));
            match grad {
                Some(t) => {
                    check_f32(&t, "gradient")?;
                    rec.copy(t.view(), job.staging.slice(4 * m.at as u64, 4 * m.numel as u64))?;
                }
                None => job.zero.push(m.at..m.at + m.numel),
            }
        }
        job.zero.push(bucket.grads..bucket.padded);
        job.download = if rec.is_empty() { None } else { Some(rec.submit_async()?) };
        let rx = self.comm.sum_bucket(job).map_err(mpi_err)?;
        self.in_flight.push_back((b, rx));
        self.launched += 1;
        Ok(())
    }

    /// Launches the buckets left, waits for every sum and writes it into the gradients; with
    /// `scatter`, returns instead this rank's slices of the sums, bucket after bucket.
    pub fn finish(&mut self, g: &Graph<'_>, stats: &mut CommStats) -> Result<Vec<f32>> {
        while self.next < self.buckets.len() {
            self.launch(g, self.next)?;
            self.next += 1;
        }
        // The uploads below overwrite gradients: nothing of backward may still run.
        g.sync()?;
        let exposed = std::time::Instant::now();
        let world = self.comm.world as f32;
        let (mut uploads, mut owned) = (Vec::new(), Vec::new());
        while let Some((b, rx)) = self.in_flight.pop_front() {
            let job = rx.recv().map_err(|_| mpi_err("the MPI thread ended during an all-reduce".into()))?;
            stats.bytes += 4 * job.host.len() as u64;
            stats.allreduce_seconds += job.reduce_seconds;
            stats.download_wait_seconds += job.wait_seconds;
            if let Some(e) = &job.error {
                return Err(mpi_err(e.clone()));
            }
            let bucket = &mut self.buckets[b];
            let present = bucket.check_flags(&job.sum, world, &self.params)?;
            if job.scatter {
                owned.extend_from_slice(&job.sum[..bucket.padded / self.comm.world]);
                bucket.job = Some(job);
                continue;
            }
            // The staging buffer the bucket came down through takes the sum back up: the
            // host has read it, and the next download comes after these uploads are waited for.
            let staging = job.staging.clone();
            if !staging.write_mapped(bytemuck::cast_slice(&job.sum[..bucket.grads])) {
                return Err(mpi_err("the gradient staging buffer is not mapped".into()));
            }
            let mut rec = g.ctx().recorder(false)?;
            for m in bucket.members.iter().filter(|m| present(m.param)) {
                let Some(t) = self.params[m.param].grad() else { continue };
                rec.copy(staging.slice(4 * m.at as u64, 4 * m.numel as u64), t.view())?;
            }
            if !rec.is_empty() {
                uploads.push(rec.submit_async()?);
            }
            bucket.job = Some(job);
        }
        for u in uploads {
            u.wait()?;
        }
        stats.exposed_seconds += exposed.elapsed().as_secs_f64();
        Ok(owned)
    }
}

impl Bucket {
    /// `world`: the bucket is padded to a multiple of it (1: no padding).
    fn new(g: &Graph<'_>, members: Vec<Member>, grads: usize, world: usize, scatter: bool) -> Result<Bucket> {
        let bytes = 4 * grads.max(1) as u64;
        let ctx = g.ctx();
        let staging = ctx.buffer_of_kind(bytes, BufferKind::Download, "gradient bucket (download)")?;
        // As `Zero1`'s layout: padded to a multiple of the ranks, at least one value each.
        let padded = if scatter { grads.div_ceil(world).max(1) * world } else { grads };
        let n = padded + members.len();
        let job = BucketJob {
            download: None,
            staging,
            host: vec![0.0; n],
            grads,
            zero: Vec::<Range<usize>>::new(),
            padded,
            scatter,
            sum: vec![0.0; n],
            wait_seconds: 0.0,
            reduce_seconds: 0.0,
            error: None,
        };
        let flags_at = if scatter { padded / world } else { grads };
        Ok(Bucket { members, grads, padded, flags_at, ready: 0, job: Some(job) })
    }

    /// The summed presence flags: each parameter has a gradient on every rank or on none.
    /// Returns whether parameter `i` (a member) has one.
    fn check_flags(&self, sum: &[f32], world: f32, params: &[Tensor]) -> Result<impl Fn(usize) -> bool> {
        let mut have = HashMap::new();
        for (k, m) in self.members.iter().enumerate() {
            let n = sum[self.flags_at + k];
            if n != 0.0 && n != world {
                return Err(mpi_err(format!(
                    "parameter {} ({:?}) has a gradient on {n} of {world} ranks: not supported",
                    m.param,
                    params[m.param].shape()
                )));
            }
            have.insert(m.param, n != 0.0);
        }
        Ok(move |i| have.get(&i).copied().unwrap_or(false))
    }
}
