//! The engine running the device one step ahead of the host (`Engine::set_lookahead`, on by
//! default) gives every request the tokens of the synchronous engine: prompts of different
//! lengths joining at different steps, rows finishing at different steps (EOS, a stop from the
//! sink, `max_new_tokens`, one on its first token), greedy and seeded sampling with penalties and
//! log-probabilities, a request only the host can choose for (the engine falls back to
//! synchronous steps while it runs), and cancelled requests whose choices were in flight; every
//! KV block comes back.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;

use vkformers_generate::engine::{Engine, Request, RequestOptions};
use vkformers_generate::generation::{Finish, GenerateOptions};
use vkformers_generate::{Penalties, SamplingParams, TokenLogprob};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

use common::sink::Gather;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// Prompt i: `3 + (7 i mod 17)` tokens, so lengths differ and some repeat.
fn prompt(i: usize) -> Vec<u32> {
    (0..3 + (7 * i) % 17).map(|j| ((5 + 11 * i + 3 * j) % 120) as u32).collect()
}

/// Request i's options: greedy, seeded sampling, sampling with every penalty and log-probabilities,
/// greedy with a repetition penalty; `max_new_tokens` from 1 to 16.
fn options(i: usize) -> RequestOptions {
    let mut o = RequestOptions::from_generate(&GenerateOptions::greedy([7, 12, 16, 1, 9, 14, 5, 11, 8][i % 9]));
    let sampling = SamplingParams::sampling();
    o.seed = 500 + i as u64;
    o.row = (i % 2) as u32;
    match i % 4 {
        1 => o.params = SamplingParams { temperature: 1.4, top_k: 30, ..sampling },
        2 => {
            o.params = SamplingParams { temperature: 0.8, top_p: 0.9, repetition_penalty: 1.3, ..sampling };
            o.penalties = Penalties { presence: 0.6, frequency: 0.4 };
            o.logprobs = Some(3);
        }
        3 => {
            o.params = SamplingParams { repetition_penalty: 1.5, ..SamplingParams::greedy() };
            o.logprobs = Some(2);
        }
        _ => {}
    }
    o
}

/// A run: requests `(join step, request)`, cancels `(step, id)` before that step.
struct Plan {
    requests: Vec<(usize, Request)>,
    cancels: Vec<(usize, u64)>,
    stops: HashMap<u64, usize>,
}

/// Runs `plan` through an engine of `max_batch` slots; the sink's record and the steps run ahead.
fn run(g: &Graph<'_>, model: &Model, max_batch: usize, ahead: bool, plan: &Plan) -> (Gather, usize) {
    let mut engine = Engine::new(g, model, max_batch, 32).unwrap();
    engine.set_lookahead(ahead);
    let mut out = Gather { stops: plan.stops.clone(), ..Gather::default() };
    let last_join = plan.requests.iter().map(|r| r.0).max().unwrap_or(0);
    for step in 0.. {
        for (_, r) in plan.requests.iter().filter(|r| r.0 == step) {
            engine.submit(r.clone()).unwrap();
        }
        for &(_, id) in plan.cancels.iter().filter(|c| c.0 == step) {
            engine.cancel(id);
        }
        if engine.is_idle() && step > last_join {
            break;
        }
        engine.step(g, &mut out).unwrap();
    }
    assert_eq!(engine.blocks_in_use().0, 0, "every request gave its KV blocks back");
    (out, engine.steps_ahead())
}

/// Every request of `plan` but the cancelled ones ends as in the synchronous engine: same tokens,
/// same finish, same log-probabilities' tokens (their values to rounding: the two engines batch
/// the rows differently).
fn assert_same(plan: &Plan, ahead: &Gather, sync: &Gather) {
    let cancelled: Vec<u64> = plan.cancels.iter().map(|c| c.1).collect();
    for (_, r) in plan.requests.iter().filter(|r| !cancelled.contains(&r.1.id)) {
        let id = r.id;
        let (a, s) = (&ahead.done[&id], &sync.done[&id]);
        assert_eq!((&a.tokens, a.finish), (&s.tokens, s.finish), "request {id}: ahead vs synchronous");
        let (la, ls) = (ahead.logprobs.get(&id), sync.logprobs.get(&id));
        assert_eq!(la.map(Vec::len), ls.map(Vec::len), "request {id}: log-probabilities reported");
        for (x, y) in la.into_iter().flatten().zip(ls.into_iter().flatten()) {
            let ids = |t: &TokenLogprob| t.top.iter().map(|p| p.0).collect::<Vec<_>>();
            assert_eq!((x.token, ids(x)), (y.token, ids(y)), "request {id}");
            assert!((x.logprob - y.logprob).abs() < 1e-4, "request {id}: {} vs {}", x.logprob, y.logprob);
        }
    }
}

/// Nine requests of every kind joining over eight steps into four slots; request 2 ends on an EOS
/// (its own fourth token), request 4 is stopped by the sink at its fifth, request 3 asks for one
/// token (it ends on its prefill's); `host` adds a request whose 25 alternatives only the host
/// reports, joining at step 6.
fn plan(eos: Option<u32>, host: bool) -> Plan {
    let join = [0, 0, 1, 1, 2, 4, 5, 8, 8];
    let mut requests: Vec<(usize, Request)> =
        (0..9).map(|i| (join[i], Request { id: i as u64, prompt: prompt(i), opts: options(i) })).collect();
    requests[2].1.opts.eos = eos.into_iter().collect();
    if host {
        let mut opts = options(1);
        opts.logprobs = Some(25);
        requests.push((6, Request { id: 9, prompt: prompt(9), opts }));
    }
    Plan { requests, cancels: Vec::new(), stops: HashMap::from([(4, 5)]) }
}

#[test]
fn running_ahead_gives_every_request_the_synchronous_engines_tokens() {
    on_every_device("engine lookahead", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("qwen2")).unwrap();
        let (probe, _) = run(&g, &model, 4, false, &plan(None, false));
        let eos = probe.done[&2].tokens[3];
        let mut all_ahead = 0;
        for host in [false, true] {
            let plan = plan(Some(eos), host);
            let (sync, none) = run(&g, &model, 4, false, &plan);
            let (ahead, steps) = run(&g, &model, 4, true, &plan);
            assert_eq!(none, 0, "switched off, no step runs ahead");
            if host {
                // Steps 0-6 run ahead, then synchronous ones while the host's request waits and runs.
                assert!(steps > 0 && steps < all_ahead, "{steps} of {all_ahead} steps ahead");
            } else {
                assert!(steps >= 10, "{steps} steps ahead");
                all_ahead = steps;
            }
            assert_same(&plan, &ahead, &sync);
            assert_eq!(ahead.done[&2].finish, Finish::Eos);
            assert!(ahead.done[&2].tokens.len() <= 4);
            assert_eq!((ahead.done[&4].finish, ahead.done[&4].tokens.len()), (Finish::Stopped, 5));
            assert_eq!(ahead.done[&3].tokens.len(), 1);
            assert_eq!(ahead.done.len(), plan.requests.len());
        }
        Ok(())
    });
}

#[test]
fn greedy_rows_through_few_slots_run_ahead_on_the_argmax() {
    on_every_device("engine lookahead greedy", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("llama")).unwrap();
        let requests = (0..7)
            .map(|i| {
                let opts = RequestOptions::from_generate(&GenerateOptions::greedy(2 + (5 * i) % 11));
                (0, Request { id: i as u64, prompt: prompt(i), opts })
            })
            .collect();
        let plan = Plan { requests, cancels: Vec::new(), stops: HashMap::new() };
        let (sync, _) = run(&g, &model, 3, false, &plan);
        let (ahead, steps) = run(&g, &model, 3, true, &plan);
        assert!(steps >= 10, "{steps} steps ahead");
        assert_same(&plan, &ahead, &sync);
        Ok(())
    });
}

#[test]
fn a_request_cancelled_with_its_choice_in_flight_gives_its_slot_cleanly() {
    on_every_device("engine lookahead cancel", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("llama")).unwrap();
        let requests = (0..4)
            .map(|i| (0, Request { id: i as u64, prompt: prompt(i), opts: options(i % 3).clone() }))
            .map(|(j, mut r)| {
                r.opts.max_new_tokens = 20;
                (j, r)
            })
            .collect();
        // Request 0 is cancelled while its step is in flight; request 2 then takes its slot and is
        // cancelled with its prefill in flight (before the host saw its first token); request 3
        // takes the slot after it.
        let plan = Plan { requests, cancels: vec![(3, 0), (4, 2)], stops: HashMap::new() };
        let (sync, _) = run(&g, &model, 2, false, &plan);
        let (ahead, steps) = run(&g, &model, 2, true, &plan);
        assert!(steps >= 10, "{steps} steps ahead");
        assert_same(&plan, &ahead, &sync);
        assert!(!ahead.done.contains_key(&0) && !ahead.done.contains_key(&2), "cancelled requests are not finished");
        assert_eq!(ahead.seen.get(&2), None, "the choice in flight for a cancelled request is dropped");
        assert!(ahead.seen[&0] >= 1, "request 0 ran before its cancel");
        Ok(())
    });
}
