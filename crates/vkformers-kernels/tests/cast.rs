//! f32 <-> f16/bf16 casts: exact against the `half` crate's round-to-nearest-even.

use half::{bf16, f16};
use vkformers_kernels::dtype::{cast, DType};
use vkformers_kernels::testutil::Rng;
use vkformers_vk::testing::on_every_device;

#[test]
fn casts_round_like_the_half_crate_and_widen_exactly() {
    on_every_device("cast", |ctx| {
        if !ctx.caps().fp16 {
            return Ok(());
        }
        let mut rng = Rng::new(4);
        let mut xs = rng.vec(1001, 300.0);
        xs.extend([0.0, -0.0, 1e-8, 65504.0, 1e30, -3.3895314e38, f32::INFINITY]);
        let n = xs.len();
        let x = ctx.buffer_from(&xs, "x")?;
        for dt in [DType::F16, DType::BF16] {
            let narrow = ctx.buffer((n * 2).next_multiple_of(4) as u64, "narrow")?;
            let wide = ctx.buffer((n * 4) as u64, "wide")?;
            let mut rec = ctx.recorder(false)?;
            cast(&mut rec, x.view(), DType::F32, narrow.slice(0, (n * 2) as u64), dt)?;
            cast(&mut rec, narrow.slice(0, (n * 2) as u64), dt, wide.view(), DType::F32)?;
            rec.submit()?;
            let bits: Vec<u16> = ctx.read_vec(narrow.view())?;
            let back: Vec<f32> = ctx.read_vec(wide.view())?;
            for i in 0..n {
                let want = match dt {
                    DType::F16 => f16::from_f32(xs[i]).to_bits(),
                    _ => bf16::from_f32(xs[i]).to_bits(),
                };
                assert_eq!(bits[i], want, "{dt:?} bits of {}", xs[i]);
                let widened = match dt {
                    DType::F16 => f16::from_bits(want).to_f32(),
                    _ => bf16::from_bits(want).to_f32(),
                };
                assert_eq!(back[i].to_bits(), widened.to_bits(), "{dt:?} widening of {}", xs[i]);
            }
        }
        Ok(())
    });
}
