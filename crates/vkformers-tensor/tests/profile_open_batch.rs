//! Profiling turned on while a batch recorded without timestamps is still open: the dispatches
//! recorded after it are timed (the open batch is submitted first and a timed one opened), not
//! lost into the untimed batch.

use vkformers_tensor::ops::broadcast;
use vkformers_tensor::{Graph, Result};
use vkformers_vk::testing::on_every_device;

#[test]
fn dispatches_after_profiling_starts_are_counted() {
    on_every_device("profile after an open batch", |ctx| {
        if !ctx.caps().timestamps {
            return Ok(());
        }
        let g = Graph::new(ctx);
        let x = g.constant(&[1.0, 2.0, 3.0], &[3])?;
        // Recorded untimed, left open (no sync).
        let _before = broadcast::scale(&g, &x, 2.0)?;
        g.set_profiling(true);
        let after = (0..3).map(|_| broadcast::scale(&g, &x, 3.0)).collect::<Result<Vec<_>>>()?;
        let p = g.take_profile()?.expect("profiling is on");
        g.set_profiling(false);
        let timed: u64 = p.kernels.values().map(|k| k.calls).sum();
        assert_eq!(timed, after.len() as u64, "the dispatches recorded after profiling started: {:?}", p.kernels);
        Ok(())
    });
}
