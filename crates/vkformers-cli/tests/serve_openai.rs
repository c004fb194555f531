//! `vkformers serve` started on loopback over the tiny model folder
//! `tests/fixtures_generate/cli_model` and driven by the official `openai` Python client
//! (`serve_openai_client.py`; installed by `.ci/install-openai` into a venv whose python
//! VKFORMERS_OPENAI_PYTHON names, default /opt/vkformers-openai/bin/python). Greedy completions
//! and chat equal `vkformers generate`; streamed and non-streamed responses are equal; 16
//! concurrent requests give what they give one at a time; every error status reaches the client
//! as its exception; SIGTERM drains.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

mod common;

fn model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_generate/cli_model")
}

/// The python with `openai`, or None (the test is skipped, with a message) when it is absent
/// outside CI; in CI its absence fails the test.
fn python() -> Option<PathBuf> {
    let p = std::env::var_os("VKFORMERS_OPENAI_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/vkformers-openai/bin/python"));
    if p.is_file() {
        return Some(p);
    }
    let msg = format!("{} not found: run .ci/install-openai (or set VKFORMERS_OPENAI_PYTHON)", p.display());
    assert!(std::env::var("CI").is_err(), "{msg}");
    eprintln!("SKIPPED: {msg}");
    None
}

/// A running `vkformers serve`, killed when dropped.
struct Server {
    child: Child,
    base_url: String,
    /// The stderr lines after the "listening" one, read by a thread.
    log: std::sync::mpsc::Receiver<String>,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        Server::start_model(&model(), extra)
    }

    fn start_model(m: &std::path::Path, extra: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vkformers"));
        cmd.args(["serve", "--model", m.to_str().unwrap(), "--port", "0"]).args(extra);
        // One decode kernel for 1 to 16 rows on every device, so "16 at once equals one at a
        // time" compares the engine's batching, not two kernels' f32 sums: where cooperative
        // matrices exist the default sends more than 4 rows to the GEMM (the H200 gave logprobs
        // 1.4e-6 apart, -2.9457173 against -2.9457188, with equal tokens).
        cmd.env("VKFORMERS_GEMV_MAX_ROWS", "16");
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start vkformers serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let base_url = loop {
            let line = lines.next().expect("vkformers serve exited before listening").unwrap();
            if let Some(rest) = line.split("listening on ").nth(1) {
                break format!("{}/v1", rest.split_whitespace().next().unwrap());
            }
        };
        let (tx, log) = std::sync::mpsc::channel();
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| drop(tx.send(l))));
        Server { child, base_url, log }
    }

    /// Runs a job of the client script and returns its JSON result.
    fn client(&self, py: &PathBuf, mut job: Value) -> Value {
        job["base_url"] = self.base_url.clone().into();
        let child = client_process(py, &job);
        let out = child.wait_with_output().unwrap();
        let so = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "client failed: {so}\n{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str(so.lines().last().unwrap()).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client_process(py: &PathBuf, job: &Value) -> Child {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/serve_openai_client.py");
    let mut child = Command::new(py)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the openai client");
    child.stdin.take().unwrap().write_all(job.to_string().as_bytes()).unwrap();
    child
}

/// `vkformers generate --json` of one prompt: its text and finish reason.
fn generate(extra: &[&str]) -> (String, String) {
    let m = model();
    let mut args = vec!["generate", "--model", m.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers")).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &v["rows"][0];
    (row["text"].as_str().unwrap().to_string(), row["finish_reason"].as_str().unwrap().to_string())
}

fn req(endpoint: &str, kwargs: Value) -> Value {
    json!({"endpoint": endpoint, "kwargs": kwargs})
}

fn completion(prompt: &str, extra: Value) -> Value {
    let mut k = json!({"model": model().to_str().unwrap(), "prompt": prompt, "max_tokens": 16, "temperature": 0});
    k.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    req("completions", k)
}

fn chat(user: &str, extra: Value) -> Value {
    let messages = json!([{"role": "user", "content": user}]);
    let mut k = json!({"model": model().to_str().unwrap(), "messages": messages, "max_tokens": 16, "temperature": 0});
    k.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    req("chat", k)
}

fn run(server: &Server, py: &PathBuf, mode: &str, requests: &[Value]) -> Vec<Value> {
    let out = server.client(py, json!({"action": "run", "mode": mode, "requests": requests}));
    out.as_array().unwrap().clone()
}

const PROMPTS: [&str; 3] = ["Once", "Tell me a story", "Hi"];

#[test]
fn greedy_and_seeded_completions_and_chat_equal_generate() {
    let Some(py) = python() else { return };
    let server = Server::start(&[]);
    let mut requests = Vec::new();
    for p in PROMPTS {
        requests.push(completion(p, json!({})));
        requests.push(chat(p, json!({})));
    }
    // Seeded sampling too: a request's draws are those of the same prompt alone.
    requests.push(completion("Once", json!({"temperature": 1.5, "top_k": -1, "top_p": 0.9, "seed": 7})));
    let got = run(&server, &py, "sequential", &requests);
    let sampling = ["--do-sample", "--temperature", "1.5", "--top-k", "0", "--top-p", "0.9", "--seed", "7"];
    let (sampled, _) = generate(&[&["--prompt", "Once", "--max-new-tokens", "16"][..], &sampling].concat());
    assert_eq!(got[6]["texts"][0], sampled, "seeded sampling vs vkformers generate --do-sample --seed 7");
    let (greedy, _) = generate(&["--prompt", "Once", "--max-new-tokens", "16"]);
    assert_ne!(sampled, greedy, "sampling at temperature 1.5 should leave the greedy path");
    for (i, p) in PROMPTS.iter().enumerate() {
        let (text, finish) = generate(&["--prompt", p, "--max-new-tokens", "16"]);
        assert_eq!(got[2 * i]["texts"][0], text, "completion of {p:?} vs vkformers generate");
        assert_eq!(got[2 * i]["finish"][0], finish, "{p:?}");
        let (text, finish) = generate(&["--prompt", p, "--chat", "--max-new-tokens", "16"]);
        assert_eq!(got[2 * i + 1]["texts"][0], text, "chat of {p:?} vs vkformers generate --chat");
        assert_eq!(got[2 * i + 1]["finish"][0], finish, "{p:?}");
        let usage = &got[2 * i]["usage"];
        assert_eq!(
            usage["total_tokens"],
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        );
    }
}

/// Requests of every kind: greedy and seeded sampling with every processor, penalties, stop
/// strings, several choices, log-probabilities, token-id prompts.
fn varied() -> Vec<Value> {
    let sampled = json!({"temperature": 1.3, "top_p": 0.9, "top_k": 20, "min_p": 0.02, "seed": 11});
    vec![
        completion("Once", json!({"max_tokens": 24})),
        completion("Tell me", sampled.clone()),
        completion("Hi there", json!({"n": 3, "temperature": 0.8, "seed": 5})),
        completion("Stop", json!({"stop": ["e", "a"], "max_tokens": 30})),
        completion("Pen", json!({"presence_penalty": 1.5, "frequency_penalty": 0.5, "repetition_penalty": 1.3})),
        completion("Log", json!({"logprobs": 3})),
        req(
            "completions",
            json!({"model": model().to_str().unwrap(), "prompt": [1, 44, 73, 84], "max_tokens": 10, "temperature": 0}),
        ),
        chat("Hello", json!({"max_tokens": 20})),
        chat("Sample me", sampled),
        chat("Choices", json!({"n": 2, "temperature": 1.0, "seed": 3})),
        chat("Probabilities", json!({"logprobs": true, "top_logprobs": 2})),
        chat("Stops", json!({"stop": "o", "max_tokens": 30})),
    ]
}

fn streamed(requests: &[Value]) -> Vec<Value> {
    requests
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r["kwargs"]["stream"] = true.into();
            r["kwargs"]["stream_options"] = json!({"include_usage": true});
            r
        })
        .collect()
}

/// Log-probabilities equal to 1e-6 (they go through JSON as f32 → f64).
fn assert_same(a: &Value, b: &Value, what: &str) {
    assert_eq!(a["texts"], b["texts"], "{what}");
    assert_eq!(a["finish"], b["finish"], "{what}");
    assert_eq!(a["usage"], b["usage"], "{what}");
    let lp = |v: &Value| -> Vec<Vec<f64>> {
        v["logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
            .collect()
    };
    let (la, lb) = (lp(a), lp(b));
    assert_eq!(la.len(), lb.len(), "{what}");
    for (x, y) in la.iter().flatten().zip(lb.iter().flatten()) {
        assert!((x - y).abs() <= 1e-6, "{what}: logprob {x} vs {y}");
    }
}

#[test]
fn streaming_equals_non_streaming() {
    let Some(py) = python() else { return };
    let server = Server::start(&[]);
    let requests = varied();
    let plain = run(&server, &py, "sequential", &requests);
    let stream = run(&server, &py, "sequential", &streamed(&requests));
    for (i, (a, b)) in plain.iter().zip(&stream).enumerate() {
        assert!(a.get("status").is_none(), "request {i}: {a}");
        assert_same(a, b, &format!("request {i}: non-stream vs stream"));
    }
    // Sanity of what was asked: 3 and 2 choices, stop strings cut, log-probabilities present.
    assert_eq!(plain[2]["texts"].as_array().unwrap().len(), 3);
    assert_eq!(plain[9]["texts"].as_array().unwrap().len(), 2);
    assert!(!plain[3]["texts"][0].as_str().unwrap().contains(['e', 'a']));
    assert_eq!(
        plain[5]["logprobs"][0].as_array().unwrap().len(),
        plain[5]["usage"]["completion_tokens"].as_u64().unwrap() as usize
    );
    assert!(!plain[10]["logprobs"][0].as_array().unwrap().is_empty());
}

#[test]
fn sixteen_concurrent_requests_equal_one_at_a_time() {
    let Some(py) = python() else { return };
    let server = Server::start(&["--max-batch", "6"]);
    let mut requests = varied();
    requests.extend(streamed(&varied()[..4]));
    assert_eq!(requests.len(), 16);
    let alone = run(&server, &py, "sequential", &requests);
    let together = run(&server, &py, "concurrent", &requests);
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        assert!(a.get("status").is_none(), "request {i}: {a}");
        assert_same(a, b, &format!("request {i}: alone vs 16 at once"));
    }
}

#[test]
fn error_statuses_reach_the_client() {
    let Some(py) = python() else { return };
    // One slot and 15 queue places: the 16 choices of the first request fill them.
    let server =
        Server::start(&["--api-key", "sekret", "--max-model-len", "64", "--max-batch", "1", "--max-queue", "15"]);
    let name = model().to_str().unwrap().to_string();
    let requests = [
        completion("Once", json!({"model": "unknown"})),
        completion("Once", json!({"temperature": 3.5})),
        completion(&"x".repeat(80), json!({})),
    ];
    let with_key = |mut job: Value| {
        job["api_key"] = "sekret".into();
        job
    };
    let out = server.client(&py, with_key(json!({"action": "run", "mode": "sequential", "requests": requests})));
    let statuses: Vec<u64> = out.as_array().unwrap().iter().map(|r| r["status"].as_u64().unwrap_or(0)).collect();
    assert_eq!(statuses, [404, 400, 413]);
    for r in out.as_array().unwrap() {
        assert!(r["error"]["message"].is_string(), "{r}");
    }
    let no_key =
        server.client(&py, json!({"action": "run", "mode": "sequential", "requests": [completion("Once", json!({}))]}));
    assert_eq!(no_key[0]["status"], 401);
    let kwargs = json!({"model": name, "prompt": "Once", "max_tokens": 50, "n": 16, "temperature": 0});
    let full = server.client(&py, with_key(json!({"action": "queue_full", "kwargs": kwargs})));
    assert_eq!(full["second"]["status"], 429, "{full}");
    assert_eq!(full["first"]["finish"], Value::from(vec!["length"; 16]));
}

#[test]
fn sigterm_drains_running_requests_and_refuses_new_ones() {
    let Some(py) = python() else { return };
    // 16 choices of 240 tokens, two at a time: still running when the signal comes.
    let mut server = Server::start(&["--max-batch", "2"]);
    let kwargs =
        json!({"model": model().to_str().unwrap(), "prompt": "Once", "max_tokens": 240, "n": 16, "temperature": 0});
    let mut hold = client_process(&py, &json!({"action": "hold", "kwargs": kwargs, "base_url": server.base_url}));
    let mut out = BufReader::new(hold.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "first", "{line}");
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    // Draining starts once the signal is handled.
    let t = std::time::Instant::now();
    while !server.log.recv_timeout(std::time::Duration::from_secs(30)).unwrap().contains("draining") {
        assert!(t.elapsed().as_secs() < 30);
    }
    let refused = run(&server, &py, "sequential", &[completion("Once", json!({}))]);
    assert_eq!(refused[0]["status"], 503, "{}", refused[0]);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(hold.wait().unwrap().success());
    let held: Value = serde_json::from_str(rest.trim()).unwrap();
    assert_eq!(held["finish"], Value::from(vec!["length"; 16]), "the running request runs to its end: {held}");
    assert_eq!(held["usage"], Value::Null);
    let status = server.child.wait().unwrap();
    assert!(status.success(), "vkformers serve should exit 0 after draining: {status}");
}

#[test]
fn an_adapter_selected_by_model_name_gives_the_adapters_tokens() {
    let Some(py) = python() else { return };
    let adapter = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_lora/llama");
    let a = adapter.to_str().unwrap();
    let server = Server::start(&["--adapter", &format!("tuned={a}")]);
    let ids = [1u32, 17, 42, 99, 5];
    let ask =
        |name: &str| req("completions", json!({"model": name, "prompt": ids, "max_tokens": 12, "temperature": 0}));
    let got = run(&server, &py, "concurrent", &[ask("tuned"), ask(model().to_str().unwrap())]);
    let ids_arg = "1,17,42,99,5";
    let (tuned, _) = generate(&["--prompt-ids", ids_arg, "--max-new-tokens", "12", "--adapter", a]);
    let (base, _) = generate(&["--prompt-ids", ids_arg, "--max-new-tokens", "12"]);
    assert_ne!(tuned, base, "the adapter should change the tokens");
    assert_eq!(got[0]["texts"][0], tuned, "model `tuned` vs vkformers generate --adapter");
    assert_eq!(got[1]["texts"][0], base, "the base model's name vs vkformers generate");
}

/// The soak on lavapipe through `tools/bench/serve.py --soak --verify`: 500 streamed
/// requests from 16 clients, a random third closed mid-way: no crash, `/metrics` back to no
/// running request and zero KV blocks, every finished response equal to the same request alone.
#[test]
fn soak_500_requests_a_third_cancelled_leaks_no_blocks() {
    let Some(py) = python() else { return };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(py)
        .arg(root.join("tools/bench/serve.py"))
        .args(["--model", model().to_str().unwrap(), "--vkformers", env!("CARGO_BIN_EXE_vkformers")])
        .args(["--serve-args", "--max-batch 16", "--clients", "16", "--requests", "500", "--distinct", "25"])
        .args(["--prompt-len", "8", "--max-tokens", "32", "--soak", "--verify", "--timeout", "300"])
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "soak failed:\n{so}\n{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&so).unwrap();
    assert_eq!(report["requests"], 500);
    let cancelled = report["cancelled"].as_u64().unwrap();
    assert!((100..=230).contains(&cancelled), "about a third cancelled: {cancelled}");
    assert_eq!(report["kv_blocks_in_use_after"], 0.0);
    assert_eq!(report["running_after"], 0.0);
    assert_eq!(report["mismatched_vs_alone"], 0);
}

/// Bad start-up options end `vkformers serve` at once with a message saying what to give.
#[test]
fn serve_refuses_bad_options_before_listening() {
    let m = model();
    let cases: [(&[&str], &str); 3] = [
        (&["--adapter", "no-equals-sign"], "give NAME=DIR"),
        (&["--max-model-len", "100000"], "longer than the model's context of 256"),
        (&["--adapter", &format!("{}={}", m.display(), m.display())], "given twice"),
    ];
    for (extra, want) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_vkformers"))
            .args(["serve", "--model", m.to_str().unwrap(), "--port", "0"])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{extra:?}: {err}");
        assert!(!err.contains("listening"), "{extra:?}: {err}");
    }
}

/// An embedding model served on `/v1/embeddings` (all-MiniLM-L6-v2, a real sentence-transformers
/// folder): the official client's default base64 vectors and `float` vectors, texts and token-id
/// inputs, requests run concurrently (so the server batches them together) — every vector equal
/// to `vkformers embed`'s for the same text (which tests/embed.rs holds to sentence-transformers),
/// and the generation routes refused with 400.
#[test]
fn embeddings_equal_vkformers_embed() {
    let Some(py) = python() else { return };
    let Some(model) = common::minilm::minilm() else { return };
    let name = model.to_str().unwrap();
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_embed/all-MiniLM-L6-v2.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let sentences: Vec<String> =
        reference["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("sentences.txt");
    std::fs::write(&file, sentences.join("\n") + "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["embed", "--model", name, "--file", file.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let embed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want: Vec<Vec<f64>> = embed["data"].as_array().unwrap().iter().map(|d| floats(&d["embedding"])).collect();

    let server = Server::start_model(&model, &[]);
    // [CLS] hello [SEP] in BERT's uncased vocabulary, as ids.
    let ids = json!([[101, 7592, 102]]);
    let mut requests = vec![req("embeddings", json!({"model": name, "input": sentences}))];
    for s in &sentences {
        requests.push(req("embeddings", json!({"model": name, "input": s, "encoding_format": "float"})));
    }
    requests.push(req("embeddings", json!({"model": name, "input": ids})));
    requests.push(req("embeddings", json!({"model": name, "input": "hello"})));
    requests.push(completion("Once", json!({"model": name})));
    let got = run(&server, &py, "concurrent", &requests);

    let close = |a: &[f64], b: &[f64], what: &str| {
        assert_eq!(a.len(), 384, "{what}");
        let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        assert!(diff <= 1e-5, "{what}: largest difference {diff} from `vkformers embed`");
    };
    let all: Vec<Vec<f64>> = got[0]["embeddings"].as_array().unwrap().iter().map(floats).collect();
    assert_eq!(all.len(), sentences.len());
    for (i, (a, b)) in all.iter().zip(&want).enumerate() {
        close(a, b, &format!("sentence {i} of the base64 list"));
    }
    for (i, b) in want.iter().enumerate() {
        close(&floats(&got[1 + i]["embeddings"][0]), b, &format!("sentence {i} alone, float"));
    }
    let tokens: u64 = got[1..=sentences.len()].iter().map(|r| r["usage"]["prompt_tokens"].as_u64().unwrap()).sum();
    assert_eq!(got[0]["usage"]["prompt_tokens"].as_u64().unwrap(), tokens, "usage of the list = sum of singles");
    assert_eq!(embed["usage"]["prompt_tokens"].as_u64().unwrap(), tokens, "usage equals `embed`'s");
    let n = sentences.len();
    close(&floats(&got[n + 1]["embeddings"][0]), &floats(&got[n + 2]["embeddings"][0]), "ids of `hello`");
    assert_eq!(got[n + 1]["usage"]["prompt_tokens"], 3);
    assert_eq!(got[n + 3]["status"], 400, "completions on an embedding model: {}", got[n + 3]);
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}
