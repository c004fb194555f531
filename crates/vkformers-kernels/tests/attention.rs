//! Fused attention: the f64 reference backward against finite differences, and the GPU forward
//! and backward against the reference on odd shapes with every option, on every device; in f32,
//! and in f16 / bf16 storage (inputs rounded on the host, the reference computed on the rounded
//! values; 16-bit outputs compared with that type's tolerance, lse and delta with f32's).

use vkformers_kernels::attention::reference::{self, Shape};
use vkformers_kernels::attention::{self, Grads, Qkv, Saved};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::testutil::dense_grads;
use vkformers_kernels::testutil::masks::{shape, DenseCase, WithMasks};
use vkformers_kernels::testutil::storage::{alloc, read, round, supported, tol, upload};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, assert_kernel_error, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result, VkError};

type Case = DenseCase;

/// `shape` with a value head dim `dv` other than the q/k one (multi-head latent attention).
fn with_dv(s: Shape, dv: usize) -> Shape {
    Shape { dv, ..s }
}

/// Random q, k, v, do (f32) of a case.
fn data(case: &Case, seed: u64) -> [Vec<f32>; 4] {
    let s = &case.shape;
    let mut rng = Rng::new(seed);
    let q = rng.vec(s.q_len(), case.amp);
    let k = rng.vec(s.kv_len(), case.amp);
    let v = rng.vec(s.v_len(), 1.0);
    let d_o = rng.vec(s.o_len(), 1.0);
    [q, k, v, d_o]
}

// ---------------------------------------------------------------- reference vs finite differences

fn check_reference_grads(case: &Case) {
    let s = case.shape;
    let wide = case.widened();
    let opt = case.options(&wide);
    let [q, k, v, w] = data(case, 7).map(|x| f64s(&x));
    let (dq, dk, dv) = reference::backward(&q, &k, &v, &w, &s, &opt);
    // L = Σ o ⊙ w, so dL/do = w.
    let loss = |q: &[f64], k: &[f64], v: &[f64]| -> f64 {
        let (o, _) = reference::forward(q, k, v, &s, &opt);
        o.iter().zip(&w).map(|(a, b)| a * b).sum()
    };
    assert_grad_matches_fd(&format!("{}: dq", case.name), |x| loss(x, &k, &v), &q, &dq);
    assert_grad_matches_fd(&format!("{}: dk", case.name), |x| loss(&q, x, &v), &k, &dk);
    assert_grad_matches_fd(&format!("{}: dv", case.name), |x| loss(&q, &k, x), &v, &dv);
    if let Some(sinks) = &wide.sinks {
        let ds = reference::sinks_backward(&q, &k, &v, &w, &s, &opt);
        let loss_s = |x: &[f64]| {
            let (o, _) = reference::forward(&q, &k, &v, &s, &reference::Options { sinks: Some(x), ..opt });
            o.iter().zip(&w).map(|(a, b)| a * b).sum()
        };
        assert_grad_matches_fd(&format!("{}: dsinks", case.name), loss_s, sinks, &ds);
    }
}

fn small_cases() -> Vec<Case> {
    vec![
        Case::new("mha", shape(1, 4, 4, 2, 2, 3)),
        Case::new("gqa causal", shape(2, 5, 5, 4, 2, 3)).causal(),
        Case::new("decode causal", shape(1, 2, 5, 2, 1, 3)).causal(),
        Case::new("causal padding", shape(2, 4, 4, 2, 1, 2)).causal().padding(1, 2),
        Case::new("window", shape(1, 6, 6, 2, 1, 2)).causal().window(2),
        Case::new("chunk", shape(1, 7, 7, 2, 1, 2)).causal().chunk(3),
        Case::new("softcap", shape(1, 4, 5, 2, 2, 3)).softcap(2.0).amp(3.0),
        Case::new("alibi", shape(1, 4, 4, 3, 1, 2)).causal().alibi(),
        Case::new("everything", shape(2, 3, 6, 4, 2, 2)).causal().window(3).softcap(1.5).amp(2.0).alibi().padding(1, 1),
        Case::new("sinks gqa causal", shape(2, 5, 5, 4, 2, 3)).causal().sinks(),
        Case::new("sinks window padding", shape(2, 6, 6, 2, 1, 2)).causal().window(3).padding(1, 2).sinks(),
        Case::new("dv 5 > d 3 gqa causal", with_dv(shape(2, 4, 5, 4, 2, 3), 5)).causal(),
        Case::new("dv 2 < d 3 sinks", with_dv(shape(1, 4, 4, 2, 1, 3), 2)).sinks(),
    ]
}

#[test]
fn reference_backward_matches_finite_differences() {
    for case in small_cases() {
        check_reference_grads(&case);
    }
}

#[test]
fn reference_handles_fully_masked_rows() {
    // Batch 1 is left-padded by 3: with causal masking its queries 0..3 see no key.
    let case = Case::new("masked rows", shape(2, 5, 5, 2, 1, 3)).causal().padding(0, 3);
    let s = case.shape;
    let [q, k, v, w] = data(&case, 3).map(|x| f64s(&x));
    let wide = case.widened();
    let (o, lse) = reference::forward(&q, &k, &v, &s, &case.options(&wide));
    let (dq, _, _) = reference::backward(&q, &k, &v, &w, &s, &case.options(&wide));
    for h in 0..s.hq {
        for i in 0..3 {
            assert_eq!(lse[(s.hq + h) * s.tq + i], reference::LSE_MASKED);
            let at = ((s.tq + i) * s.hq + h) * s.d;
            assert!(o[at..at + s.d].iter().chain(&dq[at..at + s.d]).all(|&x| x == 0.0));
        }
    }
    assert!(o.iter().chain(&lse).all(|x| x.is_finite()));
    // With sinks the sink takes all of such a row's weight: o = 0 and lse = s_h.
    let case = case.sinks();
    let wide = case.widened();
    let (o, lse) = reference::forward(&q, &k, &v, &s, &case.options(&wide));
    for h in 0..s.hq {
        for i in 0..3 {
            assert_eq!(lse[(s.hq + h) * s.tq + i], wide.sinks.as_ref().unwrap()[h]);
            let at = ((s.tq + i) * s.hq + h) * s.d;
            assert!(o[at..at + s.d].iter().all(|&x| x == 0.0));
        }
    }
}

// ---------------------------------------------------------------- GPU vs reference

/// Runs forward and backward on the GPU in one batch and compares o, lse, delta, dq, dk, dv
/// with the f64 reference; q, k, v, do, o, dq, dk, dv are stored in `dt`.
fn check_gpu(ctx: &Context, case: &Case, seed: u64, dt: DType) -> Result<()> {
    let s = case.shape;
    let gs = case.gpu_shape();
    let [q, k, v, d_o] = data(case, seed).map(|x| round(dt, &x));
    let bq = upload(ctx, dt, &q, "q")?;
    let bk = upload(ctx, dt, &k, "k")?;
    let bv = upload(ctx, dt, &v, "v")?;
    let bdo = upload(ctx, dt, &d_o, "do")?;
    let kmask = case.kmask.as_ref().map(|m| ctx.buffer_from(m, "kmask")).transpose()?;
    let slopes = case.masks.slopes(s.hq).map(|sl| ctx.buffer_from(&sl, "slopes")).transpose()?;
    let sinks = case.masks.sink_values(s.hq).map(|sk| ctx.buffer_from(&sk, "sinks")).transpose()?;
    let bds = ctx.buffer((s.hq * 4) as u64, "dsinks")?;
    let lbytes = (s.lse_len() * 4) as u64;
    let bo = alloc(ctx, dt, s.o_len(), "o")?;
    let blse = ctx.buffer(lbytes, "lse")?;
    let bdq = alloc(ctx, dt, s.q_len(), "dq")?;
    let bdk = alloc(ctx, dt, s.kv_len(), "dk")?;
    let bdv = alloc(ctx, dt, s.v_len(), "dv")?;
    let bdelta = ctx.buffer(lbytes, "delta")?;

    let views = (kmask.as_ref().map(|b| b.view()), slopes.as_ref().map(|b| b.view()), sinks.as_ref().map(|b| b.view()));
    let opt = case.masks.fused(s.d, views, dt);
    let x = Qkv { q: bq.view(), k: bk.view(), v: bv.view() };
    let saved = Saved { o: bo.view(), lse: blse.view() };
    let grads = Grads { dq: bdq.view(), dk: bdk.view(), dv: bdv.view(), delta: bdelta.view() };
    let mut rec = ctx.recorder(false)?;
    attention::forward(&mut rec, &x, &saved, &gs, &opt)?;
    attention::backward(&mut rec, &x, &saved, bdo.view(), &grads, &gs, &opt)?;
    if let Some(sk) = &sinks {
        attention::sinks::backward(&mut rec, (blse.view(), bdelta.view()), sk.view(), bds.view(), &gs)?;
    }
    rec.submit()?;

    // The reference sees exactly the data as stored (and the f32 slopes and scale).
    let wide = case.widened();
    let ropt = reference::Options { scale: f64::from(opt.scale), ..case.options(&wide) };
    let [q, k, v, d_o] = [q, k, v, d_o].map(|x| f64s(&x));
    let (o, lse) = reference::forward(&q, &k, &v, &s, &ropt);
    let (dq, dk, dv) = reference::backward(&q, &k, &v, &d_o, &s, &ropt);
    let o_gpu = read(ctx, dt, &bo)?;
    // delta = rowsum(do ⊙ o) of the o the backward reads: the stored one in 16 bits (rounded).
    let o_seen = if dt == DType::F32 { o.clone() } else { f64s(&o_gpu) };
    let delta = dense_grads::delta(&s, &o_seen, &d_o);
    let name = format!("{} {dt:?}", case.name);
    assert_close(&format!("{name}: o"), &o_gpu, &o, tol(dt));
    assert_close(&format!("{name}: lse"), &ctx.read_vec::<f32>(blse.view())?, &lse, TOL_F32);
    assert_close(&format!("{name}: delta"), &ctx.read_vec::<f32>(bdelta.view())?, &delta, TOL_F32);
    assert_close(&format!("{name}: dq"), &read(ctx, dt, &bdq)?, &dq, tol(dt));
    assert_close(&format!("{name}: dk"), &read(ctx, dt, &bdk)?, &dk, tol(dt));
    assert_close(&format!("{name}: dv"), &read(ctx, dt, &bdv)?, &dv, tol(dt));
    if let Some(sk) = &wide.sinks {
        // ds from the delta the GPU sees (16-bit o), which in f32 is the reference's own.
        let ds = dense_grads::sinks_grad(&s, &delta, &lse, sk);
        if dt == DType::F32 {
            assert_close(
                &format!("{name}: ds formula"),
                &ds.iter().map(|&x| x as f32).collect::<Vec<_>>(),
                &reference::sinks_backward(&q, &k, &v, &d_o, &s, &ropt),
                TOL_F32,
            );
        }
        assert_close(&format!("{name}: dsinks"), &ctx.read_vec::<f32>(bds.view())?, &ds, TOL_F32);
    }
    Ok(())
}

fn run_cases(test: &str, cases: &[Case]) {
    run_cases_in(test, cases, DType::F32);
}

fn run_cases_in(test: &str, cases: &[Case], dt: DType) {
    on_every_device(&format!("{test} {dt:?}"), |ctx| {
        if !supported(ctx, dt, test) {
            return Ok(());
        }
        for (n, case) in cases.iter().enumerate() {
            check_gpu(ctx, case, 100 + n as u64, dt)?;
        }
        Ok(())
    });
}

/// Every option at once: causal, window, softcap (large scores), ALiBi and padding.
fn everything() -> Case {
    Case::new("everything", shape(2, 17, 17, 4, 1, 16)).causal().window(6).softcap(5.0).amp(2.0).alibi().padding(3, 2)
}

/// Every kernel variant (d64, d128, d256) and option in 16-bit storage: fewer cases than f32.
fn cases_16bit() -> Vec<Case> {
    vec![
        Case::new("gqa 13x13 d8 causal", shape(2, 13, 13, 4, 2, 8)).causal(),
        Case::new("mha cross 7x19 d5", shape(1, 7, 19, 2, 2, 5)),
        Case::new("size 1", shape(1, 1, 1, 1, 1, 1)),
        Case::new("decode tq3 tk40 padded", shape(2, 3, 40, 2, 1, 8)).causal().padding(5, 7),
        everything(),
        Case::new("d64 t37", shape(2, 37, 37, 4, 2, 64)).causal(),
        Case::new("d80 (d128 variant)", shape(2, 19, 21, 2, 1, 80)).causal(),
        Case::new("d200 (d256 variant)", shape(1, 11, 13, 2, 1, 200)).causal().padding(2, 0),
        Case::new("sinks window padding", shape(2, 17, 17, 4, 2, 16)).causal().window(5).padding(2, 3).sinks(),
    ]
}

#[test]
fn gpu_matches_reference_f16() {
    run_cases_in("attention 16-bit", &cases_16bit(), DType::F16);
}

#[test]
fn gpu_matches_reference_bf16() {
    run_cases_in("attention 16-bit", &cases_16bit(), DType::BF16);
}

#[test]
fn gpu_matches_reference_plain_gqa_mqa() {
    run_cases(
        "attention plain",
        &[
            Case::new("gqa 13x13 d8", shape(2, 13, 13, 4, 2, 8)),
            Case::new("gqa 13x13 d8 causal", shape(2, 13, 13, 4, 2, 8)).causal(),
            Case::new("mqa d16", shape(2, 11, 11, 3, 1, 16)).causal(),
            Case::new("mha cross 7x19 d5", shape(1, 7, 19, 2, 2, 5)),
            Case::new("size 1", shape(1, 1, 1, 1, 1, 1)),
            Case::new("d64 t37", shape(2, 37, 37, 4, 2, 64)).causal(),
        ],
    );
}

#[test]
fn gpu_matches_reference_decode_and_masks() {
    run_cases(
        "attention masks",
        &[
            Case::new("decode tq1 tk9", shape(2, 1, 9, 4, 2, 16)).causal(),
            Case::new("decode tq3 tk40 padded", shape(2, 3, 40, 2, 1, 8)).causal().padding(5, 7),
            Case::new("causal padding, fully padded rows", shape(2, 11, 11, 4, 2, 8)).causal().padding(2, 3),
            Case::new("padding only", shape(2, 9, 13, 2, 2, 8)).padding(4, 1),
            Case::new("tq > tk causal (rows before the keys)", shape(1, 6, 3, 2, 1, 8)).causal(),
            Case::new("sliding window 4", shape(2, 13, 13, 4, 2, 8)).causal().window(4),
            Case::new("window 5 long", shape(1, 45, 45, 2, 1, 16)).causal().window(5),
            Case::new("window, not causal", shape(1, 10, 10, 2, 2, 8)).window(3),
        ],
    );
}

#[test]
fn gpu_matches_reference_softcap_alibi() {
    run_cases(
        "attention softcap alibi",
        &[
            Case::new("softcap 5", shape(2, 13, 13, 4, 2, 8)).causal().softcap(5.0).amp(3.0),
            Case::new("alibi", shape(2, 13, 13, 4, 2, 8)).causal().alibi(),
            Case::new("alibi, not causal", shape(1, 9, 14, 3, 3, 16)).alibi(),
            everything(),
        ],
    );
}

#[test]
fn gpu_matches_reference_sinks() {
    run_cases(
        "attention sinks",
        &[
            Case::new("sinks gqa 13x13 d8 causal", shape(2, 13, 13, 4, 2, 8)).causal().sinks(),
            Case::new("sinks cross 7x19 d5", shape(1, 7, 19, 3, 1, 5)).sinks(),
            Case::new("sinks, fully padded rows", shape(2, 11, 11, 4, 2, 8)).causal().padding(2, 3).sinks(),
            Case::new("sinks window 4 softcap alibi", shape(2, 13, 13, 4, 1, 8))
                .causal()
                .window(4)
                .softcap(5.0)
                .amp(3.0)
                .alibi()
                .sinks(),
            Case::new("sinks d80 (d128 variant)", shape(1, 19, 21, 2, 1, 80)).causal().sinks(),
            Case::new("sinks d200 (d256 variant)", shape(1, 11, 13, 2, 1, 200)).causal().window(5).sinks(),
        ],
    );
}

#[test]
fn gpu_matches_reference_large_head_dims() {
    run_cases(
        "attention large d",
        &[
            Case::new("d80 (d128 variant)", shape(2, 19, 21, 2, 1, 80)).causal(),
            Case::new("d128", shape(1, 17, 17, 2, 2, 128)).softcap(5.0).amp(1.0).alibi(),
            Case::new("d200 (d256 variant)", shape(1, 11, 13, 2, 1, 200)).causal().padding(2, 0),
            Case::new("d256", shape(1, 9, 9, 2, 2, 256)).causal().window(4),
            Case::new("d320 (d576 variant)", shape(1, 10, 11, 2, 1, 320)).causal().padding(2, 0),
            Case::new("d576 (MLA absorbed 512 + 64)", shape(1, 9, 9, 2, 1, 576)).causal().window(6),
            Case::new("d576 dv512 sinks", with_dv(shape(1, 5, 7, 2, 1, 576), 512)).sinks(),
        ],
    );
}

#[test]
fn gpu_matches_reference_chunked() {
    // Llama 4's chunked attention: chunks not a multiple of the key/query tiles, decode rows
    // (tq < tk: the query chunk is that of its absolute position), with a window, not causal.
    run_cases(
        "attention chunked",
        &[
            Case::new("chunk 5 gqa causal", shape(2, 23, 23, 4, 2, 8)).causal().chunk(5),
            Case::new("chunk 13 long", shape(1, 45, 45, 2, 1, 16)).causal().chunk(13),
            Case::new("chunk 7 decode tq3 tk40 padded", shape(2, 3, 40, 2, 1, 8)).causal().chunk(7).padding(5, 7),
            Case::new("chunk 6 window 4", shape(1, 19, 19, 2, 2, 8)).causal().chunk(6).window(4),
            Case::new("chunk 4 not causal", shape(1, 10, 10, 2, 2, 8)).chunk(4),
            Case::new("chunk 3 tq > tk", shape(1, 8, 5, 2, 1, 8)).causal().chunk(3),
            Case::new("chunk 9 sinks d80", shape(1, 19, 21, 2, 1, 80)).causal().chunk(9).sinks(),
            Case::new("chunk 4 d320", shape(1, 10, 11, 2, 1, 320)).causal().chunk(4),
        ],
    );
    run_cases_in(
        "attention chunked 16-bit",
        &[Case::new("chunk 5 bf16", shape(2, 23, 23, 4, 2, 8)).causal().chunk(5)],
        DType::BF16,
    );
}

#[test]
fn gpu_matches_reference_value_dim_differs() {
    // Multi-head latent attention: v and o of Dv columns, q and k of D (both sides of D, every
    // head-dim class the wider one picks, odd sizes).
    run_cases(
        "attention dv != d",
        &[
            Case::new("d3 dv5 gqa causal", with_dv(shape(2, 13, 13, 4, 2, 3), 5)).causal(),
            Case::new("d24 dv16 (MLA-like) causal", with_dv(shape(2, 11, 11, 3, 3, 24), 16)).causal(),
            Case::new("d7 dv40 cross, padding", with_dv(shape(2, 7, 19, 2, 1, 7), 40)).padding(3, 2),
            Case::new("d72 dv48 (d128) window sinks", with_dv(shape(1, 17, 17, 2, 1, 72), 48))
                .causal()
                .window(5)
                .sinks(),
            Case::new("d40 dv136 (d256) decode", with_dv(shape(1, 3, 21, 4, 1, 40), 136)).causal(),
        ],
    );
    run_cases_in(
        "attention dv != d 16-bit",
        &[
            Case::new("d24 dv16 f16", with_dv(shape(2, 11, 11, 3, 3, 24), 16)).causal(),
            Case::new("d330 dv300 f16 (d576)", with_dv(shape(1, 7, 9, 2, 1, 330), 300)).causal(),
        ],
        DType::F16,
    );
}

#[test]
fn forward_is_deterministic_and_backward_repeatable() {
    // Same inputs twice in one batch: bit-identical gradients (no atomics, fixed order).
    on_every_device("attention determinism", |ctx| {
        let case = Case::new("gqa", shape(2, 21, 21, 4, 2, 16)).causal();
        let s = case.gpu_shape();
        let [q, k, v, d_o] = data(&case, 9);
        let bufs: Vec<_> = [&q, &k, &v, &d_o].iter().map(|x| ctx.buffer_from(x, "in")).collect::<Result<_>>()?;
        let qb = (case.shape.q_len() * 4) as u64;
        let kb = (case.shape.kv_len() * 4) as u64;
        let lb = (case.shape.lse_len() * 4) as u64;
        let opt = attention::Options { causal: true, ..attention::Options::new(s.d) };
        let x = Qkv { q: bufs[0].view(), k: bufs[1].view(), v: bufs[2].view() };
        let mut outs = Vec::new();
        for _ in 0..2 {
            let o = ctx.buffer(qb, "o")?;
            let lse = ctx.buffer(lb, "lse")?;
            let g = [ctx.buffer(qb, "dq")?, ctx.buffer(kb, "dk")?, ctx.buffer(kb, "dv")?, ctx.buffer(lb, "delta")?];
            let mut rec = ctx.recorder(false)?;
            let saved = Saved { o: o.view(), lse: lse.view() };
            attention::forward(&mut rec, &x, &saved, &s, &opt)?;
            let grads = Grads { dq: g[0].view(), dk: g[1].view(), dv: g[2].view(), delta: g[3].view() };
            attention::backward(&mut rec, &x, &saved, bufs[3].view(), &grads, &s, &opt)?;
            rec.submit()?;
            let mut all: Vec<f32> = ctx.read_vec(o.view())?;
            for b in &g {
                all.extend(ctx.read_vec::<f32>(b.view())?);
            }
            outs.push(all);
        }
        assert!(outs[0].iter().zip(&outs[1]).all(|(a, b)| a.to_bits() == b.to_bits()));
        Ok(())
    });
}

#[test]
fn bad_shapes_are_typed_errors_naming_the_kernel() {
    on_every_device("attention errors", |ctx| {
        let s = attention::Shape { batch: 1, tq: 3, tk: 4, hq: 4, hkv: 2, d: 8, dv: 8 };
        let q = ctx.buffer(3 * 4 * 8 * 4, "q")?;
        let kv = ctx.buffer(4 * 2 * 8 * 4, "kv")?;
        let lse = ctx.buffer(4 * 3 * 4, "lse")?;
        let o = ctx.buffer(3 * 4 * 8 * 4, "o")?;
        let x = Qkv { q: q.view(), k: kv.view(), v: kv.view() };
        let saved = Saved { o: o.view(), lse: lse.view() };
        let opt = attention::Options::new(8);
        let mut rec = ctx.recorder(false)?;
        let expect = |e: VkError, kernel: &str, text: &str| assert_kernel_error(&e, kernel, text);
        let bad_k = Qkv { k: q.view(), ..x };
        expect(attention::forward(&mut rec, &bad_k, &saved, &s, &opt).unwrap_err(), "attention/fwd:d64", "k [B, Tk");
        let s3 = attention::Shape { hkv: 3, ..s };
        expect(attention::forward(&mut rec, &x, &saved, &s3, &opt).unwrap_err(), "attention/fwd:d64", "multiple");
        let s_big = attention::Shape { d: 577, ..s };
        expect(attention::forward(&mut rec, &x, &saved, &s_big, &opt).unwrap_err(), "attention/fwd", "head dim");
        // v sized for Dv = 8, the shape says 6.
        let s_dv = attention::Shape { dv: 6, ..s };
        expect(attention::forward(&mut rec, &x, &saved, &s_dv, &opt).unwrap_err(), "attention/fwd:d64", "v [B, Tk");
        let bad_mask = attention::Options { kmask: Some(lse.view()), ..opt };
        expect(attention::forward(&mut rec, &x, &saved, &s, &bad_mask).unwrap_err(), "attention/fwd:d64", "kmask");
        // The f32-sized q is twice what bf16 needs.
        let bf = attention::Options { dtype: DType::BF16, ..opt };
        expect(attention::forward(&mut rec, &x, &saved, &s, &bf).unwrap_err(), "attention/fwd:d64_bf16", "q [B, Tq");
        let grads = Grads { dq: o.view(), dk: kv.view(), dv: kv.view(), delta: o.view() };
        expect(
            attention::backward(&mut rec, &x, &saved, o.view(), &grads, &s, &opt).unwrap_err(),
            "attention/bwd_dq:d64",
            "delta",
        );
        assert!(rec.is_empty());
        rec.submit()?;
        Ok(())
    });
}
