//! A caching allocator for device buffers (as PyTorch's CUDA caching allocator): a dropped
//! device buffer keeps its `VkBuffer`, memory, device address and id, and waits in a pool for
//! the next request of its size class, so a training step that makes and drops thousands of
//! tensors allocates device memory only while it grows.
//!
//! Two lists, because a buffer can be dropped by the host while the batch being recorded still
//! reads it on the device:
//! - `recycled`: dropped since the owner's last completed batch. Only `scratch` requests (a
//!   tensor that kernels of the same batch write before anything reads it) may take them: the
//!   hazard tracker sees the same buffer id and orders the new writes after the old reads.
//! - `free`: safe for any use, host uploads included (`reclaim` moves `recycled` here once the
//!   batch that could still read them has completed).

use std::collections::HashMap;

use ash::vk;
use gpu_allocator::vulkan::Allocation;

/// A buffer waiting for reuse.
pub(crate) struct Pooled {
    pub raw: vk::Buffer,
    pub allocation: Allocation,
    pub capacity: u64,
    pub address: u64,
    pub id: u64,
}

#[derive(Default)]
pub(crate) struct Pool {
    free: HashMap<u64, Vec<Pooled>>,
    recycled: HashMap<u64, Vec<Pooled>>,
}

/// The capacity a request of `size` bytes is served with: 256-byte granules up to 4 KiB, then
/// four classes per power of two (at most 25% unused), so freed buffers fit later requests of
/// similar size.
pub(crate) fn size_class(size: u64) -> u64 {
    let size = size.max(4);
    if size <= 4096 {
        return size.next_multiple_of(256);
    }
    let step = 1u64 << (63 - size.leading_zeros() - 2);
    size.next_multiple_of(step)
}

impl Pool {
    /// A buffer of exactly `capacity` that is safe for any use.
    pub fn take_free(&mut self, capacity: u64) -> Option<Pooled> {
        self.free.get_mut(&capacity).and_then(Vec::pop)
    }

    /// A buffer of `capacity` for a tensor the device writes first: a recycled one if any.
    pub fn take_scratch(&mut self, capacity: u64) -> Option<Pooled> {
        self.recycled.get_mut(&capacity).and_then(Vec::pop).or_else(|| self.take_free(capacity))
    }

    /// A dropped buffer (the batch being recorded may still read it).
    pub fn recycle(&mut self, p: Pooled) {
        self.recycled.entry(p.capacity).or_default().push(p);
    }

    /// Takes buffer `id` back out of the pool (recycled or free), if it waits there: a batch
    /// kept for replay claims the buffers it uses that were dropped while it was recorded.
    pub fn claim(&mut self, id: u64) -> Option<Pooled> {
        for lists in [&mut self.recycled, &mut self.free] {
            for list in lists.values_mut() {
                if let Some(i) = list.iter().position(|p| p.id == id) {
                    return Some(list.swap_remove(i));
                }
            }
        }
        None
    }

    /// After the owner's batch completed: every recycled buffer is safe for any use.
    pub fn reclaim(&mut self) {
        for (cap, mut list) in self.recycled.drain() {
            self.free.entry(cap).or_default().append(&mut list);
        }
    }

    /// The free buffers, to give their memory back (an allocation failed, or teardown).
    pub fn drain_free(&mut self) -> Vec<Pooled> {
        self.free.drain().flat_map(|(_, v)| v).collect()
    }

    /// Every pooled buffer (teardown, after the device is idle).
    pub fn drain_all(&mut self) -> Vec<Pooled> {
        self.reclaim();
        self.drain_free()
    }

    /// Bytes held by pooled buffers.
    pub fn bytes(&self) -> u64 {
        self.free.values().chain(self.recycled.values()).flatten().map(|p| p.capacity).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up_by_at_most_a_quarter() {
        assert_eq!(size_class(1), 256);
        assert_eq!(size_class(4096), 4096);
        assert_eq!(size_class(4097), 5120);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), (1 << 20) + (1 << 18));
        for s in [5000u64, 123_457, 67_108_865, 1_048_576_001] {
            let c = size_class(s);
            assert!(c >= s && (c - s) * 4 <= s, "{s} -> {c}");
            assert_eq!(size_class(c), c, "a class is its own class");
        }
    }
}
