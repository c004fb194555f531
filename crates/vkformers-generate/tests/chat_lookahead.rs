//! `generate_cached`, the loop of a chat's turns, running the device one step ahead of the host
//! (`Stepping::Ahead`) gives the synchronous loop's tokens and leaves the synchronous loop's KV
//! cache, so every later turn continuing that cache gives the same tokens too: a conversation of
//! turns ended by EOS, by the callback (a stop string) and by `max_new_tokens`, one whose context
//! does not extend the cache (a fresh cache, as `vkformers chat` makes then) and turns continuing
//! it; greedy, seeded sampling with every processor, greedy with a repetition penalty; a plain
//! model, a sliding window of 4 (its blocks given back as turns run) and a latent (MLA) cache.
//! A batch of two rows, one finishing early, continues into a second turn with the same tokens
//! (the finished row's cache is fed the pad id ahead as in the synchronous loop). Running ahead,
//! the host waits for the device with nothing else in flight once per turn, not once per token
//! (`Graph::drained_waits`).

mod common;

use common::fixtures_root;
use vkformers_generate::generation::{generate_cached_stepping, Context, Finish, GenerateOptions, Stepping};
use vkformers_generate::SamplingParams;
use vkformers_models::decoder::KvCache;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

/// How a turn of the plan ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// At an EOS id picked from the turn's reply without one (`eos_in`).
    Eos,
    /// The callback returns true at this many tokens.
    Stop(usize),
    /// At `max_new_tokens`.
    Length,
}

/// One user turn: the ids appended to the conversation (or, with `fresh`, the whole context, which
/// does not extend the cache), the most new tokens, and how it ends. With `cut`, the previous
/// reply enters the context without its last token (a stop string cut from the reply's text,
/// then tokenized again): the context then differs from what the step recorded ahead of the
/// previous turn's end fed at that column, which the cache must have forgotten.
struct Turn {
    ids: Vec<u32>,
    fresh: bool,
    cut: bool,
    new_tokens: usize,
    end: End,
}

fn turn(ids: &[u32], new_tokens: usize, end: End) -> Turn {
    Turn { ids: ids.to_vec(), fresh: false, cut: false, new_tokens, end }
}

/// The conversation: EOS on the first turn, a stop, a length (after the stopped reply cut by one
/// token), EOS after continued turns, a fresh
/// context (its own cache), then a turn continuing that cache.
fn plan() -> Vec<Turn> {
    vec![
        turn(&[61, 79, 31, 104, 26], 9, End::Eos),
        turn(&[7, 19, 33], 10, End::Stop(4)),
        Turn { cut: true, ..turn(&[12, 5], 6, End::Length) },
        turn(&[90, 91, 92, 93], 10, End::Eos),
        Turn { fresh: true, ..turn(&[45, 71, 27, 86, 110, 97, 22, 58], 6, End::Length) },
        turn(&[40, 41], 7, End::Length),
    ]
}

/// What a turn gave: its tokens, why it ended, and the columns its cache holds after it.
#[derive(Debug, PartialEq)]
struct Reply {
    tokens: Vec<u32>,
    finish: Finish,
    cached: usize,
}

/// Runs the first `eos.len()` turns of `plan` (turn i's EOS id `eos[i]`, none where `None`) with
/// `params` and `seed`; the replies and the host's drained waits of each turn.
fn converse(
    g: &Graph<'_>,
    model: &Model,
    (params, seed): (&SamplingParams, u64),
    eos: &[Option<u32>],
    stepping: Stepping,
) -> (Vec<Reply>, Vec<usize>) {
    let (mut replies, mut waits) = (Vec::new(), Vec::new());
    let mut context: Vec<u32> = Vec::new();
    let mut cache: Option<KvCache> = None;
    for (t, e) in plan().iter().zip(eos) {
        if t.cut {
            context.pop();
        }
        if t.fresh {
            context = t.ids.clone();
            cache = None;
        } else {
            context.extend(&t.ids);
        }
        let cache = cache.get_or_insert_with(|| KvCache::new(g, &model.spec, context.len() + t.new_tokens).unwrap());
        let opts = GenerateOptions {
            params: params.clone(),
            seed,
            eos: e.iter().copied().collect(),
            ..GenerateOptions::greedy(t.new_tokens)
        };
        let ctx = Context { history: vec![context.clone()], masks: vec![vec![1; context.len()]] };
        let stop_at = match t.end {
            End::Stop(k) => k,
            _ => usize::MAX,
        };
        let before = g.drained_waits();
        let gen = generate_cached_stepping(g, model, cache, ctx, &opts, stepping, &mut |_, new| new.len() == stop_at)
            .unwrap();
        waits.push(g.drained_waits() - before);
        let tokens = gen.rows[0].clone();
        context.extend(&tokens);
        replies.push(Reply { tokens, finish: gen.finish[0], cached: cache.len() });
    }
    (replies, waits)
}

/// An EOS id that ends `reply` early: the first token from the third on that has not occurred
/// before it.
fn eos_in(reply: &[u32]) -> u32 {
    (2..reply.len() - 1)
        .find(|&i| !reply[..i].contains(&reply[i]))
        .map(|i| reply[i])
        .unwrap_or_else(|| panic!("no token of {reply:?} can end it early"))
}

/// The EOS ids of the plan: each EOS turn's is picked from its reply without one, the turns before
/// it run with theirs (synchronously).
fn plan_eos(g: &Graph<'_>, model: &Model, sampling: (&SamplingParams, u64)) -> Vec<Option<u32>> {
    let mut eos = Vec::new();
    for (i, t) in plan().iter().enumerate() {
        eos.push(None);
        if t.end == End::Eos {
            let (replies, _) = converse(g, model, sampling, &eos, Stepping::Synchronous);
            eos[i] = Some(eos_in(&replies[i].tokens));
        }
    }
    eos
}

fn same_conversation(name: &str) {
    let sampling = SamplingParams {
        temperature: 1.3,
        top_k: 40,
        top_p: 0.95,
        min_p: Some(0.02),
        repetition_penalty: 1.3,
        ..SamplingParams::sampling()
    };
    let penalised = SamplingParams { repetition_penalty: 1.5, ..SamplingParams::greedy() };
    on_every_device("chat lookahead", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixtures_root().join(name)).unwrap();
        for (params, seed) in [(SamplingParams::greedy(), 0), (sampling.clone(), 17), (penalised.clone(), 0)] {
            let what = format!("{name}, {params:?}");
            let eos = plan_eos(&g, &model, (&params, seed));
            let (sync, sync_waits) = converse(&g, &model, (&params, seed), &eos, Stepping::Synchronous);
            let (ahead, ahead_waits) = converse(&g, &model, (&params, seed), &eos, Stepping::Ahead);
            assert_eq!(ahead, sync, "{what}");
            let want: Vec<Finish> = plan()
                .iter()
                .map(|t| match t.end {
                    End::Eos => Finish::Eos,
                    End::Stop(_) => Finish::Stopped,
                    End::Length => Finish::Length,
                })
                .collect();
            assert_eq!(sync.iter().map(|r| r.finish).collect::<Vec<_>>(), want, "{what}: the turns end as planned");
            let tokens: Vec<usize> = sync.iter().map(|r| r.tokens.len()).collect();
            eprintln!("{what}: tokens {tokens:?}, drained waits synchronous {sync_waits:?}, ahead {ahead_waits:?}");
            // Synchronous: a wait for every token's read-back. Ahead: only the turn's last one.
            for (i, n) in tokens.iter().enumerate() {
                assert!(sync_waits[i] >= *n, "{what}: turn {i}: {} synchronous waits for {n} tokens", sync_waits[i]);
                assert_eq!(ahead_waits[i], 1, "{what}: turn {i}: waits with nothing in flight");
            }
        }
        Ok(())
    });
}

#[test]
fn turns_run_ahead_as_the_synchronous_loop_llama() {
    same_conversation("llama");
}

#[test]
fn turns_run_ahead_as_the_synchronous_loop_sliding_window() {
    same_conversation("mistral");
}

#[test]
fn turns_run_ahead_as_the_synchronous_loop_latent_cache() {
    same_conversation("deepseek_v2");
}

/// Two rows in one cache: row 0 ends at an EOS while row 1 runs on (row 0 is fed the pad id from
/// then on, its cache too), then both continue the cache with more ids each.
#[test]
fn a_batch_with_a_finished_row_continues_as_the_synchronous_loop() {
    on_every_device("chat lookahead batch", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixtures_root().join("llama")).unwrap();
        let sampling = SamplingParams { temperature: 1.2, repetition_penalty: 1.2, ..SamplingParams::sampling() };
        for (params, seed) in [(SamplingParams::greedy(), 0), (sampling, 5)] {
            let two_turns = |eos: Option<u32>, stepping| {
                // Row 0 left-padded by 3.
                let history = vec![vec![0, 0, 0, 61, 79, 31, 104, 26], vec![45, 71, 27, 86, 110, 97, 22, 58]];
                let masks = vec![vec![0, 0, 0, 1, 1, 1, 1, 1], vec![1; 8]];
                let mut cache = KvCache::batched(&g, &model.spec, 2, 24).unwrap();
                let opts = GenerateOptions {
                    params: params.clone(),
                    seed,
                    eos: eos.into_iter().collect(),
                    ..GenerateOptions::greedy(8)
                };
                let ctx = Context { history: history.clone(), masks: masks.clone() };
                let first =
                    generate_cached_stepping(&g, &model, &mut cache, ctx, &opts, stepping, &mut |_, _| false).unwrap();
                // The columns so far (a finished row's steps are pad ids, attended as the loop
                // fed them), the last step's and two more ids a row.
                let steps = first.rows.iter().map(Vec::len).max().unwrap();
                let mut ctx = Context { history, masks };
                for (row, new) in first.rows.iter().enumerate() {
                    let padded = new.iter().copied().chain(std::iter::repeat(opts.pad)).take(steps);
                    ctx.history[row].extend(padded.chain([7 + row as u32, 19]));
                    ctx.masks[row].extend(std::iter::repeat_n(1, steps + 2));
                }
                let opts = GenerateOptions { eos: Vec::new(), ..opts };
                let second =
                    generate_cached_stepping(&g, &model, &mut cache, ctx, &opts, stepping, &mut |_, _| false).unwrap();
                (first.rows, first.finish, second.rows, cache.len())
            };
            let free = two_turns(None, Stepping::Synchronous);
            // A token row 0 produces early and row 1 never does.
            let eos = *free.0[0][2..5].iter().find(|t| !free.0[1].contains(t)).expect("a token only row 0 produces");
            let sync = two_turns(Some(eos), Stepping::Synchronous);
            assert_eq!(sync.1, [Finish::Eos, Finish::Length], "{params:?}: row 0 ends early");
            assert_eq!(two_turns(Some(eos), Stepping::Ahead), sync, "{params:?}");
        }
        Ok(())
    });
}
