//! `Context::device_memory` follows device-local buffers: current grows and shrinks with them,
//! the peak keeps the most held at once until reset; host-visible staging buffers are not counted.

use vkformers_vk::testing::on_every_device;
use vkformers_vk::BufferKind;

#[test]
fn device_memory_tracks_current_and_peak() {
    on_every_device("device memory", |ctx| {
        let before = ctx.device_memory();
        let a = ctx.buffer(1 << 20, "a")?;
        let b = ctx.buffer(3 << 20, "b")?;
        let mid = ctx.device_memory();
        assert!(mid.current >= before.current + (4 << 20), "{before:?} -> {mid:?}");
        drop(b);
        let after = ctx.device_memory();
        assert!(after.current < mid.current && after.current >= before.current + (1 << 20));
        assert!(after.peak >= mid.current);
        let _up = ctx.buffer_of_kind(8 << 20, BufferKind::Upload, "staging")?;
        assert_eq!(ctx.device_memory().current, after.current);
        ctx.reset_peak_memory();
        assert_eq!(ctx.device_memory().peak, after.current);
        drop(a);
        assert_eq!(ctx.device_memory().current, before.current);
        Ok(())
    });
}

/// A weight-sized buffer outside the pool (`exact_buffer`) holds its own bytes, not the pool's
/// size class (which rounds 5.5 MiB up to 6 MiB), and gives them back when dropped.
#[test]
fn exact_buffers_hold_their_own_size() {
    on_every_device("exact buffers", |ctx| {
        let size = 11u64 << 19; // 5.5 MiB: between two of the pool's size classes
        let before = ctx.device_memory().current;
        let pooled = ctx.buffer(size, "pooled")?;
        let with_pool = ctx.device_memory().current - before;
        drop(pooled);
        let at = ctx.device_memory().current;
        let exact = ctx.exact_buffer(size, "exact")?;
        let held = ctx.device_memory().current - at;
        assert_eq!(exact.size(), size);
        assert!(held >= size && held < with_pool, "exact {held} bytes, pooled {with_pool} for {size}");
        drop(exact);
        assert_eq!(ctx.device_memory().current, at, "the exact buffer's bytes given back");
        Ok(())
    });
}
