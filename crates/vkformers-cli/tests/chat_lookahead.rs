//! `vkformers chat` runs each turn one decode step ahead of the host by default;
//! `VKFORMERS_DECODE_LOOKAHEAD=0` switches that off. Both print the same replies and report the
//! same cache reuse, prefill and reply lengths (`--stats`) over a conversation piped on stdin
//! (turns continuing the cache, a `/reset`), greedy and seeded sampling, with and without a
//! stop string that ends a reply early.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn cli_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_generate/cli_model")
}

const TURNS: &str = "hello\nhow are you\ntell me more\n/reset\nhello again\nand then\n";

/// `chat --stats` over `TURNS` with `extra` flags; `lookahead` false sets
/// `VKFORMERS_DECODE_LOOKAHEAD=0`. Its stdout and, per turn, the stats' counts (tokens from the
/// cache, prefilled, new).
fn chat(extra: &[&str], lookahead: bool) -> (String, Vec<[usize; 3]>) {
    let m = cli_model();
    let mut args = vec!["chat", "--model", m.to_str().unwrap(), "--stats"];
    args.extend(extra);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vkformers"));
    cmd.args(&args).env_remove("VKFORMERS_DECODE_LOOKAHEAD");
    if !lookahead {
        cmd.env("VKFORMERS_DECODE_LOOKAHEAD", "0");
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(TURNS.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8(out.stdout).unwrap(), stderr.lines().filter_map(stats).collect())
}

/// The counts of a stats line `[R tokens from the cache, P prefilled at … tokens/s, N new at …]`.
fn stats(line: &str) -> Option<[usize; 3]> {
    let words: Vec<&str> = line.strip_prefix('[')?.split_whitespace().collect();
    let number = |after: &str| -> Option<usize> {
        let at = words.iter().position(|w| w.trim_end_matches(',') == after)?;
        words.get(at.checked_sub(1)?)?.parse().ok()
    };
    Some([words.first()?.parse().ok()?, number("prefilled")?, number("new")?])
}

#[test]
fn chat_ahead_and_synchronous_print_the_same_replies() {
    let greedy = ["--max-new-tokens", "10", "--greedy"];
    let sampled = ["--max-new-tokens", "10", "--do-sample", "--temperature", "1.3", "--repetition-penalty", "1.3"];
    let seeded = [&sampled[..], &["--seed", "7"]].concat();
    for extra in [&greedy[..], &seeded[..]] {
        let (off, off_stats) = chat(extra, false);
        assert_eq!(off_stats.len(), 5, "a stats line per turn: {off_stats:?}");
        assert!(off_stats[1][0] > 0, "the second turn continues the cache: {off_stats:?}");
        assert_eq!(chat(extra, true), (off.clone(), off_stats), "{extra:?}");
        // A stop string of two characters from inside the first reply of 6 or more ends it early.
        let long: Vec<char> =
            off.split("\n\n").find(|r| r.chars().count() >= 6).expect("a long reply").chars().collect();
        let stop: String = long[3..5].iter().collect();
        let with_stop = [extra, &["--stop", &stop]].concat();
        let (stopped, off_stats) = chat(&with_stop, false);
        assert_ne!(stopped, off, "{stop:?} cuts a reply");
        assert_eq!(chat(&with_stop, true), (stopped, off_stats), "{with_stop:?}");
    }
}
