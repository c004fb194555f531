//! Batches reuse the command pool, command buffer and fence of completed ones: one set serves
//! every batch of a loop that waits for each, and each reused set still runs its own commands
//! and is waited for (a fence left signaled would let the host read before the copy landed).

use vkformers_vk::testing::on_every_device;
use vkformers_vk::BufferKind;

#[test]
fn completed_batches_give_their_set_to_the_next() {
    on_every_device("spare batches", |ctx| {
        let dev = ctx.buffer(4096, "device words")?;
        let host = ctx.buffer_of_kind(4096, BufferKind::Download, "host words")?;
        for round in 0..6u32 {
            let words: Vec<u32> = (0..1024).map(|i| i * 7 + round).collect();
            let mut rec = ctx.recorder(false)?;
            rec.update(dev.view(), bytemuck::cast_slice(&words))?;
            rec.copy(dev.view(), host.view())?;
            rec.submit()?;
            let mut back = vec![0u32; 1024];
            assert!(host.read_mapped(bytemuck::cast_slice_mut(&mut back)), "the host buffer is mapped");
            assert_eq!(back, words, "round {round}");
            assert_eq!(ctx.spare_batches(), 1, "round {round}: the one set is kept and reused");
        }
        // Two batches open at once take two sets; both come back.
        let (a, b) = (ctx.recorder(false)?, ctx.recorder(false)?);
        assert_eq!(ctx.spare_batches(), 0);
        drop((a, b));
        assert_eq!(ctx.spare_batches(), 2);
        Ok(())
    });
}
