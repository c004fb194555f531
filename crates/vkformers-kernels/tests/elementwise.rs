//! Elementwise kernels end to end on every device, with validation on.

use vkformers_kernels::{code, elementwise};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{read, write, Context, Result, VkError};

fn ramp(n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.37).sin() * scale + i as f32 * 1e-3).collect()
}

fn check_all(ctx: &Context, n: usize) -> Result<()> {
    let (xs, ys) = (ramp(n, 2.0), ramp(n, -3.0));
    let x = ctx.buffer_from(&xs, "x")?;
    let y = ctx.buffer_from(&ys, "y")?;
    let outs: Vec<_> = (0..4).map(|i| ctx.buffer((n * 4) as u64, &format!("out{i}"))).collect::<Result<_>>()?;
    let mut rec = ctx.recorder(false)?;
    elementwise::fill(&mut rec, outs[0].view(), 2.5)?;
    elementwise::copy(&mut rec, x.view(), outs[1].view())?;
    elementwise::add(&mut rec, x.view(), y.view(), outs[2].view())?;
    elementwise::mul(&mut rec, x.view(), y.view(), outs[3].view())?;
    let report = rec.submit()?;
    assert_eq!((report.dispatches, report.barriers), (4, 0), "independent dispatches need no barrier");
    let got: Vec<Vec<f32>> = outs.iter().map(|o| ctx.read_vec(o.view())).collect::<Result<_>>()?;
    for i in 0..n {
        assert_eq!(got[0][i], 2.5, "fill at {i}");
        assert_eq!(got[1][i], xs[i], "copy at {i}");
        assert_eq!(got[2][i], xs[i] + ys[i], "add at {i}");
        assert_eq!(got[3][i], xs[i] * ys[i], "mul at {i}");
    }
    Ok(())
}

#[test]
fn fill_copy_add_mul_on_odd_sizes() {
    on_every_device("elementwise", |ctx| {
        for n in [1, 7, 255, 257, 1001, 70_001] {
            check_all(ctx, n)?;
        }
        Ok(())
    });
}

#[test]
fn dependent_dispatches_get_barriers_and_run_in_order() {
    on_every_device("chain", |ctx| {
        let n = 4096usize;
        let x = ctx.buffer_from(&ramp(n, 1.0), "x")?;
        let t = ctx.buffer((n * 4) as u64, "t")?;
        let out = ctx.buffer((n * 4) as u64, "out")?;
        let mut rec = ctx.recorder(false)?;
        // t = x + x; out = t * x; t = out + x (write after read of t): three barriers... the
        // second needs one (reads t), the third needs one (writes t, which the second read).
        elementwise::add(&mut rec, x.view(), x.view(), t.view())?;
        elementwise::mul(&mut rec, t.view(), x.view(), out.view())?;
        elementwise::add(&mut rec, out.view(), x.view(), t.view())?;
        let report = rec.submit()?;
        assert_eq!(report.barriers, 2);
        let xs = ramp(n, 1.0);
        let got: Vec<f32> = ctx.read_vec(t.view())?;
        for i in 0..n {
            assert_eq!(got[i], (xs[i] + xs[i]) * xs[i] + xs[i], "at {i}");
        }
        Ok(())
    });
}

#[test]
fn ten_thousand_dispatches_in_one_batch() {
    on_every_device("10k dispatches", |ctx| {
        const HALF: usize = 5000;
        let a = ctx.buffer((HALF * 4) as u64, "a")?;
        let b = ctx.buffer((HALF * 4) as u64, "b")?;
        let slot = |buf, i: usize| vkformers_vk::Buffer::slice(buf, (i * 4) as u64, 4);
        let mut rec = ctx.recorder(false)?;
        // 5000 independent fills a[i] = i: no barriers among them.
        for i in 0..HALF {
            elementwise::fill(&mut rec, slot(&a, i), i as f32)?;
        }
        // b[0] = a[0], then b[i] = a[i] + b[i-1]: each depends on the one before.
        elementwise::copy(&mut rec, slot(&a, 0), slot(&b, 0))?;
        for i in 1..HALF {
            elementwise::add(&mut rec, slot(&a, i), slot(&b, i - 1), slot(&b, i))?;
        }
        let report = rec.submit()?;
        assert_eq!(report.dispatches, 2 * HALF);
        assert_eq!(report.barriers, HALF, "one barrier per dependent dispatch, none for the fills");
        let av: Vec<f32> = ctx.read_vec(a.view())?;
        let bv: Vec<f32> = ctx.read_vec(b.view())?;
        for i in 0..HALF {
            assert_eq!(av[i], i as f32, "fill {i}");
            assert_eq!(bv[i], (i * (i + 1) / 2) as f32, "prefix sum {i}");
        }
        Ok(())
    });
}

#[test]
fn tensor_above_binding_limit_round_trips_through_a_kernel() {
    on_every_device("300 MiB", |ctx| {
        let bytes: u64 = 300 << 20;
        let n = (bytes / 4) as usize;
        assert!(bytes > ctx.caps().max_storage_buffer_range.min(128 << 20), "test must exceed the binding limit");
        let xs: Vec<f32> = (0..n).map(|i| (i % 1_000_003) as f32).collect();
        let x = ctx.buffer_from(&xs, "x (300 MiB)")?;
        let ones = ctx.buffer(bytes, "ones")?;
        let out = ctx.buffer(bytes, "out")?;
        let mut rec = ctx.recorder(false)?;
        elementwise::fill(&mut rec, ones.view(), 1.0)?;
        elementwise::add(&mut rec, x.view(), ones.view(), out.view())?;
        rec.submit()?;
        drop(ones);
        let got: Vec<f32> = ctx.read_vec(out.view())?;
        let bad = (0..n).find(|&i| got[i] != xs[i] + 1.0);
        assert_eq!(bad, None, "first mismatch");
        Ok(())
    });
}

#[test]
fn timestamps_time_every_dispatch() {
    on_every_device("timestamps", |ctx| {
        if !ctx.caps().timestamps {
            return Ok(());
        }
        let x = ctx.buffer(1 << 20, "x")?;
        let mut rec = ctx.recorder(true)?;
        for i in 0..5 {
            elementwise::fill(&mut rec, x.view(), i as f32)?;
        }
        let report = rec.submit()?;
        assert_eq!(report.timings.len(), 5);
        assert!(report.timings.iter().all(|(name, ns)| *name == "elementwise/fill" && ns.is_finite() && *ns >= 0.0));
        assert!(report.timings.iter().any(|(_, ns)| *ns > 0.0), "{:?}", report.timings);
        Ok(())
    });
}

#[test]
fn wrong_arguments_are_typed_errors_naming_the_kernel() {
    on_every_device("errors", |ctx| {
        let x = ctx.buffer(64, "x")?;
        let y = ctx.buffer(32, "y")?;
        let mut rec = ctx.recorder(false)?;
        let e = elementwise::add(&mut rec, x.view(), y.view(), x.view()).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "elementwise/binary:add"), "{e}");
        let e = rec.dispatch(&code::ELEMENTWISE_COPY, &[], &[read(&x)], &[0; 4], [1, 1, 1]).unwrap_err();
        assert!(e.to_string().contains("1 buffer arguments given, the shader declares 2"), "{e}");
        let e = rec.dispatch(&code::ELEMENTWISE_COPY, &[], &[read(&x), write(&y)], &[0; 8], [1, 1, 1]).unwrap_err();
        assert!(e.to_string().contains("push constants of 24 bytes given, the shader declares 20"), "{e}");
        let e = ctx.buffer(1 << 60, "huge").unwrap_err();
        assert!(matches!(e, VkError::OutOfDeviceMemory { .. }), "{e}");
        rec.submit()?;
        Ok(())
    });
}

#[test]
fn reflection_matches_every_kernel_layout() {
    // Every elementwise kernel: pointers first, then u32/f32 scalars.
    for k in code::ALL {
        assert!(k.push_size >= 8 * k.pointers, "{}", k.name);
        assert!(!k.spirv.is_empty() && k.spirv.len() % 4 == 0, "{}", k.name);
        assert_eq!(&k.spirv[..4], &0x0723_0203u32.to_le_bytes(), "{}: SPIR-V magic", k.name);
    }
    assert_eq!((code::ELEMENTWISE_FILL.pointers, code::ELEMENTWISE_FILL.push_size), (1, 16));
    assert_eq!((code::ELEMENTWISE_BINARY_ADD.pointers, code::ELEMENTWISE_BINARY_ADD.push_size), (3, 28));
}

/// `split_cols` against a host split: three parts (q, k, v of odd widths) and two (gate, up),
/// on row counts across workgroup edges; bad part sizes are typed errors.
#[test]
fn split_cols_gives_each_part_its_columns() {
    on_every_device("split_cols", |ctx| {
        for (rows, widths) in [(1, vec![8, 4, 4]), (5, vec![13, 3, 7]), (67, vec![96, 32, 32]), (9, vec![40, 40])] {
            let total: usize = widths.iter().sum();
            let xs = ramp(rows * total, 1.5);
            let x = ctx.buffer_from(&xs, "x")?;
            let outs: Vec<_> =
                widths.iter().map(|w| ctx.buffer((rows * w * 4) as u64, "part")).collect::<Result<_>>()?;
            let views: Vec<_> = outs.iter().map(|o| o.view()).collect();
            let mut rec = ctx.recorder(false)?;
            elementwise::split_cols(&mut rec, x.view(), &views, rows as u32)?;
            rec.submit()?;
            let mut col0 = 0;
            for (o, &w) in outs.iter().zip(&widths) {
                let got: Vec<f32> = ctx.read_vec(o.view())?;
                let want: Vec<f32> =
                    (0..rows).flat_map(|r| xs[r * total + col0..r * total + col0 + w].to_vec()).collect();
                assert_eq!(got, want, "part of {w} columns from column {col0}, {rows} rows");
                col0 += w;
            }
        }
        let x = ctx.buffer_from(&ramp(12, 1.0), "x")?;
        let part = ctx.buffer(16, "part")?;
        let mut rec = ctx.recorder(false)?;
        let err = elementwise::split_cols(&mut rec, x.view(), &[part.view(), part.view()], 2).unwrap_err();
        assert!(err.to_string().contains("elementwise/split_cols"), "{err}");
        Ok(())
    });
}

/// `copy_cols` against a host copy: parts of odd widths copied into their columns of a packed
/// `[rows, Σ n_p]` tensor of 4-byte and of 2-byte elements (bits as they are), across workgroup
/// edges; columns no part was copied into keep their bytes; a block past the row is an error.
#[test]
fn copy_cols_writes_each_part_into_its_columns() {
    on_every_device("copy_cols", |ctx| {
        for elem in [4u64, 2] {
            for (rows, widths) in [(1, vec![8, 4, 4]), (5, vec![13, 3, 7]), (67, vec![96, 32, 32]), (9, vec![41, 41])] {
                let total: usize = widths.iter().sum();
                // Element bits as u16 pairs: a 4-byte element is two u16 words.
                let per = (elem / 2) as usize;
                let mark = vec![0xabcdu16; rows * total * per + 1];
                let packed = ctx.buffer_from(&mark, "packed")?;
                let mut want = mark.clone();
                let mut rec = ctx.recorder(false)?;
                let mut parts = Vec::new();
                let mut col0 = 0;
                // The last part is left out: its columns keep the marks.
                for (p, &w) in widths.iter().enumerate().take(widths.len() - 1) {
                    let bits: Vec<u16> = (0..rows * w * per).map(|i| (i * 7 + p * 1000) as u16).collect();
                    for r in 0..rows {
                        let (at, from) = ((r * total + col0) * per, r * w * per);
                        want[at..at + w * per].copy_from_slice(&bits[from..from + w * per]);
                    }
                    let x = ctx.buffer_from(&[bits.as_slice(), &[0]].concat(), "part")?;
                    let xv = x.slice(0, (rows * w) as u64 * elem);
                    let dims = ((rows as u32, w as u32), (total as u32, col0 as u32));
                    let out = packed.slice(0, (rows * total) as u64 * elem);
                    elementwise::copy_cols(&mut rec, (xv, out), dims.0, dims.1, elem)?;
                    parts.push(x);
                    col0 += w;
                }
                rec.submit()?;
                let got: Vec<u16> = ctx.read_vec(packed.view())?;
                assert_eq!(got, want, "{rows} rows of {widths:?}, {elem}-byte elements");
            }
        }
        let x = ctx.buffer_from(&ramp(12, 1.0), "x")?;
        let out = ctx.buffer(48, "out")?;
        let mut rec = ctx.recorder(false)?;
        let err = elementwise::copy_cols(&mut rec, (x.view(), out.view()), (2, 4), (6, 3), 4).unwrap_err();
        assert!(err.to_string().contains("elementwise/copy_cols"), "{err}");
        Ok(())
    });
}

/// `cast_cols` (training's v rounded to 16 bits from its columns of the packed q/k/v output):
/// bit for bit `dtype::cast` of the contiguous columns, on odd shapes, f16 and bf16.
#[test]
fn cast_cols_rounds_a_column_block_as_the_cast_does() {
    use vkformers_kernels::dtype::{cast, DType, Twin};
    use vkformers_kernels::testutil::storage::on_halves;
    // No random values (a ramp): the RNG goes unused.
    on_halves("cast_cols", 0, |ctx, _, dt| {
        for (rows, n, col0, width) in [(1, 4, 0, 4), (5, 7, 3, 13), (67, 32, 96, 160)] {
            let xs = ramp(rows * width, 300.0);
            let part: Vec<f32> = (0..rows).flat_map(|r| xs[r * width + col0..r * width + col0 + n].to_vec()).collect();
            let (x, contiguous) = (ctx.buffer_from(&xs, "x")?, ctx.buffer_from(&part, "part")?);
            let words = (rows * n).div_ceil(2) * 4;
            let (got, want) = (ctx.buffer(words as u64, "got")?, ctx.buffer(words as u64, "want")?);
            let bytes = (rows * n) as u64 * 2;
            let mut rec = ctx.recorder(false)?;
            let xv = x.slice(col0 as u64 * 4, ((rows * width - col0) * 4) as u64);
            let out = Twin { view: got.slice(0, bytes), dtype: dt };
            elementwise::cast_cols(&mut rec, xv, (rows as u32, n as u32, width as u32), out)?;
            cast(&mut rec, contiguous.view(), DType::F32, want.slice(0, bytes), dt)?;
            rec.submit()?;
            let (g, w): (Vec<u16>, Vec<u16>) =
                (ctx.read_vec(got.slice(0, bytes))?, ctx.read_vec(want.slice(0, bytes))?);
            assert_eq!(g, w, "{rows} rows of {n} from column {col0} of {width}, {dt:?}");
        }
        Ok(())
    });
}
