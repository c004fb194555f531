//! The caching allocator under the graph: a tensor dropped while its batch is still being
//! recorded gives its buffer to the next op output of the same size class, the hazard tracker
//! orders the new writes after the old reads (results stay exact), and a chain of temporaries
//! peaks at a few buffers instead of one per op.

use vkformers_tensor::ops::broadcast;
use vkformers_tensor::{Graph, Result};
use vkformers_vk::testing::on_every_device;

#[test]
fn a_buffer_freed_mid_batch_is_reused_without_corrupting_pending_reads() {
    on_every_device("reuse mid-batch", |ctx| {
        let g = Graph::new(ctx);
        let n = 100_000;
        let x = g.constant(&vec![1.0; n], &[n])?;
        let t1 = broadcast::scale(&g, &x, 2.0)?;
        let t2 = broadcast::add(&g, &t1, &x)?; // reads t1: 3
        let id = t1.view().buffer.id();
        drop(t1);
        let t3 = broadcast::scale(&g, &x, 5.0)?; // may take t1's buffer, after t2's read
        assert_eq!(t3.view().buffer.id(), id, "the freed buffer is reused in the same batch");
        let t4 = broadcast::add(&g, &t2, &t3)?; // 8
        assert!(g.read(&t2)?.iter().all(|&v| v == 3.0), "the earlier read saw the old contents");
        assert!(g.read(&t4)?.iter().all(|&v| v == 8.0));
        Ok(())
    });
}

#[test]
fn a_chain_of_temporaries_peaks_at_a_few_buffers() {
    on_every_device("reuse peak", |ctx| {
        let g = Graph::new(ctx);
        let n = 1 << 18; // 1 MiB of f32
        let mut x = g.constant(&vec![1.0; n], &[n])?;
        g.sync()?;
        ctx.reset_peak_memory();
        let before = ctx.device_memory().current;
        for _ in 0..32 {
            x = broadcast::scale(&g, &x, 1.0)?;
        }
        let values = g.read(&x)?;
        assert!(values.iter().all(|&v| v == 1.0));
        let peak = ctx.device_memory().peak - before;
        let one = (n * 4) as u64;
        eprintln!("32 chained ops: peak {peak} bytes above the start ({} buffers)", peak / one);
        assert!(peak <= 3 * one, "peak {peak} bytes for 32 temporaries of {one}: memory is not reused");
        Result::Ok(())
    });
}
