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
        let x = ctx.buffer_from(&xs, "x")?;
        // Four elements a thread (length a multiple of 4, 16-byte aligned offsets: cast4.comp)
        // and one (other lengths or offsets: cast.comp) must give the same bits.
        for (n, at) in [(xs.len(), 0u64), (xs.len() - 1, 0), (xs.len() - 4, 16), (xs.len() - 4, 8)] {
            for dt in [DType::F16, DType::BF16] {
                let narrow = ctx.buffer((at + (n * 2) as u64).next_multiple_of(4), "narrow")?;
                let wide = ctx.buffer(at * 2 + (n * 4) as u64, "wide")?;
                let (nv, wv) = (narrow.slice(at, (n * 2) as u64), wide.slice(at * 2, (n * 4) as u64));
                let mut rec = ctx.recorder(false)?;
                cast(&mut rec, x.slice(0, (n * 4) as u64), DType::F32, nv, dt)?;
                cast(&mut rec, nv, dt, wv, DType::F32)?;
                rec.submit()?;
                let bits: Vec<u16> = ctx.read_vec(nv)?;
                let back: Vec<f32> = ctx.read_vec(wv)?;
                for i in 0..n {
                    let want = match dt {
                        DType::F16 => f16::from_f32(xs[i]).to_bits(),
                        _ => bf16::from_f32(xs[i]).to_bits(),
                    };
                    assert_eq!(bits[i], want, "{dt:?} n {n} at {at}: bits of {}", xs[i]);
                    let widened = match dt {
                        DType::F16 => f16::from_bits(want).to_f32(),
                        _ => bf16::from_bits(want).to_f32(),
                    };
                    assert_eq!(back[i].to_bits(), widened.to_bits(), "{dt:?} n {n} at {at}: widening of {}", xs[i]);
                }
            }
        }
        Ok(())
    });
}
