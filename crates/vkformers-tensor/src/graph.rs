//! The `Graph`: device, open batch, and the tape of recorded ops.
//!
//! Each differentiable op pushes a `Node` naming its inputs and a closure that, given the
//! gradient of its output, records the kernels for the gradients of its inputs. `backward`
//! walks the tape in reverse; a node is dropped as soon as it has run, which releases the
//! activations it saved (the recorder keeps their buffers alive until the GPU is done).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use vkformers_kernels::{broadcast, elementwise};
use vkformers_vk::{Context, Pending, Recorder, Result, VkError};

use crate::profile::Profile;

mod create;
mod profiled;
mod step;
use crate::tensor::{DType, Inner, Tensor};
pub use step::{StepMode, StepRecord};

static NEXT_TENSOR_ID: AtomicU64 = AtomicU64::new(1);

/// Commands in one batch before `Graph::record` submits it and opens the next: large enough
/// that a submission's cost (~tens of µs) is noise, small enough that the device starts on a
/// training step's forward while the host still records the rest of it.
/// `VKFORMERS_BATCH_COMMANDS=N` overrides it (0: one batch until `sync`, for diagnosis).
const FLUSH_DISPATCHES: usize = 256;

fn flush_dispatches() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| match std::env::var("VKFORMERS_BATCH_COMMANDS").ok().and_then(|v| v.parse::<usize>().ok()) {
        Some(0) => usize::MAX,
        Some(n) => n,
        None => FLUSH_DISPATCHES,
    })
}
/// Flushed batches that may run ahead of the host.
const MAX_IN_FLIGHT: usize = 3;

/// Computes the gradients of a node's inputs (in order; `None` for inputs without gradient)
/// from the gradient of its output.
pub type BackwardFn = Box<dyn FnOnce(&Graph<'_>, &Tensor) -> Result<Vec<Option<Tensor>>>>;

/// Called during `backward` with a leaf (a parameter) once its gradient is final: no node left
/// on the tape lists it as an input. Data parallelism starts reducing it while backward goes
/// on. Not called under gradient checkpointing (a block's recompute reads parameters that its
/// node does not list), nor for leaves only read by such closures: the caller treats every
/// gradient as final once `backward` returns.
pub type GradReadyHook = Box<dyn FnMut(&Graph<'_>, &Tensor) -> Result<()>>;

/// A position on the tape and the activation casts kept at that moment (`Graph::tape_mark`).
pub(crate) struct TapeMark {
    len: usize,
    casts: HashSet<u64>,
}

/// What the tape keeps of a node's input: a parameter itself (its gradient accumulates into
/// it), only the id of an intermediate tensor that gradients flow through, nothing for the
/// rest. Not the intermediate tensor: that would keep every op input's storage alive until its
/// node runs, even when the op saved a 16-bit copy instead (autocast products: an f32
/// activation `[tokens, hidden]` AND its bf16 copy), or saved nothing of it (a residual add).
enum NodeInput {
    Leaf(Tensor),
    Inner(u64, Vec<usize>),
    NoGrad,
}

impl NodeInput {
    fn of(t: Tensor) -> Self {
        match (t.requires_grad(), t.is_leaf()) {
            (false, _) => NodeInput::NoGrad,
            (true, true) => NodeInput::Leaf(t),
            (true, false) => NodeInput::Inner(t.id(), t.shape().to_vec()),
        }
    }
}

/// A kept 16-bit copy: of a weight (`weight`, kept across steps) or of an activation.
struct Kept {
    copy: Tensor,
    weight: bool,
    /// The f32 tensor copied (its entry goes once it is dropped).
    source: crate::tensor::WeakTensor,
}

/// The grad-ready hook during one backward, and where each leaf is read for the last time.
struct ReadyHook {
    last_use: HashMap<u64, usize>,
    hook: GradReadyHook,
}

impl ReadyHook {
    /// After the node at tape position `at` ran: its leaf inputs read nowhere earlier on the
    /// tape have their final gradient (when any reached them).
    fn fire(&mut self, g: &Graph<'_>, inputs: &[NodeInput], at: usize) -> Result<()> {
        for input in inputs {
            if let NodeInput::Leaf(leaf) = input {
                // Removed once fired: a node may list the same leaf twice.
                if self.last_use.get(&leaf.id()) == Some(&at) {
                    self.last_use.remove(&leaf.id());
                    if leaf.grad().is_some() {
                        (self.hook)(g, leaf)?;
                    }
                }
            }
        }
        Ok(())
    }
}

struct Node {
    output: u64,
    inputs: Vec<NodeInput>,
    backward: BackwardFn,
}

/// Device state, the batch being recorded and the tape.
pub struct Graph<'c> {
    ctx: &'c Context,
    rec: RefCell<Option<Recorder>>,
    /// Batches submitted by `flush` that the host has not waited for, oldest first.
    in_flight: RefCell<std::collections::VecDeque<Pending>>,
    tape: RefCell<Vec<Node>>,
    grad_enabled: Cell<bool>,
    /// Inside `inference`: activations' 16-bit copies are kept as while the tape records.
    inference_casts: Cell<bool>,
    /// Inside `inference`, ops write 16-bit twins of outputs that GEMMs read (`ops::cast`);
    /// `VKFORMERS_INFERENCE_TWINS=0` starts it off.
    inference_twins: Cell<bool>,
    /// `--gradient-checkpointing`: models run each layer through `ops::checkpoint::checkpoint`.
    checkpointing: Cell<bool>,
    /// True inside the forward of a checkpointed block: ops run exactly as in training (same
    /// kernels, same dropout, outputs flagged for gradients) but `push_node` drops their nodes,
    /// so the activations they would save are released at once.
    discard_nodes: Cell<bool>,
    submissions: Cell<usize>,
    /// Waits for a batch that left nothing in flight ([`Graph::drained_waits`]).
    drained_waits: Cell<usize>,
    /// Seconds the host was blocked waiting for batches ([`Graph::batch_wait_secs`]).
    batch_waits: Cell<f64>,
    /// Mixed precision: matrix products and attention run on 16-bit copies of their f32
    /// operands (as `torch.autocast`), with f32 results and f32 gradients.
    autocast: Cell<Option<DType>>,
    /// 16-bit copies made under autocast, by source tensor id: weights (kept across
    /// steps: AdamW rewrites each from the new f32 value; `clear_casts` after any other change) and, while the tape records,
    /// activations shared by several products (dropped with the tape, or once the activation
    /// itself is gone: nothing can ask for its copy then).
    casts: RefCell<HashMap<u64, Kept>>,
    /// Per-kernel device time when profiling (`--profile`).
    profile: RefCell<Option<Profile>>,
    /// While a node's backward runs: the gradients its inputs already gathered from their other
    /// readers, by tensor id. The backward may take one (`take_gathered_grad`) and add it into
    /// the gradient it computes for that input (one pass instead of a separate add); the ones
    /// left are summed by the tape as before.
    gathered: RefCell<HashMap<u64, Tensor>>,
    /// `set_grad_ready_hook`: None on the single-process path.
    grad_ready: RefCell<Option<GradReadyHook>>,
    /// Tensors whose producing op's backward takes its gradient in the autocast type as well
    /// as in f32 (see `ops::cast::takes_half_grad`), by id; dropped with the tape.
    half_grad: RefCell<HashSet<u64>>,
    /// How the step being recorded is kept (`begin_step` .. `end_step`): logged, captured for
    /// replay, or neither; and what it logged so far (see `graph/step.rs`).
    step: step::StepState,
    /// The counters of the dispatch chains its batches record where chains are on
    /// (`vkformers_vk::chain`), made at the first batch.
    chain: RefCell<Option<vkformers_vk::Buffer>>,
}

impl<'c> Graph<'c> {
    /// A graph on `ctx`.
    pub fn new(ctx: &'c Context) -> Self {
        Graph {
            ctx,
            rec: RefCell::new(None),
            in_flight: RefCell::new(std::collections::VecDeque::new()),
            tape: RefCell::new(Vec::new()),
            grad_enabled: Cell::new(true),
            inference_casts: Cell::new(false),
            inference_twins: Cell::new(std::env::var("VKFORMERS_INFERENCE_TWINS").map_or(true, |v| v != "0")),
            checkpointing: Cell::new(false),
            discard_nodes: Cell::new(false),
            submissions: Cell::new(0),
            drained_waits: Cell::new(0),
            batch_waits: Cell::new(0.0),
            autocast: Cell::new(None),
            casts: RefCell::new(HashMap::new()),
            profile: RefCell::new(None),
            gathered: RefCell::new(HashMap::new()),
            grad_ready: RefCell::new(None),
            half_grad: RefCell::new(HashSet::new()),
            step: step::StepState::default(),
            chain: RefCell::new(None),
        }
    }

    /// Turns mixed precision on (`Some(BF16 | F16)`) or off (`None`, or `Some(F32)`).
    pub fn set_autocast(&self, dtype: Option<DType>) {
        self.autocast.set(dtype.filter(|d| *d != DType::F32));
        self.clear_casts();
    }

    /// The 16-bit type products run in, if mixed precision is on.
    pub fn autocast(&self) -> Option<DType> {
        self.autocast.get()
    }

    /// Number of 16-bit copies kept (weights and, while the tape records, activations).
    pub fn kept_casts(&self) -> usize {
        self.casts.borrow().len()
    }

    /// Bytes of the kept 16-bit copies: `(weights', activations')` (the memory report).
    pub fn cast_bytes(&self) -> (u64, u64) {
        let casts = self.casts.borrow();
        let sum = |weights: bool| casts.values().filter(|k| k.weight == weights).map(|k| k.copy.bytes()).sum();
        (sum(true), sum(false))
    }

    /// Forgets every 16-bit copy (call after parameters change).
    pub fn clear_casts(&self) {
        self.casts.borrow_mut().clear();
    }

    /// Forgets the 16-bit copy of `src` (its value changed and nothing rewrote the copy).
    pub(crate) fn forget_cast(&self, src: &Tensor) {
        self.casts.borrow_mut().remove(&src.id());
    }

    /// The kept 16-bit copy of `src`, if any.
    pub(crate) fn cached_cast(&self, src: &Tensor, dtype: DType) -> Option<Tensor> {
        self.casts.borrow().get(&src.id()).filter(|k| k.copy.dtype() == dtype).map(|k| k.copy.clone())
    }

    /// The kept 16-bit copy of the gradient `src`, taken out of the cache (a weight's stays).
    pub(crate) fn take_grad_cast(&self, src: &Tensor, dtype: DType) -> Option<Tensor> {
        let mut casts = self.casts.borrow_mut();
        let fits = casts.get(&src.id()).is_some_and(|k| k.copy.dtype() == dtype);
        match fits {
            true if casts[&src.id()].weight => Some(casts[&src.id()].copy.clone()),
            true => casts.remove(&src.id()).map(|k| k.copy),
            false => None,
        }
    }

    /// Keeps `copy` as the 16-bit copy of `src`: a source tensor's until `clear_casts`, an
    /// activation's only while the tape records or inside `inference` (never in plain `no_grad`;
    /// a checkpointed block drops the ones it made, see `drop_casts_since`).
    pub(crate) fn keep_cast(&self, src: &Tensor, copy: &Tensor) {
        let weight = src.0.is_source;
        if weight || self.grad_enabled() || self.inference_casts.get() {
            self.insert_cast(src, copy, weight);
        }
    }

    /// Keeps `copy` as the 16-bit copy of the gradient `src` during backward (a 16-bit twin of
    /// a gradient, for the backward products that read it), until the backward ends.
    pub(crate) fn keep_grad_cast(&self, src: &Tensor, copy: &Tensor) {
        self.insert_cast(src, copy, false);
    }

    fn insert_cast(&self, src: &Tensor, copy: &Tensor, weight: bool) {
        let mut casts = self.casts.borrow_mut();
        // Copies of activations that are gone are never asked for again: drop them (a 16-bit
        // twin written by a norm, rope or GLU whose output no product read).
        casts.retain(|_, k| k.weight || k.source.is_alive());
        casts.insert(src.id(), Kept { copy: copy.clone(), weight, source: src.downgrade() });
    }

    /// Starts (or stops) timing every dispatch; `take_profile` returns what was timed.
    pub fn set_profiling(&self, on: bool) {
        *self.profile.borrow_mut() = on.then(Profile::default);
    }

    /// The per-kernel times gathered since profiling started (submits pending work first),
    /// and starts a fresh table.
    pub fn take_profile(&self) -> Result<Option<Profile>> {
        self.sync()?;
        let mut slot = self.profile.borrow_mut();
        Ok(slot.as_mut().map(std::mem::take))
    }

    /// The device context.
    pub fn ctx(&self) -> &'c Context {
        self.ctx
    }

    /// Runs `f` with the open recorder (opening one if needed). Once the open batch holds
    /// `FLUSH_DISPATCHES` commands it is submitted without waiting (`flush`), so the device
    /// runs it while the host records what follows.
    pub fn record<R>(&self, f: impl FnOnce(&mut Recorder) -> Result<R>) -> Result<R> {
        // Profiling turned on while a batch without timestamps is open: submit that batch
        // (no wait), so what follows is recorded, and timed, in a new one; else the dispatches
        // recorded into it would be missing from the profile.
        // (Checked only while profiling: `record` runs once a dispatch.)
        if self.profile.borrow().is_some() {
            let untimed = self.rec.borrow().as_ref().is_some_and(|r| !r.is_timed() && !r.is_empty());
            if untimed && self.ctx.caps().timestamps {
                self.flush()?;
            }
        }
        let mut slot = self.rec.borrow_mut();
        if slot.is_none() {
            *slot = Some(self.open_recorder()?);
        }
        let start = self.profile.borrow().is_some().then(std::time::Instant::now);
        let out = match slot.as_mut() {
            Some(rec) => self.step.run_logged(rec, f),
            None => Err(VkError::Kernel { kernel: "graph".into(), message: "no recorder".into() }),
        };
        if let (Some(t), Some(p)) = (start, self.profile.borrow_mut().as_mut()) {
            p.host_record_ns += t.elapsed().as_nanos() as f64;
        }
        // A step captured for replay is one batch, however long.
        let full = slot.as_ref().is_some_and(|r| r.len() >= flush_dispatches() && !r.is_reusable());
        drop(slot);
        if full && out.is_ok() {
            self.flush()?;
        }
        out
    }

    /// Submits the open batch without waiting for it. At most `MAX_IN_FLIGHT` batches run
    /// ahead of the host: beyond that the oldest is waited for, which bounds the command
    /// buffers and held buffers alive at once.
    pub fn flush(&self) -> Result<()> {
        let Some(mut rec) = self.rec.borrow_mut().take() else { return Ok(()) };
        self.step.batch_ends(&mut rec);
        if rec.is_empty() {
            return Ok(());
        }
        let start = std::time::Instant::now();
        self.push_pending(rec.submit_async()?)?;
        if let Some(p) = self.profile.borrow_mut().as_mut() {
            p.submit_wait_ns += start.elapsed().as_nanos() as f64;
        }
        Ok(())
    }

    fn wait_oldest(&self) -> Result<()> {
        let Some(pending) = self.in_flight.borrow_mut().pop_front() else { return Ok(()) };
        let start = std::time::Instant::now();
        let report = pending.wait();
        self.batch_waits.set(self.batch_waits.get() + start.elapsed().as_secs_f64());
        let report = report?;
        if self.in_flight.borrow().is_empty() {
            self.drained_waits.set(self.drained_waits.get() + 1);
        }
        if let Some(p) = self.profile.borrow_mut().as_mut() {
            p.add_batch(&report);
        }
        Ok(())
    }

    /// Submits everything recorded so far and waits for it (and for every flushed batch).
    pub fn sync(&self) -> Result<()> {
        let start = std::time::Instant::now();
        let mut open = self.rec.borrow_mut().take();
        if let Some(rec) = open.as_mut() {
            self.step.batch_ends(rec);
        }
        if let Some(rec) = open.filter(|r| !r.is_empty()) {
            self.in_flight.borrow_mut().push_back(rec.submit_async()?);
            self.submissions.set(self.submissions.get() + 1);
        }
        let waited = !self.in_flight.borrow().is_empty();
        while !self.in_flight.borrow().is_empty() {
            self.wait_oldest()?;
        }
        if waited {
            if let Some(p) = self.profile.borrow_mut().as_mut() {
                p.submit_wait_ns += start.elapsed().as_nanos() as f64;
            }
        }
        // No batch is open or in flight now: buffers dropped meanwhile are safe for any use.
        self.ctx.reclaim_buffers();
        Ok(())
    }

    /// Submits the open batch (as `flush`) and returns the count of batches submitted so far, this
    /// one included (for `wait_submitted`).
    pub fn flush_ticket(&self) -> Result<usize> {
        self.flush()?;
        Ok(self.submissions.get())
    }

    /// Number of batches submitted so far (one per `sync` with work in it).
    pub fn submissions(&self) -> usize {
        self.submissions.get()
    }

    /// Seconds the host has spent blocked on the device so far, waiting for submitted batches
    /// (`sync`, `wait_submitted`, and `record`/`flush` when too many batches are in flight):
    /// a caller timing its own phases tells its host work from waits hidden inside them.
    pub fn batch_wait_secs(&self) -> f64 {
        self.batch_waits.get()
    }

    /// Host waits so far for a batch after which none was left in flight: the device then idles
    /// until the host submits again (a synchronous decode loop makes one per token; a loop that
    /// submits step s + 1 before waiting for step s makes none).
    pub fn drained_waits(&self) -> usize {
        self.drained_waits.get()
    }

    /// Waits until the first `n` submissions have completed (`n`: `submissions()` read after
    /// a `flush`), leaving later ones running: the host reads one batch's results while the
    /// device runs the next. Recycled buffers are not reclaimed (a later batch may still read
    /// them); `sync` does that.
    pub fn wait_submitted(&self, n: usize) -> Result<()> {
        let start = std::time::Instant::now();
        let mut waited = false;
        while self.submissions.get() - self.in_flight.borrow().len() < n && !self.in_flight.borrow().is_empty() {
            self.wait_oldest()?;
            waited = true;
        }
        if waited {
            if let Some(p) = self.profile.borrow_mut().as_mut() {
                p.submit_wait_ns += start.elapsed().as_nanos() as f64;
            }
        }
        Ok(())
    }

    /// Runs `f` as `no_grad`, keeping activations' 16-bit copies while it runs, as the tape
    /// does: under autocast an activation read by several products (an encoder's normalised
    /// state by q, k and v) is cast once, and the 16-bit output attention writes is what o_proj
    /// reads (no cast back). Dropped when `f` returns. Plain `no_grad` keeps none, as backward
    /// passes (which run in it) accumulate gradients in place, which would stale a copy.
    pub fn inference<R>(&self, f: impl FnOnce() -> R) -> R {
        let before = self.inference_casts.replace(true);
        let out = self.no_grad(f);
        self.inference_casts.set(before);
        if !before {
            self.drop_activation_casts();
        }
        out
    }

    /// True inside `inference` (ops may write 16-bit copies of their outputs: they are kept).
    pub(crate) fn keeps_inference_casts(&self) -> bool {
        self.inference_casts.get()
    }

    /// Whether ops inside `inference` write the 16-bit twins of outputs a GEMM reads next
    /// (on by default): off, a cast runs before each product instead; the values are the same
    /// either way (for comparisons on one graph).
    pub fn set_inference_twins(&self, on: bool) {
        self.inference_twins.set(on);
    }

    pub(crate) fn inference_twins(&self) -> bool {
        self.inference_twins.get()
    }

    /// Runs `f` without recording a tape (inference).
    pub fn no_grad<R>(&self, f: impl FnOnce() -> R) -> R {
        let before = self.grad_enabled.replace(false);
        let out = f();
        self.grad_enabled.set(before);
        out
    }

    /// True while ops record backward nodes.
    pub fn grad_enabled(&self) -> bool {
        self.grad_enabled.get()
    }

    /// Turns gradient checkpointing on or off: models then run each layer through
    /// `ops::checkpoint::checkpoint` while gradients are recorded.
    pub fn set_checkpointing(&self, on: bool) {
        self.checkpointing.set(on);
    }

    /// True when models should checkpoint their layers.
    pub fn checkpointing(&self) -> bool {
        self.checkpointing.get()
    }

    /// True inside the forward of a checkpointed block (nodes are dropped, not recorded).
    pub(crate) fn discarding_nodes(&self) -> bool {
        self.discard_nodes.get()
    }

    /// Runs `f` as a training forward whose nodes are dropped (`discard == true`, the forward of
    /// a checkpointed block) or recorded (`false`, its recompute), with gradients enabled.
    pub(crate) fn with_grad<R>(&self, discard: bool, f: impl FnOnce() -> R) -> R {
        let grad = self.grad_enabled.replace(true);
        let disc = self.discard_nodes.replace(discard);
        let out = f();
        self.discard_nodes.set(disc);
        self.grad_enabled.set(grad);
        out
    }

    fn make(&self, buf: vkformers_vk::Buffer, shape: &[usize], requires_grad: bool, is_leaf: bool) -> Tensor {
        self.make_typed(buf, shape, DType::F32, requires_grad, is_leaf)
    }

    fn make_typed(
        &self,
        buf: vkformers_vk::Buffer,
        shape: &[usize],
        dtype: DType,
        requires_grad: bool,
        is_leaf: bool,
    ) -> Tensor {
        Tensor(Rc::new(Inner {
            id: NEXT_TENSOR_ID.fetch_add(1, Ordering::Relaxed),
            buf,
            offset: 0,
            shape: shape.to_vec(),
            dtype,
            is_source: false,
            requires_grad,
            grad: RefCell::new(None),
            is_leaf,
            shares_storage: Cell::new(false),
        }))
    }

    /// A tensor on `src`'s storage; both are marked as sharing it (see `Tensor::is_sole_owner`).
    fn share(&self, src: &Tensor, shape: &[usize], requires_grad: bool) -> Tensor {
        src.0.shares_storage.set(true);
        let mut t = self.make_typed(src.0.buf.clone(), shape, src.dtype(), requires_grad, false);
        Rc::get_mut(&mut t.0).expect("a new tensor has one handle").offset = src.0.offset;
        t.0.shares_storage.set(true);
        t
    }

    /// The same storage under another shape (same element count); gradients flow when
    /// `src` carries them and grad mode is on.
    pub(crate) fn alias(&self, src: &Tensor, shape: &[usize]) -> Tensor {
        let rg = self.grad_enabled() && src.requires_grad();
        let view = self.share(src, shape, rg);
        if rg && self.takes_half_grad(src) {
            // Backward aliases the view's gradient back to `src` whatever its storage type.
            self.half_grad.borrow_mut().insert(view.id());
        }
        // A kept 16-bit copy of `src` is, reshaped, the copy of the view (an activation reshaped
        // between two products, e.g. attention's [B, T, H, D] output into o_proj's [B·T, H·D]).
        let copy = self.casts.borrow().get(&src.id()).map(|k| (k.copy.clone(), k.weight));
        if let Some((copy, weight)) = copy {
            let copy_view = self.share(&copy, shape, false);
            if weight {
                self.keep_cast(&view, &copy_view);
            } else {
                // An activation's or a gradient's copy (backward reshapes gradients too).
                self.insert_cast(&view, &copy_view, false);
            }
        }
        view
    }

    /// Reads a tensor back as f32 (submits pending work first; 16-bit tensors are widened).
    pub fn read(&self, t: &Tensor) -> Result<Vec<f32>> {
        if t.dtype() != DType::F32 {
            let wide = self.empty(t.shape())?;
            self.record(|rec| vkformers_kernels::dtype::cast(rec, t.view(), t.dtype(), wide.view(), DType::F32))?;
            return self.read(&wide);
        }
        self.sync()?;
        self.ctx.read_vec(t.view())
    }

    /// The f32 output tensor of an op on f32 inputs: new storage, gradient flag from its
    /// inputs. An input of another dtype is an error naming the shapes and dtypes.
    pub fn output(&self, shape: &[usize], inputs: &[&Tensor]) -> Result<Tensor> {
        if let Some(bad) = inputs.iter().find(|t| t.dtype() != DType::F32) {
            let all: Vec<String> = inputs.iter().map(|t| format!("{:?} {:?}", t.shape(), t.dtype())).collect();
            return Err(VkError::Kernel {
                kernel: "tensor".into(),
                message: format!(
                    "this op takes f32 tensors, got {:?} {:?} (inputs: {}); cast it first (ops::cast)",
                    bad.shape(),
                    bad.dtype(),
                    all.join(", ")
                ),
            });
        }
        self.output_as(shape, DType::F32, inputs)
    }

    /// The output tensor of an op, of `dtype`, whatever its inputs' types.
    pub fn output_as(&self, shape: &[usize], dtype: DType, inputs: &[&Tensor]) -> Result<Tensor> {
        let t = self.empty_as(shape, dtype)?;
        let rg = self.grad_enabled() && inputs.iter().any(|i| i.requires_grad());
        Ok(if rg { self.make_typed(t.0.buf.clone(), shape, dtype, true, false) } else { t })
    }

    /// An f32 op output that requires grad exactly when `requires_grad` (for ops whose inputs
    /// alone do not say: the gradient reaches parameters their closure captures).
    pub(crate) fn output_with_grad(&self, shape: &[usize], requires_grad: bool) -> Result<Tensor> {
        let t = self.empty(shape)?;
        Ok(if requires_grad { self.make_typed(t.0.buf.clone(), shape, DType::F32, true, false) } else { t })
    }

    /// A new tensor on `src`'s storage that requires grad and has no producer on the tape: a
    /// checkpointed block's input in its recompute, whose gradient `backward_segment` hands back.
    pub(crate) fn detach(&self, src: &Tensor) -> Tensor {
        self.share(src, src.shape(), true)
    }

    /// Records the backward of an op whose output is `out`, when gradients flow through it.
    pub fn push_node(&self, out: &Tensor, inputs: Vec<Tensor>, backward: BackwardFn) {
        if out.requires_grad() && !self.discard_nodes.get() {
            let inputs = inputs.into_iter().map(NodeInput::of).collect();
            self.tape.borrow_mut().push(Node { output: out.id(), inputs, backward });
        }
    }

    /// Back-propagates from a scalar `loss`: every parameter that `loss` depends on gets its
    /// gradient accumulated (`+=`) into `param.grad()`. The tape is consumed.
    pub fn backward(&self, loss: &Tensor) -> Result<()> {
        if loss.numel() != 1 {
            return Err(VkError::Kernel {
                kernel: "backward".into(),
                message: format!("loss must be a scalar, got {:?}", loss.shape()),
            });
        }
        let one = self.full(&[1], 1.0)?;
        self.backward_from(loss, &one)
    }

    /// Back-propagates an upstream gradient `grad` (shaped like `out`) from `out`, as
    /// `out.backward(gradient=grad)` does in PyTorch.
    pub fn backward_from(&self, out: &Tensor, grad: &Tensor) -> Result<()> {
        let hook = if self.checkpointing.get() { None } else { self.grad_ready.borrow_mut().take() };
        let mut ready = hook.map(|hook| ReadyHook { last_use: self.leaf_last_use(), hook });
        let ran = self.run_tape(out, grad, 0, ready.as_mut());
        if let Some(r) = ready {
            *self.grad_ready.borrow_mut() = Some(r.hook);
        }
        ran?;
        self.drop_activation_casts();
        Ok(())
    }

    /// Installs (or removes, with None) the hook `backward` calls as each leaf's gradient
    /// becomes final; returns the previous one.
    pub fn set_grad_ready_hook(&self, hook: Option<GradReadyHook>) -> Option<GradReadyHook> {
        self.grad_ready.replace(hook)
    }

    /// For each leaf on the tape: the lowest tape position of a node listing it, the last one
    /// `run_tape` pops (its gradient is final once that node has run).
    fn leaf_last_use(&self) -> HashMap<u64, usize> {
        let mut last = HashMap::new();
        for (at, node) in self.tape.borrow().iter().enumerate().rev() {
            for input in &node.inputs {
                if let NodeInput::Leaf(leaf) = input {
                    last.insert(leaf.id(), at);
                }
            }
        }
        last
    }

    /// Where the tape and the autocast cache stand now, for `backward_segment`.
    pub(crate) fn tape_mark(&self) -> TapeMark {
        let casts = self.casts.borrow().iter().filter(|(_, k)| !k.weight).map(|(id, _)| *id).collect();
        TapeMark { len: self.tape_len(), casts }
    }

    /// Back-propagates `grad` from `out` through the nodes pushed since `mark` only (a
    /// checkpointed block's recompute; the older nodes stay for the enclosing backward), drops
    /// the activation casts made since, and returns the gradients that reached tensors with no
    /// node in that segment (the block's detached inputs), by tensor id.
    pub(crate) fn backward_segment(
        &self,
        out: &Tensor,
        grad: &Tensor,
        mark: &TapeMark,
    ) -> Result<HashMap<u64, Tensor>> {
        let left = self.run_tape(out, grad, mark.len, None)?;
        self.drop_casts_since(mark);
        Ok(left)
    }

    /// Forgets the activation casts made since `mark` (a checkpointed block's 16-bit copies must
    /// not outlive its forward or its recompute; the ones from before it stay).
    pub(crate) fn drop_casts_since(&self, mark: &TapeMark) {
        self.casts.borrow_mut().retain(|id, k| k.weight || mark.casts.contains(id));
    }

    /// Pops nodes until the tape is `stop` long, running each whose output got a gradient;
    /// parameters accumulate theirs. Returns the gradients of non-leaf tensors that no popped
    /// node produced.
    fn run_tape(
        &self,
        out: &Tensor,
        grad: &Tensor,
        stop: usize,
        mut ready: Option<&mut ReadyHook>,
    ) -> Result<HashMap<u64, Tensor>> {
        if out.shape() != grad.shape() {
            return Err(VkError::Kernel {
                kernel: "backward".into(),
                message: format!("gradient {:?} for output {:?}", grad.shape(), out.shape()),
            });
        }
        let mut grads: HashMap<u64, Tensor> = HashMap::new();
        if out.is_leaf() {
            // The caller keeps `grad`: a clone, so it is never adopted (see `can_adopt`).
            self.accumulate_leaf(out, grad.clone())?;
            return Ok(grads);
        }
        grads.insert(out.id(), grad.clone());
        loop {
            let (node, at) = {
                let mut tape = self.tape.borrow_mut();
                if tape.len() > stop {
                    (tape.pop(), tape.len())
                } else {
                    (None, 0)
                }
            };
            let Some(node) = node else { break };
            let Some(g) = grads.remove(&node.output) else { continue };
            let inputs = node.inputs;
            // The gradients these inputs already have, offered to the backward to add into its
            // own (saved and restored around it: a checkpoint's backward runs a tape inside).
            let mine: HashMap<u64, Tensor> = inputs
                .iter()
                .filter_map(|i| match i {
                    NodeInput::Inner(id, _) => grads.remove(id).map(|t| (*id, t)),
                    _ => None,
                })
                .collect();
            let outer = self.gathered.replace(mine);
            let input_grads = self.no_grad(|| (node.backward)(self, &g));
            grads.extend(self.gathered.replace(outer));
            let input_grads = input_grads?;
            for (input, ig) in inputs.iter().zip(input_grads) {
                let Some(ig) = ig else { continue };
                let (id, shape) = match input {
                    NodeInput::NoGrad => continue,
                    NodeInput::Leaf(leaf) => {
                        self.accumulate_leaf(leaf, ig)?;
                        continue;
                    }
                    NodeInput::Inner(id, shape) => (*id, shape),
                };
                if let Some(prev) = grads.remove(&id) {
                    // A fresh sum: either operand may also be held elsewhere (an op may hand the
                    // same gradient to two inputs), so neither is updated in place. A 16-bit
                    // gradient (`takes_half_grad`) is widened first: sums are f32.
                    let (prev, ig) = (self.widened(prev)?, self.widened(ig)?);
                    let sum = self.empty(shape)?;
                    self.record(|rec| elementwise::add(rec, prev.view(), ig.view(), sum.view()))?;
                    grads.insert(id, sum);
                } else {
                    grads.insert(id, ig);
                }
            }
            if let Some(r) = ready.as_deref_mut() {
                r.fire(self, &inputs, at)?;
            }
        }
        Ok(grads)
    }

    /// The gradient `x` already gathered from its other readers, taken for the running node's
    /// backward to add into the gradient it computes for `x` (which then stands for both). None
    /// when `x` has none yet, or it is not f32 of `x`'s shape.
    pub(crate) fn take_gathered_grad(&self, x: &Tensor) -> Option<Tensor> {
        let mut gathered = self.gathered.borrow_mut();
        let fits = gathered.get(&x.id()).is_some_and(|t| t.dtype() == DType::F32 && t.shape() == x.shape());
        if fits {
            gathered.remove(&x.id())
        } else {
            None
        }
    }

    /// The gradient tensor `id` (shape `shape`) already gathered from its other readers, taken
    /// for the running node's backward to add into *in place* (a product writing `C += …`),
    /// which then stands for both. Only when nothing else can see it: f32 of that shape, no
    /// other handle on its storage, not a leaf or a source, no cached 16-bit copy an in-place
    /// sum would make stale; else it stays gathered (the tape adds it as before).
    pub(crate) fn take_gathered_grad_in_place(&self, id: u64, shape: &[usize]) -> Option<Tensor> {
        let mut gathered = self.gathered.borrow_mut();
        let t = gathered.get(&id)?;
        let free = t.dtype() == DType::F32
            && t.shape() == shape
            && t.is_sole_owner()
            && !t.is_leaf()
            && !t.0.is_source
            && !self.casts.borrow().contains_key(&t.id());
        if free {
            gathered.remove(&id)
        } else {
            None
        }
    }

    /// The gradient accumulator leaf `t` already has in this backward (or from earlier
    /// micro-batches), for a product to add its contribution into in place (`C += …`) instead
    /// of returning it to be added: f32 of `t`'s shape and no cached 16-bit copy. The caller
    /// then returns no gradient for `t`.
    pub(crate) fn leaf_grad_accumulator(&self, t: &Tensor) -> Option<Tensor> {
        if !t.is_leaf() || !t.requires_grad() {
            return None;
        }
        let slot = t.0.grad.borrow();
        let acc = slot.as_ref()?;
        let fits =
            acc.dtype() == DType::F32 && acc.shape() == t.shape() && !self.casts.borrow().contains_key(&acc.id());
        fits.then(|| acc.clone())
    }

    /// Forgets the 16-bit copies of activations (weights' copies stay until `clear_casts`).
    fn drop_activation_casts(&self) {
        self.casts.borrow_mut().retain(|_, k| k.weight);
        self.half_grad.borrow_mut().clear();
    }

    /// Marks `y` as the output of an op whose backward takes its gradient in 16 bits too.
    pub(crate) fn set_takes_half_grad(&self, y: &Tensor) {
        self.half_grad.borrow_mut().insert(y.id());
    }

    /// Whether `x`'s producing op takes a 16-bit gradient (`set_takes_half_grad`).
    pub(crate) fn takes_half_grad(&self, x: &Tensor) -> bool {
        self.half_grad.borrow().contains(&x.id())
    }

    /// `g` in f32: itself, or a 16-bit gradient widened (exact).
    fn widened(&self, g: Tensor) -> Result<Tensor> {
        if g.dtype() == DType::F32 {
            return Ok(g);
        }
        let wide = self.empty(g.shape())?;
        self.record(|rec| vkformers_kernels::dtype::cast(rec, g.view(), g.dtype(), wide.view(), DType::F32))?;
        Ok(wide)
    }

    fn accumulate_leaf(&self, leaf: &Tensor, g: Tensor) -> Result<()> {
        let g = if leaf.dtype() == DType::F32 { self.widened(g)? } else { g };
        let mut slot = leaf.0.grad.borrow_mut();
        match slot.as_ref() {
            Some(acc) => {
                self.record(|rec| broadcast::axpy(rec, 1.0, g.view(), acc.view(), vkformers_kernels::dtype::DType::F32))
            }
            // The first gradient of this backward: adopt `g` when nothing else can see it (a
            // fresh op output handed over whole), saving a [numel] copy per parameter; later
            // gradients are added into it in place.
            None if self.can_adopt(leaf, &g) => {
                *slot = Some(g);
                Ok(())
            }
            None => {
                let acc = self.empty(leaf.shape())?;
                self.record(|rec| elementwise::copy(rec, g.view(), acc.view()))?;
                *slot = Some(acc);
                Ok(())
            }
        }
    }

    /// `g` (owned by `accumulate_leaf`) may become `leaf`'s accumulator: f32 of the leaf's
    /// shape, no other handle or tensor on its storage (a gradient an op also handed to another
    /// input is still held by the tape loop, so it is copied), not a leaf or source itself, and
    /// no cached 16-bit copy of it that in-place sums would make stale.
    fn can_adopt(&self, leaf: &Tensor, g: &Tensor) -> bool {
        g.is_sole_owner()
            && g.dtype() == DType::F32
            && g.shape() == leaf.shape()
            && !g.is_leaf()
            && !g.0.is_source
            && !self.casts.borrow().contains_key(&g.id())
    }

    /// Drops the recorded tape without running it (e.g. after an evaluation forward).
    pub fn clear_tape(&self) {
        self.tape.borrow_mut().clear();
        self.drop_activation_casts();
    }

    /// Number of nodes on the tape (for tests of memory release).
    pub fn tape_len(&self) -> usize {
        self.tape.borrow().len()
    }
}

/// Marks a tensor made from host data (see `Inner::is_source`).
fn as_source(t: Tensor) -> Tensor {
    match Rc::try_unwrap(t.0) {
        Ok(mut inner) => {
            inner.is_source = true;
            Tensor(Rc::new(inner))
        }
        Err(rc) => Tensor(rc),
    }
}

fn check_len(n: usize, shape: &[usize]) -> Result<()> {
    let want: usize = shape.iter().product();
    if n != want {
        return Err(VkError::Kernel { kernel: "tensor".into(), message: format!("{n} values for shape {shape:?}") });
    }
    Ok(())
}
