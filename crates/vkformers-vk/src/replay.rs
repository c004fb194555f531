//! A recorded batch submitted again and again: a decode step whose every input that changes
//! from step to step lives on the device (the ids the previous step chose, the cache's lengths,
//! positions and store slots, which the step itself advances) is recorded once and replayed,
//! so the host does no recording at all for the steps after it.
//!
//! The replay owns the command buffer and holds every buffer the batch uses, pooled ones
//! included, so none is handed to other work while the replay lives. Each submission has its
//! own fence ([`Submission`]); submissions run in queue order, and the batch's first command
//! is a barrier after everything submitted before it (`Recorder::order_after_earlier_batches`
//! when recorded behind batches in flight), so two replays never overlap on the device.

use std::sync::Arc;

use ash::vk;

use crate::device::Shared;
use crate::error::{Result, VkResultExt};
use crate::memory::Buffer;
use crate::recorder::{batch_error, BatchReport, Pending};
use crate::spare::BatchSet;

/// A batch ended for replay (`Recorder::into_replay`).
pub struct Replay {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    set: BatchSet,
    /// Every buffer the batch uses, alive (and out of the pool) while the replay lives.
    _keep: Vec<Buffer>,
    labels: Vec<&'static str>,
    barriers: usize,
}

impl Replay {
    pub(crate) fn new(
        shared: Arc<Shared>,
        set: BatchSet,
        keep: Vec<Buffer>,
        labels: Vec<&'static str>,
        barriers: usize,
    ) -> Self {
        Replay { inner: Arc::new(Inner { shared, set, _keep: keep, labels, barriers }) }
    }

    /// Commands (dispatches, copies, writes) of one submission.
    pub fn len(&self) -> usize {
        self.inner.labels.len()
    }

    /// True when the batch records nothing.
    pub fn is_empty(&self) -> bool {
        self.inner.labels.is_empty()
    }

    /// Submits the batch once more without waiting: the returned `Pending` keeps the replay's
    /// command buffer and buffers alive until its fence is seen.
    pub fn submit(&self) -> Result<Pending> {
        let inner = &self.inner;
        let device = &inner.shared.device;
        // SAFETY: valid device.
        let fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }.vk("vkCreateFence")?;
        let cmds = [inner.set.cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        let result = {
            let queue = inner.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the queue is externally synchronized by the mutex; the command buffer was
            // recorded with simultaneous use, so it may be pending more than once.
            unsafe { device.queue_submit(*queue, &submit, fence) }
        };
        if let Err(r) = result {
            // SAFETY: the fence was never submitted.
            unsafe { device.destroy_fence(fence, None) };
            return Err(batch_error(&inner.labels, r));
        }
        Ok(Pending::replayed(Submission { inner: inner.clone(), fence }))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Every submission holds the inner state until its fence was seen, so the command
        // buffer is not pending; its own fence was never submitted.
        self.shared.spares.give(&self.shared.device, self.set, false);
    }
}

/// One submission of a replay, waited for through [`Pending`].
pub(crate) struct Submission {
    inner: Arc<Inner>,
    fence: vk::Fence,
}

impl Submission {
    /// Waits for the submission's fence and reports the batch's commands and barriers.
    pub(crate) fn wait(self) -> Result<BatchReport> {
        let device = &self.inner.shared.device;
        // SAFETY: the fence was submitted with the batch.
        unsafe { device.wait_for_fences(&[self.fence], true, u64::MAX) }
            .map_err(|r| batch_error(&self.inner.labels, r))?;
        Ok(BatchReport {
            dispatches: self.inner.labels.len(),
            barriers: self.inner.barriers,
            timings: Vec::new(),
            work: Vec::new(),
        })
    }
}

impl Drop for Submission {
    fn drop(&mut self) {
        let device = &self.inner.shared.device;
        // SAFETY: the fence was submitted; it is destroyed only once seen (or the device lost).
        unsafe {
            let _ = device.wait_for_fences(&[self.fence], true, u64::MAX);
            device.destroy_fence(self.fence, None);
        }
    }
}
