//! The `Recorder`: appends dispatches to one command buffer, places a barrier only where a
//! dispatch depends on an earlier one of the same batch (see `hazard`), submits once and waits
//! once (`submit`), or submits and hands back a `Pending` batch to wait for later
//! (`submit_async`). Optional timestamp queries time every dispatch.

use ash::vk;

use std::sync::Arc;

use crate::chain::{ChainLink, ChainRule, CHAIN_SLOTS};
use crate::device::{Context, Shared};
use crate::error::{Result, VkError, VkResultExt};
use crate::hazard::{AccessKind, HazardTracker, Span};
use crate::memory::{Buffer, BufferView};
use crate::pipeline::KernelCode;
use crate::spare::BatchSet;

/// Where a recorder's batch stands, which says what may be done with its command pool and fence
/// once it is dropped.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Stage {
    /// Recording (or never submitted): nothing of it is on the device.
    Recording,
    /// Submitted; not yet seen complete.
    Submitted,
    /// Seen complete (its fence signaled): the set is reset and kept for the next batch.
    Done,
    /// A submission or wait failed: the set is destroyed, never reused.
    Failed,
    /// Ended and handed to a [`crate::replay::Replay`], which owns the set now.
    Replay,
}

/// One buffer argument of a dispatch: which bytes, and how the kernel uses them.
#[derive(Clone, Copy, Debug)]
pub struct Arg<'a> {
    pub view: BufferView<'a>,
    pub kind: AccessKind,
}

impl<'a> From<&'a Buffer> for BufferView<'a> {
    fn from(b: &'a Buffer) -> Self {
        b.view()
    }
}

/// The kernel reads these bytes.
pub fn read<'a>(v: impl Into<BufferView<'a>>) -> Arg<'a> {
    Arg { view: v.into(), kind: AccessKind::Read }
}

/// The kernel writes these bytes.
pub fn write<'a>(v: impl Into<BufferView<'a>>) -> Arg<'a> {
    Arg { view: v.into(), kind: AccessKind::Write }
}

/// The kernel reads and writes these bytes.
pub fn read_write<'a>(v: impl Into<BufferView<'a>>) -> Arg<'a> {
    Arg { view: v.into(), kind: AccessKind::ReadWrite }
}

/// What a submitted batch did.
#[derive(Clone, Debug, Default)]
pub struct BatchReport {
    pub dispatches: usize,
    pub barriers: usize,
    /// Per dispatch (kernel name, GPU time in nanoseconds) when timing was on. Dispatches
    /// that ran overlapped (no barrier between them) share their time.
    pub timings: Vec<(&'static str, f64)>,
    /// Per dispatch, in the order of `timings`: (bytes of the views it was given, floating-point
    /// operations a launcher declared with `Recorder::set_flops`, else 0).
    pub work: Vec<(u64, f64)>,
}

const QUERIES_PER_POOL: u32 = 4096;

/// Records work for one submission. It holds a handle to every buffer it uses, so buffers
/// dropped by the caller stay alive until the batch has completed.
pub struct Recorder {
    shared: Arc<Shared>,
    keep: std::collections::HashMap<u64, Buffer>,
    /// Its command pool, command buffer and fence (from the device's spares, back there on drop).
    set: BatchSet,
    cmd: vk::CommandBuffer,
    stage: Stage,
    hazards: HazardTracker,
    bound: vk::Pipeline,
    labels: Vec<&'static str>,
    /// (view bytes, declared flops) per entry of `labels`.
    work: Vec<(u64, f64)>,
    barriers: usize,
    timing: bool,
    query_pools: Vec<vk::QueryPool>,
    queries_used: u32,
    /// Reused by every dispatch: its push-constant block and its accesses (no allocation per
    /// dispatch once the first has sized them).
    push: Vec<u8>,
    accesses: Vec<(Span, AccessKind)>,
    /// A batch recorded to be submitted again and again (`Recorder::into_replay`): every
    /// buffer it uses is held for as long as the replay lives; the pooled ones are watched
    /// (`weak`) while it is recorded, so those dropped meanwhile serve its later commands as in
    /// any batch, and claimed back from the pool when it ends.
    reusable: bool,
    weak: std::collections::HashMap<u64, crate::memory::WeakBuffer>,
    /// What the batch recorded, when asked (`Recorder::start_log`): two recordings of the same
    /// work compare equal when only what a replay may change differs.
    pub(crate) log: Option<Vec<LogEntry>>,
    /// The dispatch chain's counters and rule, once enabled ([`Recorder::enable_chain`]).
    chain: Option<(Buffer, ChainRule)>,
}

/// One command of a logged batch: a dispatch by kernel, specialization constants, workgroups
/// and the push block's scalar parameters (not the buffer addresses before them), a copy by its
/// length, a host write by its bytes and target buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum LogEntry {
    Dispatch { kernel: &'static str, spec: Vec<u32>, groups: [u32; 3], params: Vec<u8> },
    Copy { len: u64 },
    Update { buffer: u64, data: Vec<u8> },
}

impl Context {
    /// Starts a batch; with `timing`, each dispatch is timed by timestamp queries.
    pub fn recorder(&self, timing: bool) -> Result<Recorder> {
        Recorder::new(self.shared.clone(), timing && self.caps().timestamps, false)
    }

    /// Starts a batch to be submitted many times ([`Recorder::into_replay`]); never timed.
    pub fn replay_recorder(&self) -> Result<Recorder> {
        Recorder::new(self.shared.clone(), false, true)
    }
}

impl Recorder {
    fn new(shared: Arc<Shared>, timing: bool, reusable: bool) -> Result<Self> {
        let set = shared.spares.take(&shared.device, shared.queue_family)?;
        let rec = Recorder {
            shared: shared.clone(),
            keep: std::collections::HashMap::new(),
            set,
            cmd: set.cmd,
            stage: Stage::Recording,
            hazards: HazardTracker::default(),
            bound: vk::Pipeline::null(),
            labels: Vec::new(),
            work: Vec::new(),
            barriers: 0,
            timing,
            query_pools: Vec::new(),
            queries_used: 0,
            push: Vec::new(),
            accesses: Vec::new(),
            reusable,
            weak: std::collections::HashMap::new(),
            log: None,
            chain: None,
        };
        // A replayed batch may be pending twice at once (step s + 1 is submitted before step s
        // is waited for): simultaneous use.
        let usage = if reusable {
            vk::CommandBufferUsageFlags::SIMULTANEOUS_USE
        } else {
            vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT
        };
        let begin = vk::CommandBufferBeginInfo::default().flags(usage);
        // SAFETY: a new command buffer, or one whose pool was reset (initial state).
        unsafe { shared.device.begin_command_buffer(rec.cmd, &begin) }.vk("vkBeginCommandBuffer")?;
        Ok(rec)
    }

    /// Capabilities of the recorder's device.
    pub fn caps(&self) -> &crate::Caps {
        &self.shared.caps
    }

    /// Number of dispatches and copies recorded so far.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when nothing was recorded yet.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Whether the batch times each dispatch (timestamp queries).
    pub fn is_timed(&self) -> bool {
        self.timing
    }

    /// Whether the batch is recorded for replay ([`Context::replay_recorder`]).
    pub fn is_reusable(&self) -> bool {
        self.reusable
    }

    /// Logs every command recorded from now on ([`Recorder::take_log`]).
    pub fn start_log(&mut self) {
        self.log = Some(Vec::new());
    }

    /// The commands logged since [`Recorder::start_log`] (None when not logging); logging
    /// stops until [`Recorder::resume_log`].
    pub fn take_log(&mut self) -> Option<Vec<LogEntry>> {
        self.log.take()
    }

    /// Goes on logging after `log` (what [`Recorder::take_log`] returned).
    pub fn resume_log(&mut self, log: Vec<LogEntry>) {
        self.log = Some(log);
    }

    /// Appends a dispatch of `code` (specialization constants `spec`) over `groups` workgroups.
    /// The push-constant block is the device addresses of `args`, in order, then `params`.
    pub fn dispatch(
        &mut self,
        code: &KernelCode,
        spec: &[u32],
        args: &[Arg<'_>],
        params: &[u8],
        groups: [u32; 3],
    ) -> Result<()> {
        self.dispatch_indirect(code, spec, args, &[], params, groups)
    }

    /// [`Recorder::dispatch`] of a kernel that also uses `indirect`: buffers it reaches through
    /// addresses stored in one of its `args` (a table), not through the push block. They count
    /// for barriers and are held until the batch completes like `args`.
    pub fn dispatch_indirect(
        &mut self,
        code: &KernelCode,
        spec: &[u32],
        args: &[Arg<'_>],
        indirect: &[Arg<'_>],
        params: &[u8],
        groups: [u32; 3],
    ) -> Result<()> {
        self.dispatch_with(code, spec, (args, indirect), params, groups, None)
    }

    /// Builds the push block (`args`' addresses, then `params`) and records the dispatch.
    fn dispatch_with(
        &mut self,
        code: &KernelCode,
        spec: &[u32],
        (args, indirect): (&[Arg<'_>], &[Arg<'_>]),
        params: &[u8],
        groups: [u32; 3],
        link: Option<ChainLink>,
    ) -> Result<()> {
        let mut push = std::mem::take(&mut self.push);
        let built = push_block(&mut push, code, args, params);
        let out = built.and_then(|()| self.record_dispatch(code, spec, (args, indirect), &push, groups, link));
        self.push = push;
        out
    }

    /// Lets kernels that take part record their dispatches as links of a chain (see `chain`)
    /// over `counters` (at least `CHAIN_SLOTS` 4-byte counters, used by no other work).
    pub fn enable_chain(&mut self, counters: &Buffer) -> Result<()> {
        if counters.size() < u64::from(CHAIN_SLOTS) * 4 {
            return Err(VkError::Kernel {
                kernel: "chain".into(),
                message: format!("{} bytes of counters, need {}", counters.size(), CHAIN_SLOTS * 4),
            });
        }
        self.hold([counters]);
        self.chain = Some((counters.clone(), ChainRule::default()));
        Ok(())
    }

    /// The next link of the chain and its counters (None when chains are off): the dispatch
    /// that follows must be [`Recorder::dispatch_link`] with it. Zeroes the counters first
    /// (between barriers) when the batch has none free.
    pub fn chain_link(&mut self) -> Result<Option<(ChainLink, Buffer)>> {
        let Some((counters, rule)) = self.chain.as_ref() else { return Ok(None) };
        let counters = counters.clone();
        if rule.needs_zeroing() {
            self.full_barrier();
            self.update(counters.view(), &[0u8; CHAIN_SLOTS as usize * 4])?;
            self.full_barrier();
            if let Some((_, rule)) = self.chain.as_mut() {
                rule.zeroed();
            }
        }
        let link = self.chain.as_ref().map(|(_, rule)| rule.next_link());
        Ok(link.map(|l| (l, counters)))
    }

    /// [`Recorder::dispatch`] of a chain's link (from [`Recorder::chain_link`]): no barrier
    /// before it when it waits on the previous link (`chain`'s rule).
    pub fn dispatch_link(
        &mut self,
        code: &KernelCode,
        spec: &[u32],
        args: &[Arg<'_>],
        params: &[u8],
        groups: [u32; 3],
        link: ChainLink,
    ) -> Result<()> {
        self.dispatch_with(code, spec, (args, &[]), params, groups, Some(link))
    }

    /// A command other than a link was recorded: the chain, if any, is broken.
    fn chain_broken(&mut self) {
        if let Some((_, rule)) = self.chain.as_mut() {
            rule.other();
        }
    }

    /// [`Recorder::dispatch_indirect`] with its push-constant block built.
    fn record_dispatch(
        &mut self,
        code: &KernelCode,
        spec: &[u32],
        (args, indirect): (&[Arg<'_>], &[Arg<'_>]),
        push: &[u8],
        groups: [u32; 3],
        link: Option<ChainLink>,
    ) -> Result<()> {
        let max = self.shared.caps.max_workgroup_count;
        if groups.iter().zip(max).any(|(g, m)| *g > m) || groups.contains(&0) {
            return Err(VkError::Kernel {
                kernel: code.name.into(),
                message: format!("workgroup count {groups:?} outside 1..={max:?}"),
            });
        }
        let pipe = self.shared.pipelines.get(&self.shared.device, code, spec)?;
        let mut accesses = std::mem::take(&mut self.accesses);
        accesses.clear();
        accesses.extend(args.iter().chain(indirect).map(|a| (span_of(&a.view), a.kind)));
        match link {
            Some(l) if ChainRule::skips_barrier(&l) => self.hazards.record(&accesses),
            _ => self.hazard_barrier(&accesses),
        }
        self.accesses = accesses;
        self.timestamp(vk::PipelineStageFlags::TOP_OF_PIPE)?;
        let device = &self.shared.device;
        // SAFETY: the command buffer is recording; the pipeline and layout are alive for the
        // context's lifetime; push bytes match the layout's range (checked above).
        unsafe {
            if self.bound != pipe.pipeline {
                device.cmd_bind_pipeline(self.cmd, vk::PipelineBindPoint::COMPUTE, pipe.pipeline);
                self.bound = pipe.pipeline;
            }
            if !push.is_empty() {
                device.cmd_push_constants(self.cmd, pipe.layout, vk::ShaderStageFlags::COMPUTE, 0, push);
            }
            device.cmd_dispatch(self.cmd, groups[0], groups[1], groups[2]);
        }
        self.timestamp(vk::PipelineStageFlags::BOTTOM_OF_PIPE)?;
        if let Some(log) = self.log.as_mut() {
            let params = push[8 * code.pointers as usize..].to_vec();
            log.push(LogEntry::Dispatch { kernel: code.name, spec: spec.to_vec(), groups, params });
        }
        match (link, self.chain.as_mut()) {
            (Some(l), Some((_, rule))) => rule.linked(&l, groups[0] * groups[1] * groups[2]),
            _ => self.chain_broken(),
        }
        self.labels.push(code.name);
        self.work.push((args.iter().chain(indirect).map(|a| a.view.len).sum(), 0.0));
        self.hold(args.iter().chain(indirect).map(|a| a.view.buffer));
        Ok(())
    }

    /// Appends a buffer-to-buffer copy of `src.len` bytes.
    pub fn copy(&mut self, src: BufferView<'_>, dst: BufferView<'_>) -> Result<()> {
        assert_eq!(src.len, dst.len, "copy between views of different lengths");
        self.hazard_barrier(&[(span_of(&src), AccessKind::Read), (span_of(&dst), AccessKind::Write)]);
        self.timestamp(vk::PipelineStageFlags::TOP_OF_PIPE)?;
        let region = [vk::BufferCopy { src_offset: src.offset, dst_offset: dst.offset, size: src.len }];
        // SAFETY: recording; both buffers are held until the batch completes.
        unsafe { self.shared.device.cmd_copy_buffer(self.cmd, src.buffer.raw(), dst.buffer.raw(), &region) };
        self.hold([src.buffer, dst.buffer]);
        self.chain_broken();
        self.timestamp(vk::PipelineStageFlags::BOTTOM_OF_PIPE)?;
        if let Some(log) = self.log.as_mut() {
            log.push(LogEntry::Copy { len: src.len });
        }
        self.labels.push("copy");
        self.work.push((src.len + dst.len, 0.0));
        Ok(())
    }

    /// Declares the floating-point operations of the dispatch just recorded (for `--profile`'s
    /// TFLOP/s column).
    pub fn set_flops(&mut self, flops: f64) {
        if let Some(w) = self.work.last_mut() {
            w.1 = flops;
        }
    }

    /// Most bytes `update` writes in one command (vkCmdUpdateBuffer's limit).
    pub const UPDATE_MAX: usize = 65_536;

    /// Appends a write of host `data` into `dst` (at most `UPDATE_MAX` bytes, a multiple of 4,
    /// at a 4-byte-aligned offset): small inputs (ids, masks, positions) travel inside the
    /// batch instead of as a staging submission of their own.
    pub fn update(&mut self, dst: BufferView<'_>, data: &[u8]) -> Result<()> {
        if data.len() > Self::UPDATE_MAX || !data.len().is_multiple_of(4) || !dst.offset.is_multiple_of(4) {
            return Err(VkError::Kernel {
                kernel: "update".into(),
                message: format!("{} bytes at offset {}: need a multiple of 4 up to 65536", data.len(), dst.offset),
            });
        }
        if data.len() as u64 > dst.len {
            return Err(VkError::Kernel {
                kernel: "update".into(),
                message: format!("{} bytes into a view of {}", data.len(), dst.len),
            });
        }
        if data.is_empty() {
            return Ok(());
        }
        let span = Span { buffer: dst.buffer.id(), start: dst.offset, end: dst.offset + data.len() as u64 };
        self.hazard_barrier(&[(span, AccessKind::Write)]);
        self.timestamp(vk::PipelineStageFlags::TOP_OF_PIPE)?;
        // SAFETY: recording; the size and offset rules were checked above; the buffer is held.
        unsafe { self.shared.device.cmd_update_buffer(self.cmd, dst.buffer.raw(), dst.offset, data) };
        self.hold([dst.buffer]);
        self.chain_broken();
        self.timestamp(vk::PipelineStageFlags::BOTTOM_OF_PIPE)?;
        if let Some(log) = self.log.as_mut() {
            log.push(LogEntry::Update { buffer: dst.buffer.id(), data: data.to_vec() });
        }
        self.labels.push("update");
        self.work.push((data.len() as u64, 0.0));
        Ok(())
    }

    /// Keeps a handle to each buffer (once) until the batch has completed.
    fn hold<'b>(&mut self, buffers: impl IntoIterator<Item = &'b Buffer>) {
        // Pooled device buffers outlive their handles (a dropped one waits in the pool, its
        // memory intact), so only the others need keeping until the batch completes.
        // A batch for replay watches its pooled buffers, to hold them once it ends.
        for b in buffers {
            if !b.is_pooled() {
                self.keep.entry(b.id()).or_insert_with(|| b.clone());
            } else if self.reusable {
                // The latest handle: a buffer dropped and taken again inside the batch is
                // another handle of the same id.
                self.weak.insert(b.id(), b.downgrade());
            }
        }
    }

    fn hazard_barrier(&mut self, accesses: &[(Span, AccessKind)]) {
        if self.hazards.needs_barrier(accesses) {
            self.full_barrier();
        }
        self.hazards.record(accesses);
    }

    /// Every earlier compute or transfer access before every later one.
    fn full_barrier(&mut self) {
        let stages = vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER;
        let barrier = [vk::MemoryBarrier::default()
            .src_access_mask(
                vk::AccessFlags::SHADER_WRITE
                    | vk::AccessFlags::TRANSFER_WRITE
                    | vk::AccessFlags::SHADER_READ
                    | vk::AccessFlags::TRANSFER_READ,
            )
            .dst_access_mask(
                vk::AccessFlags::SHADER_READ
                    | vk::AccessFlags::SHADER_WRITE
                    | vk::AccessFlags::TRANSFER_READ
                    | vk::AccessFlags::TRANSFER_WRITE,
            )];
        // SAFETY: recording, outside any render pass.
        unsafe {
            self.shared.device.cmd_pipeline_barrier(
                self.cmd,
                stages,
                stages,
                vk::DependencyFlags::empty(),
                &barrier,
                &[],
                &[],
            )
        };
        self.barriers += 1;
        // Nothing before it can race with anything after it: both trackers start over.
        self.hazards.barrier();
        if let Some((_, rule)) = self.chain.as_mut() {
            rule.barrier();
        }
    }

    fn timestamp(&mut self, stage: vk::PipelineStageFlags) -> Result<()> {
        if !self.timing {
            return Ok(());
        }
        let device = &self.shared.device;
        if self.queries_used.is_multiple_of(QUERIES_PER_POOL) {
            let info =
                vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(QUERIES_PER_POOL);
            // SAFETY: valid device; the pool is reset before its first use below.
            let pool = unsafe { device.create_query_pool(&info, None) }.vk("vkCreateQueryPool")?;
            // SAFETY: recording.
            unsafe { device.cmd_reset_query_pool(self.cmd, pool, 0, QUERIES_PER_POOL) };
            self.query_pools.push(pool);
        }
        let pool = self.query_pools[(self.queries_used / QUERIES_PER_POOL) as usize];
        // SAFETY: recording; the query index is within the pool and was reset.
        unsafe { device.cmd_write_timestamp(self.cmd, stage, pool, self.queries_used % QUERIES_PER_POOL) };
        self.queries_used += 1;
        Ok(())
    }

    /// Submits the batch and waits for it once.
    pub fn submit(self) -> Result<BatchReport> {
        self.submit_async()?.wait()
    }

    /// Submits the batch without waiting: the host records the next batch while the device
    /// runs this one. The returned `Pending` keeps the command buffer and every buffer the
    /// batch holds alive until `wait` (or its drop) has seen the fence.
    pub fn submit_async(mut self) -> Result<Pending> {
        let shared = self.shared.clone();
        let device = &shared.device;
        // SAFETY: recording was begun in `new`.
        if let Err(e) = unsafe { device.end_command_buffer(self.cmd) }.vk("vkEndCommandBuffer") {
            self.stage = Stage::Failed;
            return Err(e);
        }
        let cmds = [self.cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        let result = {
            let queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the queue is externally synchronized by the mutex; the set's fence is
            // unsignaled and used by no other submission.
            unsafe { device.queue_submit(*queue, &submit, self.set.fence) }
        };
        if let Err(r) = result {
            self.stage = Stage::Failed;
            return Err(self.batch_error(r));
        }
        self.stage = Stage::Submitted;
        Ok(Pending { rec: Some(self), replayed: None })
    }

    /// Orders everything recorded from now on after every command submitted earlier on the
    /// queue (a pipeline barrier's first scope covers earlier submissions): the hazard tracker
    /// of a fresh batch knows nothing of the writes of a batch still in flight.
    pub fn order_after_earlier_batches(&mut self) {
        self.full_barrier();
    }

    fn batch_error(&self, r: vk::Result) -> VkError {
        batch_error(&self.labels, r)
    }

    /// Holds every pooled buffer a batch for replay uses, taking back from the pool those
    /// dropped while it was recorded; false when one was taken again for work outside the
    /// batch (a tensor made inside it and not yet written by it): the batch may then be
    /// submitted once, as any batch, but not replayed.
    pub fn pin_for_replay(&mut self) -> bool {
        let mut all = true;
        for (id, w) in std::mem::take(&mut self.weak) {
            match w.revive(&self.shared) {
                Some(b) => {
                    self.keep.insert(id, b);
                }
                None => all = false,
            }
        }
        all
    }

    /// Ends a batch recorded by [`Context::replay_recorder`] and hands it over, with every
    /// buffer it uses, to a [`crate::replay::Replay`] that submits it as often as asked.
    pub fn into_replay(mut self) -> Result<crate::replay::Replay> {
        if !self.reusable {
            return Err(VkError::Kernel {
                kernel: "replay".into(),
                message: "only a batch of Context::replay_recorder can be replayed".into(),
            });
        }
        // SAFETY: recording was begun in `new`.
        if let Err(e) = unsafe { self.shared.device.end_command_buffer(self.cmd) }.vk("vkEndCommandBuffer") {
            self.stage = Stage::Failed;
            return Err(e);
        }
        if !self.pin_for_replay() {
            self.stage = Stage::Failed;
            return Err(VkError::Kernel {
                kernel: "replay".into(),
                message: "a buffer of the recorded batch was taken for other work before it ended".into(),
            });
        }
        let keep: Vec<Buffer> = std::mem::take(&mut self.keep).into_values().collect();
        self.stage = Stage::Replay;
        let labels = std::mem::take(&mut self.labels);
        Ok(crate::replay::Replay::new(self.shared.clone(), self.set, keep, labels, self.barriers))
    }
}

/// The error of a batch running `labels` whose submission or wait returned `r`.
pub(crate) fn batch_error(labels: &[&'static str], r: vk::Result) -> VkError {
    let mut names: Vec<&str> = labels.to_vec();
    names.dedup();
    names.truncate(8);
    let kernels = names.join(", ");
    match r {
        vk::Result::ERROR_DEVICE_LOST => VkError::DeviceLost { kernels },
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
            VkError::OutOfDeviceMemory { what: format!("a batch running {kernels}"), bytes: 0 }
        }
        r => VkError::Kernel { kernel: kernels, message: format!("vkQueueSubmit/vkWaitForFences: {r}") },
    }
}

impl Recorder {
    fn read_timings(&self) -> Result<Vec<(&'static str, f64)>> {
        if !self.timing {
            return Ok(Vec::new());
        }
        let device = &self.shared.device;
        let mut ticks = Vec::with_capacity(self.queries_used as usize);
        for (i, pool) in self.query_pools.iter().enumerate() {
            let n = (self.queries_used - i as u32 * QUERIES_PER_POOL).min(QUERIES_PER_POOL) as usize;
            let mut data = vec![0u64; n];
            // SAFETY: the batch completed, so these queries are available.
            unsafe {
                device.get_query_pool_results(
                    *pool,
                    0,
                    &mut data,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )
            }
            .vk("vkGetQueryPoolResults")?;
            ticks.extend(data);
        }
        let period = f64::from(self.shared.caps.timestamp_period_ns);
        Ok(self
            .labels
            .iter()
            .zip(ticks.chunks_exact(2))
            .map(|(l, t)| (*l, t[1].saturating_sub(t[0]) as f64 * period))
            .collect())
    }
}

/// A submitted batch the host has not waited for (`Recorder::submit_async`, or one
/// submission of a [`Replay`]).
pub struct Pending {
    rec: Option<Recorder>,
    replayed: Option<crate::replay::Submission>,
}

impl Recorder {
    /// Waits for the submitted batch's fence: Done, or Failed (device lost) with the error.
    fn wait_fence(&mut self) -> std::result::Result<(), vk::Result> {
        // SAFETY: the fence was submitted with the batch.
        let result = unsafe { self.shared.device.wait_for_fences(&[self.set.fence], true, u64::MAX) };
        self.stage = if result.is_ok() { Stage::Done } else { Stage::Failed };
        result
    }
}

impl Pending {
    pub(crate) fn replayed(sub: crate::replay::Submission) -> Self {
        Pending { rec: None, replayed: Some(sub) }
    }

    /// Waits for the batch and reports what it did.
    pub fn wait(mut self) -> Result<BatchReport> {
        if let Some(sub) = self.replayed.take() {
            return sub.wait();
        }
        let mut rec = self.rec.take().expect("a pending batch holds its recorder until waited");
        rec.wait_fence().map_err(|r| rec.batch_error(r))?;
        let timings = rec.read_timings()?;
        let work = if rec.timing { rec.work.clone() } else { Vec::new() };
        Ok(BatchReport { dispatches: rec.labels.len(), barriers: rec.barriers, timings, work })
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // Dropped without `wait` (an error elsewhere): the command buffer and the buffers the
        // batch holds may be freed only once the device is done with them.
        if let Some(mut rec) = self.rec.take() {
            let _ = rec.wait_fence();
        }
        // A replay's submission waits for its own fence when dropped.
        self.replayed.take();
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let device = &self.shared.device;
        // SAFETY: `Pending` waited for completion, or the batch was never submitted.
        unsafe {
            for pool in self.query_pools.drain(..) {
                device.destroy_query_pool(pool, None);
            }
        }
        match self.stage {
            // Nothing of it on the device: the set is reset and kept.
            Stage::Recording | Stage::Done => self.shared.spares.give(device, self.set, self.stage == Stage::Done),
            // SAFETY: a failed batch is not reused (the device is likely lost); `Submitted` is
            // only ever dropped through `Pending`, which waits first.
            Stage::Submitted | Stage::Failed => unsafe { crate::spare::destroy(device, self.set) },
            Stage::Replay => {}
        }
    }
}

fn span_of(v: &BufferView<'_>) -> Span {
    Span { buffer: v.buffer.id(), start: v.offset, end: v.offset + v.len }
}

/// Builds the push-constant block in `push`: 8-byte device addresses of `args`, then `params`;
/// checks it against what reflection found in the shader.
fn push_block(push: &mut Vec<u8>, code: &KernelCode, args: &[Arg<'_>], params: &[u8]) -> Result<()> {
    if args.len() != code.pointers as usize {
        return Err(VkError::Kernel {
            kernel: code.name.into(),
            message: format!("{} buffer arguments given, the shader declares {}", args.len(), code.pointers),
        });
    }
    push.clear();
    for a in args {
        push.extend_from_slice(&a.view.address().to_le_bytes());
    }
    push.extend_from_slice(params);
    if push.len() != code.push_size as usize {
        return Err(VkError::Kernel {
            kernel: code.name.into(),
            message: format!("push constants of {} bytes given, the shader declares {}", push.len(), code.push_size),
        });
    }
    Ok(())
}
