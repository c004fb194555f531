//! The communication thread: the only thread that calls MPI (initialised `Funneled` on it, as
//! the rsmpi communicators are not `Send` on Open MPI). The training thread hands it jobs over
//! a channel and waits on each job's reply channel when it needs the result, so gradient
//! buckets are reduced while backward goes on (a bucket job carries the device submission of
//! its download: this thread waits for its fence, then reads the mapped staging buffer).

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

/// Elements per MPI call: counts are C `int`s, so larger buffers go in pieces.
const PIECE: usize = 1 << 28;

/// One collective for the communication thread; each carries its reply channel.
enum Job {
    SumF64(Vec<f64>, Sender<Vec<f64>>),
    /// The sum over ranks, and the seconds the reduction took on this rank.
    SumF32(Vec<f32>, Sender<(Vec<f32>, f64)>),
    /// Rank `.0`'s values replace everyone's (same length everywhere).
    BcastF32(usize, Vec<f32>, Sender<Vec<f32>>),
    /// Every rank's bytes, rank after rank (same length everywhere).
    Gather(Vec<u8>, Sender<Vec<u8>>),
    /// Σ over ranks of `.0` (a multiple of the world size long), this rank's 1/N of it back.
    ReduceScatter(Vec<f32>, Sender<(Vec<f32>, f64)>),
    /// Every rank's `.0` (same length everywhere), concatenated in rank order.
    AllGatherF32(Vec<f32>, Sender<Vec<f32>>),
    /// A gradient bucket: wait for its download, read it off the mapped staging buffer, sum.
    Bucket(Box<BucketJob>, Sender<BucketJob>),
    Abort(i32),
}

/// One bucket's trip through the communication thread (`Comm::sum_bucket`); the same value
/// comes back with `sum` filled, so its buffers are reused step after step.
pub struct BucketJob {
    /// The submission copying the gradients into `staging` (None: nothing to copy).
    pub download: Option<vkformers_vk::Pending>,
    /// Host-visible buffer holding the bucket's gradients once `download` is done.
    pub staging: vkformers_vk::Buffer,
    /// Bucket values: `[..grads]` read from `staging`, `[padded..]` the presence flags set by
    /// the caller; `zero`: element ranges to zero after the read (gradients absent on this
    /// rank, the padding).
    pub host: Vec<f32>,
    pub grads: usize,
    pub zero: Vec<std::ops::Range<usize>>,
    /// `host[..padded]`, a multiple of the ranks long, is reduce-scattered when `scatter`
    /// (ZeRO-1), else the whole of `host` is all-reduced.
    pub padded: usize,
    pub scatter: bool,
    /// Σ over ranks of `host`; when `scatter`, of this rank's 1/N of `host[..padded]`
    /// followed by the flags.
    pub sum: Vec<f32>,
    /// Seconds spent waiting for the download, and in the all-reduce.
    pub wait_seconds: f64,
    pub reduce_seconds: f64,
    pub error: Option<String>,
}

/// Where this process stands in the job, and the handle to its communication thread.
pub struct Comm {
    pub rank: usize,
    pub world: usize,
    /// Rank and ranks among the processes of this host (a device per local rank).
    pub local_rank: usize,
    pub local_size: usize,
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

/// Ranks and local ranks as the thread found them.
type Place = (usize, usize, usize, usize);

impl Comm {
    /// Initialises MPI on a new communication thread.
    pub fn start() -> Result<Comm, String> {
        let (jobs, rx) = channel::<Job>();
        let (placed, place) = channel::<Result<Place, String>>();
        let thread = std::thread::Builder::new()
            .name("mpi".into())
            .spawn(move || {
                let Some((universe, _)) = mpi::initialize_with_threading(mpi::Threading::Funneled) else {
                    let _ = placed.send(Err("MPI was already initialised".into()));
                    return;
                };
                let world = universe.world();
                // The processes that share memory with this one: those of this host.
                let local = world.split_shared(world.rank());
                let p = (world.rank() as usize, world.size() as usize, local.rank() as usize, local.size() as usize);
                let _ = placed.send(Ok(p));
                serve(&world, rx);
                // `universe` drops here: MPI_Finalize, once the training thread hangs up.
            })
            .map_err(|e| format!("cannot start the MPI thread: {e}"))?;
        let (rank, world, local_rank, local_size) =
            place.recv().map_err(|_| "the MPI thread ended during MPI_Init".to_string())??;
        Ok(Comm { rank, world, local_rank, local_size, jobs: Some(jobs), thread: Some(thread) })
    }

    fn send(&self, job: Job) -> Result<(), String> {
        let jobs = self.jobs.as_ref().ok_or("MPI is finished")?;
        jobs.send(job).map_err(|_| "the MPI thread has ended".to_string())
    }

    /// Σ over ranks, element by element.
    pub fn sum_f64(&self, x: Vec<f64>) -> Result<Vec<f64>, String> {
        let (tx, rx) = channel();
        self.send(Job::SumF64(x, tx))?;
        rx.recv().map_err(|_| lost())
    }

    /// Starts Σ over ranks of a gradient bucket; the reply comes when it is done.
    pub fn sum_f32(&self, x: Vec<f32>) -> Result<Receiver<(Vec<f32>, f64)>, String> {
        let (tx, rx) = channel();
        self.send(Job::SumF32(x, tx))?;
        Ok(rx)
    }

    /// Starts the reduce-scatter of `x` (a multiple of the world size long): rank r gets
    /// `Σ_ranks x[r·n/N .. (r+1)·n/N]`, and the seconds it took.
    pub fn reduce_scatter(&self, x: Vec<f32>) -> Result<Receiver<(Vec<f32>, f64)>, String> {
        let (tx, rx) = channel();
        self.send(Job::ReduceScatter(x, tx))?;
        Ok(rx)
    }

    /// Every rank's `x` (same length on all), concatenated in rank order.
    pub fn all_gather_f32(&self, x: Vec<f32>) -> Result<Vec<f32>, String> {
        let (tx, rx) = channel();
        self.send(Job::AllGatherF32(x, tx))?;
        rx.recv().map_err(|_| lost())
    }

    /// Starts a bucket's download wait and all-reduce; the job comes back when done.
    pub fn sum_bucket(&self, job: BucketJob) -> Result<Receiver<BucketJob>, String> {
        let (tx, rx) = channel();
        self.send(Job::Bucket(Box::new(job), tx))?;
        Ok(rx)
    }

    /// Rank `root`'s `x` on every rank.
    pub fn bcast_f32(&self, root: usize, x: Vec<f32>) -> Result<Vec<f32>, String> {
        let (tx, rx) = channel();
        self.send(Job::BcastF32(root, x, tx))?;
        rx.recv().map_err(|_| lost())
    }

    /// Every rank's `x` (same length on all), concatenated in rank order.
    pub fn gather(&self, x: Vec<u8>) -> Result<Vec<Vec<u8>>, String> {
        let n = x.len();
        let (tx, rx) = channel();
        self.send(Job::Gather(x, tx))?;
        let all = rx.recv().map_err(|_| lost())?;
        Ok(all.chunks(n.max(1)).map(<[u8]>::to_vec).collect())
    }

    /// Ends the whole job (MPI_Abort) after a failure on this rank, so that no other rank waits
    /// forever on a collective this one will never join. When the communication thread is
    /// stuck inside one, exiting non-zero without MPI_Finalize makes the launcher end the job.
    pub fn abort(&self, code: i32) -> ! {
        let _ = self.send(Job::Abort(code));
        std::thread::sleep(Duration::from_secs(3));
        std::process::exit(code)
    }

    /// Lets the thread finalise MPI and waits for it (the normal end of a run).
    pub fn finish(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        self.finish();
    }
}

fn lost() -> String {
    "the MPI thread ended during a collective".into()
}

fn serve(world: &SimpleCommunicator, jobs: Receiver<Job>) {
    let sum = SystemOperation::sum;
    for job in jobs {
        match job {
            Job::SumF64(x, reply) => {
                let mut out = vec![0.0; x.len()];
                world.all_reduce_into(&x[..], &mut out[..], sum());
                let _ = reply.send(out);
            }
            Job::SumF32(x, reply) => {
                let t = Instant::now();
                let mut out = vec![0.0f32; x.len()];
                for (a, b) in x.chunks(PIECE).zip(out.chunks_mut(PIECE)) {
                    world.all_reduce_into(a, b, sum());
                }
                let _ = reply.send((out, t.elapsed().as_secs_f64()));
            }
            Job::BcastF32(root, mut x, reply) => {
                for piece in x.chunks_mut(PIECE) {
                    world.process_at_rank(root as i32).broadcast_into(piece);
                }
                let _ = reply.send(x);
            }
            Job::Gather(x, reply) => {
                let mut out = vec![0u8; x.len() * world.size() as usize];
                world.all_gather_into(&x[..], &mut out[..]);
                let _ = reply.send(out);
            }
            Job::ReduceScatter(x, reply) => {
                let t = Instant::now();
                let mut out = vec![0.0f32; x.len() / world.size() as usize];
                world.reduce_scatter_block_into(&x[..], &mut out[..], sum());
                let _ = reply.send((out, t.elapsed().as_secs_f64()));
            }
            Job::AllGatherF32(x, reply) => {
                let mut out = vec![0.0f32; x.len() * world.size() as usize];
                world.all_gather_into(&x[..], &mut out[..]);
                let _ = reply.send(out);
            }
            Job::Bucket(job, reply) => {
                let mut job = *job;
                bucket(world, &mut job);
                let _ = reply.send(job);
            }
            Job::Abort(code) => world.abort(code),
        }
    }
}

/// Waits for `job`'s download, reads it, and all-reduces it. A failed download still joins the
/// all-reduce (with zeros) so the other ranks are not left waiting; the error goes back.
fn bucket(world: &SimpleCommunicator, job: &mut BucketJob) {
    let t = Instant::now();
    if let Some(d) = job.download.take() {
        if let Err(e) = d.wait() {
            job.error = Some(format!("gradient download: {e}"));
        }
    }
    let bytes = bytemuck::cast_slice_mut::<f32, u8>(&mut job.host[..job.grads]);
    if job.error.is_none() && !job.staging.read_mapped(bytes) {
        job.error = Some("the gradient staging buffer is not mapped".into());
    }
    for r in job.zero.drain(..) {
        job.host[r].fill(0.0);
    }
    job.wait_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    if job.scatter {
        // Both collectives in one job: every rank issues them in the same order.
        let (values, flags) = job.host.split_at(job.padded);
        let chunk = job.padded / world.size() as usize;
        job.sum.resize(chunk + flags.len(), 0.0);
        let (mine, flag_sums) = job.sum.split_at_mut(chunk);
        world.reduce_scatter_block_into(values, mine, SystemOperation::sum());
        world.all_reduce_into(flags, flag_sums, SystemOperation::sum());
    } else {
        job.sum.resize(job.host.len(), 0.0);
        for (a, b) in job.host.chunks(PIECE).zip(job.sum.chunks_mut(PIECE)) {
            world.all_reduce_into(a, b, SystemOperation::sum());
        }
    }
    job.reduce_seconds = t.elapsed().as_secs_f64();
}
