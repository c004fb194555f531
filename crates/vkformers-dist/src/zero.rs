//! ZeRO stage 1 (`--zero 1`) over flat buckets, as DeepSpeed's stage 1 partitions: the
//! gradients are laid out in buckets (parameters in reverse order, about `bucket_elems` values
//! each, the same layout on every rank), each padded with zeros to a multiple of the N ranks.
//! Rank r owns the r-th contiguous 1/N of every bucket: it receives that slice's sums
//! (MPI_Reduce_scatter_block, started during backward as plain data parallel's all-reduces
//! are: `overlap`), keeps AdamW's moments for it alone and steps it; then
//! MPI_Allgather gives every rank every bucket's new values. A parameter may straddle two
//! ranks' slices: each piece is stepped through its own view of the parameter (AdamW is
//! elementwise, so the pieces' updates are the whole parameter's). The global norm comes from
//! one all-reduce of the ranks' sums of squares; clipping scales the owned sums on the host.

use vkformers_kernels::optim as k;
use vkformers_tensor::optim::{AdamW, Param};
use vkformers_tensor::{Graph, Tensor};
use vkformers_train::Result;

use crate::comm::Comm;
use crate::engine::{mpi_err, upload};

/// A parameter's place in its bucket: element offset and count.
struct Member {
    param: usize,
    at: usize,
    numel: usize,
}

/// Bucket values, padded to a multiple of the world size.
struct FlatBucket {
    members: Vec<Member>,
    padded: usize,
}

/// Elements `[start, start + len)` of parameter `param`, owned by this rank: element `at` of
/// its owned values, which are its slices of every bucket back to back.
struct Piece {
    bucket: usize,
    param: usize,
    start: usize,
    len: usize,
    at: usize,
}

pub(crate) struct Zero1 {
    world: usize,
    buckets: Vec<FlatBucket>,
    /// Where each bucket's slice starts among the owned values.
    base: Vec<usize>,
    pieces: Vec<Piece>,
    owned: usize,
    /// This step's summed, clipped gradient of the owned values `[owned]`.
    grad: Option<Tensor>,
    /// AdamW's (exp_avg, exp_avg_sq) of the owned values `[owned]`.
    moments: Option<(Tensor, Tensor)>,
    /// Moments read from a checkpoint, until the first step puts them on the device.
    resumed: Option<(Vec<f32>, Vec<f32>)>,
}

impl Zero1 {
    pub fn new(params: &[Param], world: usize, rank: usize, bucket_elems: usize) -> Zero1 {
        let groups = crate::overlap::bucket_groups(params, bucket_elems);
        let (mut buckets, mut base, mut pieces, mut owned) = (Vec::new(), Vec::new(), Vec::new(), 0);
        for group in groups {
            let mut at = 0;
            let mut members = Vec::new();
            for param in group {
                let numel = params[param].tensor.numel();
                members.push(Member { param, at, numel });
                at += numel;
            }
            let padded = at.div_ceil(world).max(1) * world;
            let chunk = padded / world;
            let (lo, hi) = (rank * chunk, (rank + 1) * chunk);
            for m in &members {
                let (a, b) = (lo.max(m.at), hi.min(m.at + m.numel));
                if a < b {
                    let (bucket, param, start, len) = (buckets.len(), m.param, a - m.at, b - a);
                    pieces.push(Piece { bucket, param, start, len, at: owned + a - lo });
                }
            }
            base.push(owned);
            owned += chunk;
            buckets.push(FlatBucket { members, padded });
        }
        Zero1 { world, buckets, base, pieces, owned, grad: None, moments: None, resumed: None }
    }

    /// Bytes of the optimizer state this rank holds (its slice's two moments).
    pub fn state_bytes(&self) -> u64 {
        if self.moments.is_some() || self.resumed.is_some() {
            8 * self.owned as u64
        } else {
            0
        }
    }

    /// Takes this rank's slices of the summed gradients (`sums`: `overlap::Buckets` reduce-
    /// scattered them, started during backward), clips them to `max_norm` (0: no clipping)
    /// by the global norm, which it returns, and clears every parameter's gradient: the
    /// trainer's AdamW finds none, `step` steps the owned slice.
    pub fn take_sums(
        &mut self,
        g: &Graph<'_>,
        comm: &Comm,
        params: &[Param],
        mut sums: Vec<f32>,
        max_norm: f32,
    ) -> Result<f64> {
        if sums.len() != self.owned {
            return Err(mpi_err(format!("--zero 1: {} summed values for a slice of {}", sums.len(), self.owned)));
        }
        params.iter().for_each(|p| p.tensor.zero_grad());
        let squares: f64 = sums.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
        let norm = comm.sum_f64(vec![squares]).map_err(mpi_err)?[0].sqrt();
        // As `clip_grad_norm_`: coefficient min(1, max_norm / (‖g‖ + 1e-6)).
        let coef = if max_norm > 0.0 { (f64::from(max_norm) / (norm + 1e-6)).min(1.0) as f32 } else { 1.0 };
        if coef != 1.0 {
            sums.iter_mut().for_each(|x| *x *= coef);
        }
        self.grad = Some(g.constant(&sums, &[self.owned])?);
        Ok(norm)
    }

    /// AdamW on the owned pieces (after the trainer's `opt.step`, which counted the step and
    /// set this step's learning rate), then every rank gets every bucket's new values.
    pub fn step(&mut self, g: &Graph<'_>, comm: &Comm, params: &[Param], opt: &AdamW) -> Result<()> {
        let grad = self.grad.take().ok_or_else(|| mpi_err("--zero 1: a step without its reduce-scatter".into()))?;
        let (m, v) = self.device_moments(g)?;
        let (gv, mv, vv) = (grad.view(), m.view(), v.view());
        for p in &self.pieces {
            let mut hp = opt.hp;
            if !params[p.param].decay {
                hp.weight_decay = 0.0;
            }
            let pv = params[p.param].tensor.view();
            let (at, len) = (4 * p.at as u64, 4 * p.len as u64);
            let bufs = k::AdamWBuffers {
                param: pv.buffer.slice(pv.offset + 4 * p.start as u64, len),
                grad: gv.buffer.slice(gv.offset + at, len),
                exp_avg: mv.buffer.slice(mv.offset + at, len),
                exp_avg_sq: vv.buffer.slice(vv.offset + at, len),
                grad_scale: None,
            };
            g.record(|rec| k::adamw_step_copy(rec, &bufs, None, &hp, opt.steps()))?;
        }
        self.gather_params(g, comm, params)
    }

    /// The moments on the device: those a checkpoint gave, or zeros at the first step.
    fn device_moments(&mut self, g: &Graph<'_>) -> Result<(Tensor, Tensor)> {
        if self.moments.is_none() {
            let n = [self.owned];
            self.moments = Some(match self.resumed.take() {
                Some((m, v)) => (g.constant(&m, &n)?, g.constant(&v, &n)?),
                None => (g.full(&n, 0.0)?, g.full(&n, 0.0)?),
            });
        }
        Ok(self.moments.clone().expect("made above"))
    }

    /// Every bucket's values on every rank: each rank's owned slice, all-gathered.
    fn gather_params(&self, g: &Graph<'_>, comm: &Comm, params: &[Param]) -> Result<()> {
        g.sync()?;
        for (b, bucket) in self.buckets.iter().enumerate() {
            let mut mine = vec![0.0f32; bucket.padded / self.world];
            for p in self.pieces.iter().filter(|p| p.bucket == b) {
                let pv = params[p.param].tensor.view();
                let view = pv.buffer.slice(pv.offset + 4 * p.start as u64, 4 * p.len as u64);
                let at = p.at - self.base[b];
                mine[at..at + p.len].copy_from_slice(&g.ctx().read_vec::<f32>(view)?);
            }
            let all = comm.all_gather_f32(mine).map_err(mpi_err)?;
            for m in &bucket.members {
                upload(g, &params[m.param].tensor, &all[m.at..m.at + m.numel])?;
            }
        }
        // New f32 values: any 16-bit copy of them (autocast) is stale.
        g.clear_casts();
        Ok(())
    }

    /// Rank 0 (the checkpoint writer) receives every rank's moments, as whole parameters'
    /// moments in `opt`, so the checkpoint resumes on any number of ranks. Nothing when no
    /// step was taken yet.
    pub fn gather_moments(&self, g: &Graph<'_>, comm: &Comm, params: &[Param], opt: &mut AdamW) -> Result<()> {
        let (m, v) = match (&self.moments, &self.resumed) {
            (Some((m, v)), _) => (g.read(m)?, g.read(v)?),
            (None, Some((m, v))) => (m.clone(), v.clone()),
            (None, None) => return Ok(()),
        };
        for (b, bucket) in self.buckets.iter().enumerate() {
            let chunk = bucket.padded / self.world;
            let at = self.base[b];
            let all_m = comm.all_gather_f32(m[at..at + chunk].to_vec()).map_err(mpi_err)?;
            let all_v = comm.all_gather_f32(v[at..at + chunk].to_vec()).map_err(mpi_err)?;
            if comm.rank == 0 {
                for x in &bucket.members {
                    let r = x.at..x.at + x.numel;
                    opt.import_moments(g, &params[x.param].tensor, &all_m[r.clone()], &all_v[r])?;
                }
            }
        }
        Ok(())
    }

    /// A checkpoint's moments of parameter `i` (whole): this rank keeps its pieces of them.
    pub fn import_moments(&mut self, i: usize, m: &[f32], v: &[f32]) {
        let owned = self.owned;
        let (hm, hv) = self.resumed.get_or_insert_with(|| (vec![0.0; owned], vec![0.0; owned]));
        for p in self.pieces.iter().filter(|p| p.param == i) {
            hm[p.at..p.at + p.len].copy_from_slice(&m[p.start..p.start + p.len]);
            hv[p.at..p.at + p.len].copy_from_slice(&v[p.start..p.start + p.len]);
        }
        // Moments already on the device (a resume after a step) are replaced.
        self.moments = None;
    }
}
