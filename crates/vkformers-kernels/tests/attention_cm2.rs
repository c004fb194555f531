//! The tensor-core attention (`attention::coopmat2::{forward_cm2, backward_cm2}`, NVIDIA
//! cooperative matrix 2) against the f64 reference on odd shapes with every option, in f16 and
//! bf16: inputs rounded to the type on the host and the reference computed on the rounded
//! values; o, dq, dk, dv are compared with the type's tolerance, lse and delta (f32 math on
//! exact 16-bit products) with f32's.
//! Runs where `coopmat2::supported` says so (the H200); elsewhere (lavapipe) it says why it is
//! skipped, and only the error paths are checked.

use vkformers_kernels::attention::coopmat2::{backward_cm2, backward_scratch_len, forward_cm2, supported};
use vkformers_kernels::attention::reference::{self, Shape};
use vkformers_kernels::attention::{self, Grads, Qkv, Saved};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::testutil::dense_grads;
use vkformers_kernels::testutil::masks::{shape, DenseCase, WithMasks};
use vkformers_kernels::testutil::storage::{download, round, tol, upload};
use vkformers_kernels::testutil::{assert_close, assert_kernel_error, f64s, Rng, Tol, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, Context, Result, VkError};

type Case = DenseCase;

/// Every variant (d64, d128 with d = 80 and 128, d256 with d = 200 and 256), each option alone
/// and all together, tails of every kind (Tq, Tk not multiples of the 64- or 32-row tiles).
fn cases() -> Vec<Case> {
    vec![
        Case::new("size 1, d5", shape(1, 1, 1, 1, 1, 5)),
        Case::new("mha 70x70 d64", shape(1, 70, 70, 2, 2, 64)),
        Case::new("cross tq37 tk150 d64 B2", shape(2, 37, 150, 2, 2, 64)),
        Case::new("decode tq1 tk131 gqa 4:1 d128 causal", shape(2, 1, 131, 8, 2, 128)).causal(),
        Case::new("mqa 65x65 d128 causal", shape(2, 65, 65, 3, 1, 128)).causal(),
        Case::new("long 300x300 d128 causal amp 2", shape(1, 300, 300, 2, 2, 128)).causal().amp(2.0),
        Case::new("tq > tk causal (rows before the keys)", shape(1, 70, 20, 2, 1, 64)).causal(),
        Case::new("padding only", shape(2, 45, 100, 2, 2, 64)).padding(9, 30),
        Case::new("causal padding, fully padded rows", shape(2, 100, 100, 4, 2, 64)).causal().padding(9, 70),
        Case::new("window 20 causal", shape(1, 150, 150, 2, 1, 64)).causal().window(20),
        Case::new("window 10, not causal", shape(1, 90, 90, 2, 2, 64)).window(10),
        Case::new("softcap 5", shape(1, 50, 77, 2, 2, 128)).softcap(5.0).amp(3.0),
        Case::new("alibi, not causal", shape(1, 40, 100, 4, 4, 64)).alibi(),
        Case::new("alibi causal", shape(1, 100, 100, 4, 2, 64)).causal().alibi(),
        Case::new("d80 gqa causal (d128 variant)", shape(2, 67, 67, 4, 2, 80)).causal(),
        Case::new("d200 padded (d256 variant)", shape(1, 45, 50, 2, 1, 200)).causal().padding(7, 0),
        Case::new("d256 window", shape(1, 70, 70, 2, 2, 256)).causal().window(33),
        Case::new("chunk 48 causal (Llama 4)", shape(1, 150, 150, 2, 1, 64)).causal().chunk(48),
        Case::new("chunk 64 plain tiles", shape(1, 260, 260, 2, 1, 128)).causal().chunk(64),
        Case::new("chunk 20 window 30 decode", shape(1, 5, 90, 2, 1, 64)).causal().window(30).chunk(20),
        // Wholly visible tiles take the plain path (S scaled as one matrix) beside masked
        // ones; GQA with few workgroups sums dk/dv in parts (attention/sum_parts).
        Case::new("plain tiles causal gqa 8:1 d64 B2", shape(2, 200, 200, 8, 1, 64)).causal(),
        Case::new("plain tiles full gqa 4:1 d128", shape(1, 130, 130, 4, 1, 128)),
        Case::new("plain tiles window 100 causal", shape(1, 260, 260, 2, 1, 64)).causal().window(100),
        Case::new("plain tiles tq < tk causal d256", shape(1, 70, 140, 2, 2, 256)).causal(),
        Case::new("everything d80", shape(2, 77, 133, 4, 1, 80))
            .causal()
            .window(40)
            .softcap(5.0)
            .amp(2.0)
            .alibi()
            .padding(11, 13),
        // Learned sinks (gpt-oss, granite_swa): folded into lse by the forward; ds from
        // attention::sinks::backward on the cm2 backward's delta.
        Case::new("sinks gqa 4:1 d64 causal, fully padded rows", shape(2, 100, 100, 4, 1, 64))
            .causal()
            .padding(9, 70)
            .sinks(),
        Case::new("sinks window 40 d128 plain tiles", shape(1, 130, 130, 4, 2, 128)).causal().window(40).sinks(),
        Case::new("sinks everything d200", shape(2, 45, 77, 4, 2, 200))
            .causal()
            .window(30)
            .softcap(5.0)
            .alibi()
            .padding(5, 7)
            .sinks(),
    ]
}

/// Elements beyond `t` of `got` vs `want`, as (index, excess over the tolerance).
fn failures(got: &[f32], want: &[f64], t: Tol) -> Vec<(usize, f64)> {
    let excess = |(i, (&g, &w)): (usize, (&f32, &f64))| (i, (f64::from(g) - w).abs() - (t.abs + t.rel * w.abs()));
    got.iter().zip(want).enumerate().map(excess).filter(|&(_, e)| e > 0.0 || e.is_nan()).collect()
}

/// Compares and, on failure, first prints where the bad elements are (`at` names an index:
/// batch, query, head, ...) before `assert_close` panics with the worst one.
fn check(what: &str, got: &[f32], want: &[f64], t: Tol, at: impl Fn(usize) -> String) {
    let bad = failures(got, want, t);
    if !bad.is_empty() {
        let nan = got.iter().filter(|x| !x.is_finite()).count();
        let worst = bad.iter().copied().fold((0, f64::MIN), |a, b| if b.1 > a.1 || b.1.is_nan() { b } else { a });
        let first: Vec<String> =
            bad.iter().take(6).map(|&(i, _)| format!("{} got {} want {:.6}", at(i), got[i], want[i])).collect();
        eprintln!(
            "{what}: {} of {} elements beyond tol (abs {} rel {}), {nan} not finite; worst at {}: got {} want {}; \
             first: {}",
            bad.len(),
            got.len(),
            t.abs,
            t.rel,
            at(worst.0),
            got[worst.0],
            want[worst.0],
            first.join("; ")
        );
    }
    assert_close(what, got, want, t);
}

/// Names an element of a [B, T, H, D] tensor (o, dq: T = Tq, H = Hq; dk, dv: Tk, Hkv) by index,
/// with the tile of its row (`rows` per workgroup).
fn bthd(s: &Shape, t: usize, heads: usize, rows: usize) -> impl Fn(usize) -> String + '_ {
    move |n| {
        let (x, r) = (n % s.d, n / s.d);
        let (h, r) = (r % heads, r / heads);
        let (i, b) = (r % t, r / t);
        format!("[b {b}, row {i} (tile {}), head {h}, d {x}]", i / rows)
    }
}

/// Names an element of a [B, Hq, Tq] vector (lse, delta).
fn bht(s: &Shape, rows: usize) -> impl Fn(usize) -> String + '_ {
    move |n| {
        let (i, r) = (n % s.tq, n / s.tq);
        format!("[b {}, h {}, i {i} (tile {})]", r / s.hq, r % s.hq, i / rows)
    }
}

/// Rows per workgroup of the forward and bwd_dq (query tiles) and bwd_dkdv (key tiles) variants
/// for head dim `d` (see coopmat2.rs).
fn rows(d: usize) -> [usize; 3] {
    match d {
        0..=64 => [64, 64, 64],
        65..=128 => [64, 32, 32],
        _ => [32, 32, 32],
    }
}

/// A device tensor of `n` values of `dt`, uninitialised.
fn alloc(ctx: &Context, dt: DType, n: usize, what: &str) -> Result<Buffer> {
    ctx.buffer(n as u64 * dt.bytes(), what)
}

/// Runs `forward_cm2` (and, with `grads`, `backward_cm2` in the same batch) on a case and
/// compares o and lse (and delta, dq, dk, dv) with the reference.
fn check_case(ctx: &Context, case: &Case, seed: u64, dt: DType, grads: bool) -> Result<()> {
    let s = case.shape;
    let mut rng = Rng::new(seed);
    let q = round(dt, &rng.vec(s.q_len(), case.amp));
    let k = round(dt, &rng.vec(s.kv_len(), case.amp));
    let v = round(dt, &rng.vec(s.kv_len(), 1.0));
    let d_o = round(dt, &rng.vec(s.q_len(), 1.0));
    let (bq, bk, bv) = (upload(ctx, dt, &q, "q")?, upload(ctx, dt, &k, "k")?, upload(ctx, dt, &v, "v")?);
    let bdo = upload(ctx, dt, &d_o, "do")?;
    let kmask = case.kmask.as_ref().map(|m| ctx.buffer_from(m, "kmask")).transpose()?;
    let alibi = case.masks.slopes(s.hq).map(|sl| ctx.buffer_from(&sl, "slopes")).transpose()?;
    let sinks = case.masks.sink_values(s.hq).map(|sk| ctx.buffer_from(&sk, "sinks")).transpose()?;
    let ds_buf = ctx.buffer(s.hq as u64 * 4, "dsinks")?;
    let o_buf = alloc(ctx, dt, s.q_len(), "o")?;
    let lse_buf = ctx.buffer(s.lse_len() as u64 * 4, "lse")?;
    let delta_buf = ctx.buffer(s.lse_len() as u64 * 4, "delta")?;
    let (dq_buf, dk_buf, dv_buf) =
        (alloc(ctx, dt, s.q_len(), "dq")?, alloc(ctx, dt, s.kv_len(), "dk")?, alloc(ctx, dt, s.kv_len(), "dv")?);
    let gs = case.gpu_shape();
    let views = (kmask.as_ref().map(|b| b.view()), alibi.as_ref().map(|b| b.view()), sinks.as_ref().map(|b| b.view()));
    let opt = case.masks.fused(s.d, views, dt);
    let x = Qkv { q: bq.view(), k: bk.view(), v: bv.view() };
    let saved = Saved { o: o_buf.view(), lse: lse_buf.view() };
    let g = Grads { dq: dq_buf.view(), dk: dk_buf.view(), dv: dv_buf.view(), delta: delta_buf.view() };
    let scratch_len = backward_scratch_len(&gs, dt)?;
    let scratch = (scratch_len > 0).then(|| ctx.buffer(scratch_len * 4, "dkdv parts")).transpose()?;
    let mut rec = ctx.recorder(false)?;
    forward_cm2(&mut rec, &x, &saved, &gs, &opt)?;
    if grads {
        backward_cm2(&mut rec, &x, &saved, bdo.view(), &g, scratch.as_ref().map(|b| b.view()), &gs, &opt)?;
        if let Some(sk) = &sinks {
            attention::sinks::backward(&mut rec, (lse_buf.view(), delta_buf.view()), sk.view(), ds_buf.view(), &gs)?;
        }
    }
    rec.submit()?;

    // The reference reads the kernel's f32 scale, softcap, slopes and sinks, widened.
    let wide = case.masks.widened(s.hq);
    let ropt = reference::Options {
        scale: f64::from(opt.scale),
        softcap: f64::from(opt.softcap),
        ..case.masks.reference(0.0, case.kmask.as_deref(), &wide)
    };
    let [q, k, v, d_o] = [q, k, v, d_o].map(|x| f64s(&x));
    let (o, lse) = reference::forward(&q, &k, &v, &s, &ropt);
    let name = format!("{} {dt:?} {s:?}", case.name);
    let [fwd_rows, dq_rows, dkdv_rows] = rows(s.d);
    let o_gpu = download(ctx, dt, o_buf.view())?;
    check(&format!("{name}: o"), &o_gpu, &o, tol(dt), bthd(&s, s.tq, s.hq, fwd_rows));
    check(&format!("{name}: lse"), &ctx.read_vec::<f32>(lse_buf.view())?, &lse, TOL_F32, bht(&s, fwd_rows));
    if !grads {
        return Ok(());
    }
    // delta = rowsum(do ⊙ o) of the o the backward reads: the stored, rounded one.
    let delta = dense_grads::delta(&s, &f64s(&o_gpu), &d_o);
    let (dq, dk, dv) = reference::backward(&q, &k, &v, &d_o, &s, &ropt);
    check(&format!("{name}: delta"), &ctx.read_vec::<f32>(delta_buf.view())?, &delta, TOL_F32, bht(&s, dq_rows));
    check(&format!("{name}: dq"), &download(ctx, dt, dq_buf.view())?, &dq, tol(dt), bthd(&s, s.tq, s.hq, dq_rows));
    let kv_at = bthd(&s, s.tk, s.hkv, dkdv_rows);
    check(&format!("{name}: dk"), &download(ctx, dt, dk_buf.view())?, &dk, tol(dt), &kv_at);
    check(&format!("{name}: dv"), &download(ctx, dt, dv_buf.view())?, &dv, tol(dt), &kv_at);
    if let Some(sk) = &wide.sinks {
        // ds = -Σ delta e^(s - lse) over the delta of the stored o (see attention.rs).
        let ds = dense_grads::sinks_grad(&s, &delta, &lse, sk);
        check(&format!("{name}: dsinks"), &ctx.read_vec::<f32>(ds_buf.view())?, &ds, TOL_F32, |h| format!("[h {h}]"));
    }
    Ok(())
}

/// Every case in `dt`, forward only or forward and backward (`grads`).
fn run(dt: DType, grads: bool) {
    let what = if grads { "forward + backward" } else { "forward" };
    on_every_device(&format!("attention cm2 {what} {dt:?}"), |ctx| {
        let caps = ctx.caps();
        if !supported(caps, dt, 64) {
            eprintln!("attention cm2 {dt:?}: skipped: {} lacks cooperative matrix 2 (or {dt:?} in it)", caps.name);
            return Ok(());
        }
        for (n, case) in cases().iter().enumerate() {
            check_case(ctx, case, 500 + n as u64, dt, grads)?;
            eprintln!("attention cm2 {what} {dt:?}: {} ok", case.name);
        }
        Ok(())
    });
}

#[test]
fn cm2_forward_matches_reference_f16() {
    run(DType::F16, false);
}

#[test]
fn cm2_forward_matches_reference_bf16() {
    run(DType::BF16, false);
}

#[test]
fn cm2_backward_matches_reference_f16() {
    run(DType::F16, true);
}

#[test]
fn cm2_backward_matches_reference_bf16() {
    run(DType::BF16, true);
}

#[test]
fn cm2_errors_are_typed_and_name_the_kernel() {
    on_every_device("attention cm2 errors", |ctx| {
        let s = attention::Shape { batch: 1, tq: 3, tk: 4, hq: 4, hkv: 2, d: 8, dv: 8 };
        let q = ctx.buffer(3 * 4 * 8 * 2, "q")?;
        let kv = ctx.buffer(4 * 2 * 8 * 2, "kv")?;
        let lse = ctx.buffer(4 * 3 * 4, "lse")?;
        let x = Qkv { q: q.view(), k: kv.view(), v: kv.view() };
        let saved = Saved { o: q.view(), lse: lse.view() };
        let opt = attention::Options { dtype: DType::F16, ..attention::Options::new(8) };
        let mut rec = ctx.recorder(false)?;
        let expect = |e: VkError, kernel: &str, text: &str| assert_kernel_error(&e, kernel, text);
        let f32_opt = attention::Options { dtype: DType::F32, ..opt };
        expect(forward_cm2(&mut rec, &x, &saved, &s, &f32_opt).unwrap_err(), "attention/fwd_cm2", "f32");
        let big = attention::Shape { d: 257, ..s };
        expect(forward_cm2(&mut rec, &x, &saved, &big, &opt).unwrap_err(), "attention/fwd_cm2", "head dim");
        // delta is f32 [B, Hq, Tq] (48 bytes); q's 192-byte view is the wrong size.
        let grads = Grads { dq: q.view(), dk: kv.view(), dv: kv.view(), delta: q.view() };
        let bwd = |rec: &mut vkformers_vk::Recorder, s: &attention::Shape, opt: &attention::Options<'_>| {
            backward_cm2(rec, &x, &saved, q.view(), &grads, None, s, opt).unwrap_err()
        };
        expect(bwd(&mut rec, &s, &f32_opt), "attention/bwd_dq_cm2", "f32");
        if supported(ctx.caps(), DType::F16, 8) {
            expect(bwd(&mut rec, &s, &opt), "attention/bwd_dq_cm2:d64_f16_plain", "delta");
            let s3 = attention::Shape { hkv: 3, ..s };
            expect(forward_cm2(&mut rec, &x, &saved, &s3, &opt).unwrap_err(), "attention/fwd_cm2:d64_f16", "multiple");
            let bad_k = Qkv { k: q.view(), ..x };
            expect(
                forward_cm2(&mut rec, &bad_k, &saved, &s, &opt).unwrap_err(),
                "attention/fwd_cm2:d64_f16",
                "k [B, Tk",
            );
        } else {
            let e = forward_cm2(&mut rec, &x, &saved, &s, &opt).unwrap_err();
            expect(e, "attention/fwd_cm2:d64_f16", "lacks cooperative matrix 2");
            expect(bwd(&mut rec, &s, &opt), "attention/bwd_dq_cm2:d64_f16_plain", "lacks cooperative matrix 2");
        }
        assert!(rec.is_empty());
        rec.submit()?;
        Ok(())
    });
}

/// `norm::col_sum` into 16-bit storage (how bwd_dkdv_cm2's GQA partials become dk / dv) against
/// the host sum, in every storage type, with and without accumulating; it runs everywhere (no
/// cooperative matrix).
#[test]
fn col_sum_adds_the_parts_in_order_in_every_type() {
    on_every_device("col_sum", |ctx| {
        let (parts, n) = (3u32, 1001usize);
        let mut rng = Rng::new(7);
        let data = rng.vec(parts as usize * n, 1.0);
        let start = round(DType::BF16, &rng.vec(n, 1.0)); // exact in every type
        let partial = ctx.buffer_from(&data, "parts")?;
        for dt in [DType::F32, DType::F16, DType::BF16] {
            if dt != DType::F32 && !ctx.caps().fp16 {
                continue;
            }
            for accumulate in [false, true] {
                let sum = |i: usize| (0..parts as usize).map(|p| f64::from(data[p * n + i])).sum::<f64>();
                let want: Vec<f64> =
                    (0..n).map(|i| sum(i) + if accumulate { f64::from(start[i]) } else { 0.0 }).collect();
                let out = upload(ctx, dt, &start, "sum")?;
                let mut rec = ctx.recorder(false)?;
                vkformers_kernels::norm::col_sum(
                    &mut rec,
                    partial.view(),
                    out.view(),
                    parts,
                    n as u32,
                    accumulate,
                    dt,
                )?;
                rec.submit()?;
                let got = download(ctx, dt, out.view())?;
                assert_close(&format!("col_sum {dt:?} accumulate {accumulate}"), &got, &want, tol(dt));
            }
        }
        let out = alloc(ctx, DType::F32, n, "sum")?;
        let mut rec = ctx.recorder(false)?;
        let e = vkformers_kernels::norm::col_sum(&mut rec, partial.view(), out.view(), 4, n as u32, false, DType::F32)
            .unwrap_err();
        assert!(e.to_string().contains("norm/col_sum") && e.to_string().contains("4 blocks"), "{e}");
        Ok(())
    });
}
