//! `MpiParallel`: the trainer's data-parallel hooks over MPI, and the checks of a same start
//! (one binary, one set of arguments, rank 0's parameters everywhere, checked by checksum).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use sha2::{Digest, Sha256};
use vkformers_tensor::optim::{AdamW, Param};
use vkformers_tensor::{DType, GradReadyHook, Graph, Tensor};
use vkformers_train::{DataParallel, Result, TrainError};

use crate::comm::Comm;
use crate::overlap::Buckets;
use crate::zero::Zero1;

/// Gradient bucket size: 25 MB of f32, torch DDP's default `bucket_cap_mb`.
pub const BUCKET_ELEMS: usize = 25 * 1000 * 1000 / 4;

/// Time spent on communication, for the per-step report.
#[derive(Clone, Copy, Debug, Default)]
pub struct CommStats {
    /// Optimizer steps whose gradients were reduced.
    pub steps: u64,
    /// Seconds inside `reduce_grads` (device reads, all-reduces not hidden by them, uploads).
    pub reduce_seconds: f64,
    /// Seconds the communication thread spent in the gradient all-reduces.
    pub allreduce_seconds: f64,
    /// Seconds from the device finishing backward to the summed gradients written back: the
    /// communication the overlap did not hide.
    pub exposed_seconds: f64,
    /// Seconds the communication thread waited for the buckets' downloads (device copies).
    pub download_wait_seconds: f64,
    /// Gradient bytes all-reduced by this rank.
    pub bytes: u64,
}

pub struct MpiParallel {
    /// Shared with the caller, which still needs it to abort the job after an error.
    comm: Rc<Comm>,
    bucket_elems: usize,
    stats: CommStats,
    /// `--zero 1`: the optimizer state is sharded over flat buckets (`zero`), laid out at the
    /// first use.
    zero: bool,
    zero1: Option<Zero1>,
    /// Plain data parallel's gradient buckets (made at the first step), shared with the
    /// grad-ready hook of the step's last backward.
    buckets: Option<Rc<RefCell<Buckets>>>,
    /// `grad_ready_hook` started this step's buckets.
    step_begun: bool,
    /// Start buckets during backward (else all after it: for comparisons).
    overlap: bool,
}

pub(crate) fn mpi_err(e: String) -> TrainError {
    TrainError::Config(format!("MPI: {e}"))
}

impl MpiParallel {
    pub fn new(comm: Rc<Comm>) -> Self {
        MpiParallel {
            comm,
            bucket_elems: BUCKET_ELEMS,
            stats: CommStats::default(),
            zero: false,
            zero1: None,
            buckets: None,
            step_begun: false,
            overlap: true,
        }
    }

    /// ZeRO stage 1 (`--zero 1`): each rank keeps AdamW's moments of, and steps, only its share
    /// of the parameters, then sends their new values to the others.
    pub fn set_zero1(&mut self, on: bool) {
        self.zero = on;
    }

    /// Off: every bucket is reduced after backward (`VKFORMERS_DIST_OVERLAP=0`, to measure
    /// what the overlap saves).
    pub fn set_overlap(&mut self, on: bool) {
        self.overlap = on;
    }

    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    pub fn stats(&self) -> CommStats {
        self.stats
    }

    /// Bucket size in f32 elements (tests use small ones to exercise several buckets).
    pub fn set_bucket_elems(&mut self, n: usize) {
        self.bucket_elems = n.max(1);
    }

    /// Refuses to train when the ranks run different binaries or were given different
    /// arguments (`args`: this rank's, in a stable text form): their steps would not agree.
    pub fn check_same_run(&self, args: &str) -> Result<()> {
        let exe =
            std::env::current_exe().and_then(std::fs::read).map_err(|e| mpi_err(format!("reading the binary: {e}")))?;
        let mine = [Sha256::digest(&exe).to_vec(), Sha256::digest(args.as_bytes()).to_vec()].concat();
        let all = self.comm.gather(mine).map_err(mpi_err)?;
        for (r, x) in all.iter().enumerate() {
            if x[..32] != all[0][..32] {
                return Err(mpi_err(format!("rank {r} runs another vkformers binary than rank 0")));
            }
            if x[32..] != all[0][32..] {
                let msg = format!("rank {r} was started with other arguments than rank 0: every rank needs the same");
                return Err(mpi_err(msg));
            }
        }
        Ok(())
    }

    /// Rank 0's values of `params` on every rank, then checked by a checksum of each rank's
    /// parameters as read back from its device.
    pub fn broadcast_params(&self, g: &Graph<'_>, params: &[Tensor]) -> Result<()> {
        g.sync()?;
        for p in params {
            check_f32(p, "parameter")?;
            let data = if self.comm.rank == 0 { g.read(p)? } else { vec![0.0; p.numel()] };
            let data = self.comm.bcast_f32(0, data).map_err(mpi_err)?;
            if self.comm.rank != 0 {
                upload(g, p, &data)?;
            }
        }
        // New f32 values: any 16-bit copy of them (autocast) is stale.
        g.clear_casts();
        self.check_same_params(g, params)
    }

    /// Fails unless every rank holds the same bits in `params` (SHA-256 over all of them).
    pub fn check_same_params(&self, g: &Graph<'_>, params: &[Tensor]) -> Result<()> {
        let mut h = Sha256::new();
        for p in params {
            h.update(bytemuck::cast_slice::<f32, u8>(&g.read(p)?));
        }
        let all = self.comm.gather(h.finalize().to_vec()).map_err(mpi_err)?;
        match all.iter().position(|x| x != &all[0]) {
            Some(r) => Err(mpi_err(format!("rank {r}'s parameters differ from rank 0's (checksum)"))),
            None => Ok(()),
        }
    }
}

impl DataParallel for MpiParallel {
    fn rank(&self) -> usize {
        self.comm.rank
    }

    fn world(&self) -> usize {
        self.comm.world
    }

    fn sum(&mut self, x: &[f64]) -> Result<Vec<f64>> {
        self.comm.sum_f64(x.to_vec()).map_err(mpi_err)
    }

    /// Plain data parallel: finishes the buckets `grad_ready_hook` started during backward
    /// (`overlap`), or all of them when none was; the sums replace the gradients. ZeRO-1:
    /// the gradients reduce-scattered over flat buckets (`zero`), each rank clipping its slice.
    fn reduce_grads(&mut self, g: &Graph<'_>, params: &[Param], max_norm: f32) -> Result<Option<f64>> {
        let start = Instant::now();
        self.injected_failure()?;
        let norm = if self.zero {
            let sums = self.finish_buckets(g, params)?;
            let comm = self.comm.clone();
            Some(self.zero1(params).take_sums(g, &comm, params, sums, max_norm)?)
        } else {
            self.finish_buckets(g, params)?;
            None
        };
        self.stats.steps += 1;
        self.stats.reduce_seconds += start.elapsed().as_secs_f64();
        Ok(norm)
    }

    /// Plain data parallel: the step's buckets start as backward finishes their gradients
    /// (`overlap`). ZeRO-1 reduces to the owners after backward.
    fn grad_ready_hook(&mut self, g: &Graph<'_>, params: &[Param]) -> Result<Option<GradReadyHook>> {
        if !self.overlap {
            return Ok(None);
        }
        let buckets = self.buckets(g, params)?;
        buckets.borrow_mut().begin_step();
        self.step_begun = true;
        Ok(Some(Box::new(move |g, leaf| buckets.borrow_mut().on_ready(g, leaf))))
    }

    fn shards_optimizer(&self) -> bool {
        self.zero
    }

    fn after_step(&mut self, g: &Graph<'_>, params: &[Param], opt: &AdamW) -> Result<()> {
        if !self.zero {
            return Ok(());
        }
        let start = Instant::now();
        let comm = self.comm.clone();
        self.zero1(params).step(g, &comm, params, opt)?;
        // The all-gather (and the slice's AdamW step before it) is exposed too.
        let seconds = start.elapsed().as_secs_f64();
        self.stats.reduce_seconds += seconds;
        self.stats.exposed_seconds += seconds;
        Ok(())
    }

    fn before_save(&mut self, g: &Graph<'_>, params: &[Param], opt: &mut AdamW) -> Result<()> {
        if !self.zero {
            return Ok(());
        }
        let comm = self.comm.clone();
        self.zero1(params).gather_moments(g, &comm, params, opt)
    }

    /// `--zero 1`: AdamW keeps no moment; this rank's slice of them lives in `zero1`.
    fn keeps_moments(&mut self, _params: &[Param], _i: usize) -> bool {
        !self.zero
    }

    fn import_moments(&mut self, params: &[Param], i: usize, m: &[f32], v: &[f32]) {
        if self.zero {
            self.zero1(params).import_moments(i, m, v);
        }
    }

    fn after_save(&mut self, params: &[Param], opt: &mut AdamW) {
        if self.zero {
            params.iter().for_each(|p| opt.forget_moments(&p.tensor));
        }
    }

    fn optimizer_state_bytes(&self) -> u64 {
        self.zero1.as_ref().map_or(0, Zero1::state_bytes)
    }

    fn report(&self) -> Option<String> {
        let s = self.stats;
        let per = |x: f64| 1e3 * x / s.steps.max(1) as f64;
        let (early, launched) =
            self.buckets.as_ref().map_or((0, 0), |b| (b.borrow().launched_early, b.borrow().launched));
        Some(format!(
            "communication over {} ranks: {:.1} ms/step exposed after the device finished backward, {:.1} ms/step \
             in the gradient reduction after backward's recording ({:.1} ms/step in the reductions on the MPI thread, {:.1} ms/step waiting for bucket downloads), {:.1} MB per step, \
             {} of {} buckets started during backward",
            self.comm.world,
            per(s.exposed_seconds),
            per(s.reduce_seconds),
            per(s.allreduce_seconds),
            per(s.download_wait_seconds),
            s.bytes as f64 / 1e6 / s.steps.max(1) as f64,
            early,
            launched
        ))
    }
}

impl MpiParallel {
    /// Waits for the step's buckets (launching those not started during backward): the sums
    /// are in the gradients, or with ZeRO-1 returned (this rank's slices).
    fn finish_buckets(&mut self, g: &Graph<'_>, params: &[Param]) -> Result<Vec<f32>> {
        let buckets = self.buckets(g, params)?;
        if !std::mem::take(&mut self.step_begun) {
            buckets.borrow_mut().begin_step();
        }
        let out = buckets.borrow_mut().finish(g, &mut self.stats);
        out
    }

    /// The gradient buckets, laid out at the first call.
    fn buckets(&mut self, g: &Graph<'_>, params: &[Param]) -> Result<Rc<RefCell<Buckets>>> {
        if self.buckets.is_none() {
            let b = Buckets::new(g, self.comm.clone(), params, self.bucket_elems, self.zero)?;
            self.buckets = Some(Rc::new(RefCell::new(b)));
        }
        Ok(self.buckets.clone().expect("made above"))
    }

    /// The flat-bucket ZeRO-1 layout, made at the first use.
    fn zero1(&mut self, params: &[Param]) -> &mut Zero1 {
        let (world, rank, n) = (self.comm.world, self.comm.rank, self.bucket_elems);
        self.zero1.get_or_insert_with(|| Zero1::new(params, world, rank, n))
    }

    /// Tests: `VKFORMERS_DIST_FAIL=RANK:STEP` makes rank RANK fail at optimizer step STEP (as a
    /// device or data error would), to check that the other ranks do not wait for it forever.
    fn injected_failure(&self) -> Result<()> {
        let Ok(spec) = std::env::var("VKFORMERS_DIST_FAIL") else { return Ok(()) };
        let step = self.stats.steps + 1;
        if spec == format!("{}:{step}", self.comm.rank) {
            return Err(mpi_err(format!("simulated failure of rank {} at step {step}", self.comm.rank)));
        }
        Ok(())
    }
}

pub(crate) fn check_f32(t: &Tensor, what: &str) -> Result<()> {
    match t.dtype() {
        DType::F32 => Ok(()),
        d => Err(mpi_err(format!("a {what} {:?} is stored as {d:?}: only f32 is communicated", t.shape()))),
    }
}

/// Overwrites `t`'s storage with `data` (the device is idle: the caller read from it last).
pub(crate) fn upload(g: &Graph<'_>, t: &Tensor, data: &[f32]) -> Result<()> {
    let v = t.view();
    g.ctx().upload(v.buffer, v.offset, bytemuck::cast_slice(data))?;
    Ok(())
}
