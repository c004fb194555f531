//! How many prefill forwards the engine runs for requests arriving together or nearly together
//! (each prefill forward stalls every running row's decode): requests queued before a step share
//! one forward; the successors of rows finishing on one step, sent by their clients one or two
//! steps later, share one too (a request arriving while rows run is held one step,
//! `Engine::set_admission_hold`); a lone request waits at most that one step. With the lookahead
//! on and off; the tokens do not depend on the hold.

use std::collections::HashMap;
use std::path::PathBuf;

use vkformers_generate::engine::{Engine, Finished, Request, RequestOptions, Sink};
use vkformers_generate::generation::GenerateOptions;
use vkformers_generate::TokenLogprob;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// The step at which each request got its first token and finished, and its tokens.
#[derive(Default)]
struct Steps {
    step: usize,
    first: HashMap<u64, usize>,
    finished: HashMap<u64, usize>,
    tokens: HashMap<u64, Vec<u32>>,
}

impl Sink for Steps {
    fn token(&mut self, id: u64, _new: &[u32], _logprob: Option<&TokenLogprob>) -> bool {
        self.first.entry(id).or_insert(self.step);
        false
    }

    fn finished(&mut self, id: u64, done: Finished) {
        self.finished.insert(id, self.step);
        self.tokens.insert(id, done.tokens);
    }
}

/// Request `id`: a greedy prompt of 2 to 12 tokens (one prefill width: any of them may share a
/// forward) asking for `max_new` tokens, no EOS.
fn request(id: u64, max_new: usize) -> Request {
    let len = 2 + (id as usize * 5) % 11;
    let prompt = (0..len).map(|j| ((3 + 7 * id as usize + 5 * j) % 120) as u32).collect();
    let mut opts = RequestOptions::from_generate(&GenerateOptions::greedy(max_new));
    opts.eos = Default::default();
    Request { id, prompt, opts }
}

/// An engine of `slots` slots, lookahead `ahead`, hold `hold`.
fn engine<'m>(g: &Graph<'_>, model: &'m Model, slots: usize, ahead: bool, hold: bool) -> Engine<'m> {
    let mut e = Engine::new(g, model, slots, 64).unwrap();
    e.set_lookahead(ahead);
    e.set_admission_hold(hold);
    e
}

/// Steps until idle, submitting `later[k]` before step k; the sink's record.
fn run(g: &Graph<'_>, e: &mut Engine<'_>, mut later: HashMap<usize, Vec<Request>>) -> Steps {
    let mut out = Steps::default();
    while !e.is_idle() || !later.is_empty() {
        for r in later.remove(&out.step).unwrap_or_default() {
            e.submit(r).unwrap();
        }
        e.step(g, &mut out).unwrap();
        out.step += 1;
    }
    assert_eq!(e.blocks_in_use().0, 0, "every KV block came back");
    out
}

#[test]
fn requests_queued_before_a_step_share_one_prefill_forward() {
    on_every_device("engine admission: a burst", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("llama")).unwrap();
        for ahead in [false, true] {
            let mut e = engine(&g, &model, 8, ahead, true);
            (0..6).for_each(|id| e.submit(request(id, 4)).unwrap());
            let out = run(&g, &mut e, HashMap::new());
            assert_eq!(e.prefill_forwards(), 1, "lookahead {ahead}: six requests queued together");
            assert!(out.first.values().all(|&s| s == out.first[&0]), "lookahead {ahead}: {:?}", out.first);
        }
        Ok(())
    });
}

/// Two long rows (ids 0, 1) and four short ones (2..6) start together; the four finish on one
/// step. Their successors (10..14) arrive the way a server's clients send them: two right after
/// that step, two a step later. Returns the prefill forwards, the steps each successor waited
/// from its arrival to its first token, and every request's tokens.
fn successors(g: &Graph<'_>, model: &Model, ahead: bool, hold: bool) -> (usize, Vec<usize>, HashMap<u64, Vec<u32>>) {
    let first = || (0..6).map(|id| request(id, if id < 2 { 24 } else { 3 })).collect::<Vec<_>>();
    // Where the short rows finish: the same run without successors.
    let alone = run(g, &mut engine(g, model, 6, ahead, hold), HashMap::from([(0, first())]));
    let done = alone.finished[&2];
    assert!((3..6).all(|id| alone.finished[&id] == done), "the short rows finish on one step: {:?}", alone.finished);
    let arrive = |id: u64| done + 1 + usize::from(id >= 12);
    let mut later = HashMap::from([(0, first())]);
    (10..14).for_each(|id| later.entry(arrive(id)).or_default().push(request(id, 3)));
    let mut e = engine(g, model, 6, ahead, hold);
    let out = run(g, &mut e, later);
    assert!(out.finished[&0] > done + 4, "the long rows still run while the successors join");
    let waited = (10..14).map(|id| out.first[&id] - arrive(id)).collect();
    (e.prefill_forwards(), waited, out.tokens)
}

#[test]
fn successors_arriving_over_two_steps_share_one_prefill_forward() {
    on_every_device("engine admission: successors", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("llama")).unwrap();
        for ahead in [false, true] {
            let (held, waited, tokens) = successors(&g, &model, ahead, true);
            let (eager, eager_waited, eager_tokens) = successors(&g, &model, ahead, false);
            // One forward for the six first requests, one for the four successors.
            assert_eq!(held, 2, "lookahead {ahead}: held one step, the successors share a forward");
            assert_eq!(eager, 3, "lookahead {ahead}: admitted as they arrive, two forwards");
            // The synchronous step reports a prefill's token in its own step, the lookahead one
            // a step later; the hold adds one step for the two that arrived first, none for the
            // two arriving on the step they were held.
            let now = usize::from(ahead);
            assert_eq!(waited, [now + 1, now + 1, now, now], "lookahead {ahead}: steps waited");
            assert_eq!(eager_waited, [now; 4], "lookahead {ahead}: steps waited without the hold");
            assert_eq!(tokens, eager_tokens, "lookahead {ahead}: the hold changes no token");
        }
        Ok(())
    });
}

#[test]
fn a_lone_request_waits_at_most_one_step() {
    on_every_device("engine admission: alone", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("llama")).unwrap();
        for ahead in [false, true] {
            let first = |hold: bool| {
                let mut e = engine(&g, &model, 4, ahead, hold);
                e.submit(request(0, 12)).unwrap();
                let out = run(&g, &mut e, HashMap::from([(3, vec![request(1, 2)])]));
                out.first[&1] - 3
            };
            let (held, eager) = (first(true), first(false));
            assert_eq!(held, eager + 1, "lookahead {ahead}: a lone request joining running rows is held one step");
            // Nothing running: admitted at once.
            let mut e = engine(&g, &model, 4, ahead, true);
            let out = run(&g, &mut e, HashMap::from([(0, vec![request(5, 2)])]));
            assert_eq!(out.first[&5], usize::from(ahead), "lookahead {ahead}: an idle engine admits at once");
        }
        Ok(())
    });
}
