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
