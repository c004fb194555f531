//! The server on loopback over the tiny model folder `tests/fixtures_generate/cli_model` (llama
//! fixture weights, a character tokenizer, a ChatML template), driven over HTTP: every error
//! status in OpenAI's JSON shape, `/health`, `/metrics`, and draining on stop (503 to new
//! requests, the running one finishes). The official `openai` client's tests are in
//! `crates/vkformers-cli/tests/serve_openai.rs`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use vkformers_models::model::Model;
use vkformers_serve::{Config, DEFAULT_MAX_BODY_BYTES};

fn model_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_generate/cli_model")
}

struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), vkformers_serve::ServeError>>>,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Starts draining and waits for the server to return.
    fn stop(mut self) -> Result<(), vkformers_serve::ServeError> {
        let _ = self.stop.take().map(|s| s.send(()));
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
    }
}

fn start(tweak: impl FnOnce(&mut Config)) -> Server {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let dir = model_dir();
    let mut config = Config {
        device: Default::default(),
        model_dir: dir.clone(),
        model_name: "tiny".into(),
        adapters: Vec::new(),
        loader: Box::new(move |g| Model::load(g, &dir).map_err(|e| e.to_string())),
        embedder: None,
        host: "127.0.0.1".into(),
        port: 0,
        api_key: None,
        max_batch: 4,
        max_queue: 16,
        max_model_len: None,
        max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        warmup: true,
        on_listen: Some(Box::new(move |a| addr_tx.send(a).unwrap())),
        stop: Some(stop_rx),
    };
    tweak(&mut config);
    let thread = std::thread::spawn(move || vkformers_serve::run(config));
    let addr = addr_rx.recv_timeout(Duration::from_secs(120)).expect("the server should start");
    Server { addr, stop: Some(stop_tx), thread: Some(thread) }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// Status and JSON body of a request (GET when `body` is None).
fn call(url: &str, body: Option<&str>, key: Option<&str>) -> (u16, Value) {
    let a = agent();
    let resp = match body {
        Some(b) => {
            let mut req = a.post(url).header("content-type", "application/json");
            if let Some(k) = key {
                req = req.header("authorization", &format!("Bearer {k}"));
            }
            req.send(b)
        }
        None => {
            let mut req = a.get(url);
            if let Some(k) = key {
                req = req.header("authorization", &format!("Bearer {k}"));
            }
            req.call()
        }
    };
    let mut resp = resp.unwrap();
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Asserts OpenAI's error shape with `status` and `code`.
fn assert_error((status, body): (u16, Value), want: u16, code: &str) {
    assert_eq!(status, want, "{body}");
    let e = &body["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert!(e["type"].is_string(), "{body}");
    assert_eq!(e["code"], code, "{body}");
}

fn completion(model: &str, extra: Value) -> String {
    let mut body = json!({"model": model, "prompt": "Once", "max_tokens": 4, "temperature": 0});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body.to_string()
}

#[test]
fn error_statuses_use_openai_shape() {
    let server = start(|c| {
        c.api_key = Some("sekret".into());
        c.max_model_len = Some(64);
        c.max_body_bytes = 4096;
    });
    let url = server.url("/v1/completions");
    let key = Some("sekret");
    let ok = call(&url, Some(&completion("tiny", json!({}))), key);
    assert_eq!(ok.0, 200, "{}", ok.1);
    assert_eq!(ok.1["choices"][0]["finish_reason"], "length");
    assert_error(call(&url, Some(&completion("tiny", json!({}))), None), 401, "invalid_api_key");
    assert_error(call(&url, Some(&completion("tiny", json!({}))), Some("wrong")), 401, "invalid_api_key");
    assert_error(call(&server.url("/v1/models"), None, None), 401, "invalid_api_key");
    assert_error(call(&url, Some(&completion("nope", json!({}))), key), 404, "model_not_found");
    assert_error(call(&server.url("/v1/nothing"), Some("{}"), key), 404, "not_found");
    assert_error(call(&url, Some("{not json"), key), 400, "invalid_request");
    assert_error(call(&url, Some(&completion("tiny", json!({"temperature": 5.0}))), key), 400, "invalid_request");
    assert_error(call(&url, Some(&completion("tiny", json!({"prompt": [1, 2, 500]}))), key), 400, "invalid_request");
    assert_error(call(&url, Some(&completion("tiny", json!({"prompt": []}))), key), 400, "invalid_request");
    assert_error(call(&url, Some(&completion("tiny", json!({"n": 0}))), key), 400, "invalid_request");
    let bias = json!({"logit_bias": {"5": 10}});
    let (status, body) = call(&url, Some(&completion("tiny", bias)), key);
    assert_eq!((status, &body["error"]["param"]), (400, &json!("logit_bias")), "{body}");
    let chat =
        json!({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function"}]});
    let (status, body) = call(&server.url("/v1/chat/completions"), Some(&chat.to_string()), key);
    assert_eq!((status, &body["error"]["param"]), (400, &json!("tools")), "{body}");
    let chat =
        json!({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0});
    let (status, body) = call(&server.url("/v1/chat/completions"), Some(&chat.to_string()), key);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    let long = json!({"prompt": vec![5u32; 70]});
    assert_error(call(&url, Some(&completion("tiny", long)), key), 413, "context_length_exceeded");
    let past = json!({"prompt": vec![5u32; 40], "max_tokens": 30});
    assert_error(call(&url, Some(&completion("tiny", past)), key), 413, "context_length_exceeded");
    let big = json!({"prompt": "x".repeat(5000)});
    assert_error(call(&url, Some(&completion("tiny", big)), key), 413, "context_length_exceeded");
    let models = call(&server.url("/v1/models"), None, key);
    assert_eq!(models.1["data"][0]["id"], "tiny", "{}", models.1);
    server.stop().unwrap();
}

/// Opens a long streamed completion (`n` choices of 240 tokens, which run one slot at a time
/// when the server has one) and returns the reader after its first event.
fn open_stream(server: &Server, n: usize) -> impl BufRead {
    let body = json!({"model": "tiny", "prompt": "Once", "max_tokens": 240, "n": n, "temperature": 0, "stream": true});
    let resp = agent()
        .post(&server.url("/v1/completions"))
        .header("content-type", "application/json")
        .send(&body.to_string())
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut reader = BufReader::new(resp.into_body().into_reader());
    let mut line = String::new();
    while !line.starts_with("data:") {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    reader
}

/// The rest of a stream's events' data, `[DONE]` last.
fn rest(reader: impl BufRead) -> Vec<String> {
    reader.lines().map_while(Result::ok).filter_map(|l| l.strip_prefix("data: ").map(str::to_string)).collect()
}

/// A gauge's value in `/metrics`.
fn gauge(server: &Server, name: &str) -> f64 {
    let (_, text) = call(&server.url("/metrics"), None, None);
    let text = text.as_str().unwrap().to_string();
    let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name} in {text}"));
    line[name.len() + 1..].parse().unwrap()
}

#[test]
fn a_full_queue_gets_429_and_a_gone_client_frees_its_blocks() {
    let server = start(|c| {
        c.max_batch = 1;
        c.max_queue = 15;
    });
    let url = server.url("/v1/completions");
    // 16 choices: one running, 15 queued; the queue is full.
    let running = open_stream(&server, 16);
    // The gauges are published after each step: the first one may still be running.
    let t = std::time::Instant::now();
    while gauge(&server, "vkformers_queue_depth") != 15.0 || gauge(&server, "vkformers_kv_blocks_in_use") == 0.0 {
        assert!(t.elapsed() < Duration::from_secs(10), "one request running with its blocks, 15 queued");
    }
    assert_error(call(&url, Some(&completion("tiny", json!({}))), None), 429, "queue_full");
    drop(running);
    let t = std::time::Instant::now();
    while gauge(&server, "vkformers_running_requests") > 0.0 || gauge(&server, "vkformers_kv_blocks_in_use") > 0.0 {
        assert!(t.elapsed() < Duration::from_secs(30), "the cancelled request should free its slot and blocks");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(call(&url, Some(&completion("tiny", json!({}))), None).0, 200);
    assert_eq!(gauge(&server, "vkformers_requests_cancelled_total"), 16.0);
    server.stop().unwrap();
}

#[test]
fn stop_drains_running_requests_and_refuses_new_ones() {
    let mut server = start(|c| c.max_batch = 4);
    assert_eq!(call(&server.url("/health"), None, None).0, 200);
    let running = open_stream(&server, 16);
    server.stop.take().unwrap().send(()).unwrap();
    let t = std::time::Instant::now();
    while call(&server.url("/health"), None, None).0 != 503 {
        assert!(t.elapsed() < Duration::from_secs(30), "/health should say draining");
    }
    let refused = call(&server.url("/v1/completions"), Some(&completion("tiny", json!({}))), None);
    assert_error(refused, 503, "shutting_down");
    let events = rest(running);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let finished = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter(|c| c["choices"][0]["finish_reason"] == "length")
        .count();
    assert_eq!(finished, 16, "every choice of the running request runs to its end");
    server.thread.take().unwrap().join().unwrap().unwrap();
}

#[test]
fn a_non_streamed_request_whose_client_leaves_is_cancelled() {
    let server = start(|c| c.max_batch = 1);
    let body = json!({"model": "tiny", "prompt": "Once", "max_tokens": 240, "n": 16, "temperature": 0});
    let impatient: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_millis(100)))
        .build()
        .into();
    let sent = impatient
        .post(&server.url("/v1/completions"))
        .header("content-type", "application/json")
        .send(&body.to_string());
    assert!(sent.is_err(), "16 × 240 tokens one at a time outlast the client's 100 ms");
    // Run to their end, the 16 choices would take 3840 decode steps; dropped, they end now.
    let t = std::time::Instant::now();
    let ended =
        || gauge(&server, "vkformers_requests_cancelled_total") + gauge(&server, "vkformers_requests_finished_total");
    while ended() < 16.0 {
        assert!(t.elapsed() < Duration::from_secs(30), "the engine should drop the abandoned request");
        std::thread::sleep(Duration::from_millis(5));
    }
    // How many choices end before the client's 100 ms runs out depends on the device (lavapipe:
    // at most the first; the H200 ran two or more of these 240-token choices in that time), but
    // the ones still queued or running when it left must be cancelled, not run to their end.
    let finished = gauge(&server, "vkformers_requests_finished_total");
    assert!(finished < 16.0, "all 16 choices ran to their end: none was cancelled");
    assert_eq!(gauge(&server, "vkformers_requests_cancelled_total"), 16.0 - finished);
    assert_eq!(gauge(&server, "vkformers_kv_blocks_in_use"), 0.0);
    server.stop().unwrap();
}

/// Log-probabilities of a greedy completion: each chosen token is the most likely one, so its
/// log-probability is the largest of the top ones; all are ≤ 0 and the top ones' probabilities
/// add up to at most 1.
#[test]
fn greedy_logprobs_are_the_most_likely_ones() {
    let server = start(|_| {});
    let body = completion("tiny", json!({"logprobs": 3, "max_tokens": 8}));
    let (status, r) = call(&server.url("/v1/completions"), Some(&body), None);
    assert_eq!(status, 200, "{r}");
    let lp = &r["choices"][0]["logprobs"];
    let chosen: Vec<f64> = lp["token_logprobs"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(chosen.len(), r["usage"]["completion_tokens"].as_u64().unwrap() as usize);
    for (i, top) in lp["top_logprobs"].as_array().unwrap().iter().enumerate() {
        let top: Vec<f64> = top.as_object().unwrap().values().map(|v| v.as_f64().unwrap()).collect();
        assert!(!top.is_empty() && top.len() <= 3, "{top:?}");
        let best = top.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        assert_eq!(chosen[i], best, "step {i}: greedy picks the most likely token");
        assert!(top.iter().all(|&l| l <= 0.0) && top.iter().map(|l| l.exp()).sum::<f64>() <= 1.0 + 1e-6);
    }
    server.stop().unwrap();
}

/// Requests that arrive together prefill together: 16 concurrent completions of different prompt
/// lengths (greedy, sampled, penalised) take fewer prefill forwards than requests, and each gives
/// what it gives alone; every token is chosen on the device (no logits read back).
#[test]
fn requests_arriving_together_share_prefill_forwards() {
    let server = start(|c| c.max_batch = 16);
    let url = server.url("/v1/completions");
    let bodies: Vec<String> = (0..16)
        .map(|i| {
            let prompt = "Once upon a time there".chars().take(2 + i % 7 * 3).collect::<String>();
            let extra = match i % 3 {
                0 => json!({}),
                1 => json!({"temperature": 1.2, "top_p": 0.9, "seed": i}),
                _ => json!({"presence_penalty": 1.0, "frequency_penalty": 0.5, "repetition_penalty": 1.2}),
            };
            let mut body: Value = serde_json::from_str(&completion("tiny", extra)).unwrap();
            (body["prompt"], body["max_tokens"]) = (prompt.into(), 12.into());
            body.to_string()
        })
        .collect();
    let text = |(status, r): (u16, Value)| {
        assert_eq!(status, 200, "{r}");
        r["choices"][0]["text"].as_str().unwrap().to_string()
    };
    let alone: Vec<String> = bodies.iter().map(|b| text(call(&url, Some(b), None))).collect();
    let before = gauge(&server, "vkformers_prefill_forwards_total");
    assert_eq!(before, 16.0, "one at a time: one prefill each");
    let barrier = std::sync::Barrier::new(bodies.len());
    let together: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = bodies
            .iter()
            .map(|b| {
                let (url, barrier) = (&url, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    text(call(url, Some(b), None))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let forwards = gauge(&server, "vkformers_prefill_forwards_total") - before;
    assert!(forwards < 16.0, "16 requests arriving together took {forwards} prefill forwards");
    eprintln!("16 concurrent requests: {forwards} prefill forwards");
    assert_eq!(together, alone, "each request gives what it gives alone");
    assert_eq!(gauge(&server, "vkformers_host_sampled_rows_total"), 0.0, "every token chosen on the device");
    server.stop().unwrap();
}

/// The greedy new tokens of `prompt` on the cli model with the adapter in `adapter` (None: the
/// base), each loaded alone (`lora::load_with_adapter`: its own copy of the base), as text.
fn reference_text(prompt: &[u32], adapter: Option<&std::path::Path>, max_new: usize) -> String {
    use vkformers_generate::continuous::generate_continuous;
    use vkformers_generate::generation::GenerateOptions;
    let ctx = vkformers_vk::Context::new(&Default::default()).unwrap();
    let g = vkformers_tensor::Graph::new(&ctx);
    let model = match adapter {
        Some(a) => vkformers_models::lora::load_with_adapter(&g, &model_dir(), a).unwrap().0,
        None => Model::load(&g, &model_dir()).unwrap(),
    };
    let opts = GenerateOptions { eos: vec![2], ..GenerateOptions::greedy(max_new) };
    let out = generate_continuous(&g, &model, &[prompt.to_vec()], &opts, 1, &mut |_, _| false).unwrap();
    let tok = vkformers_io::HfTokenizer::from_dir(model_dir()).unwrap();
    tok.decode(&out.rows[0], true).unwrap()
}

/// Two adapters and the base served at once from one upload of the base: each model name gives
/// its own tokens (those of the model loaded alone), concurrently, and the served weights hold
/// the base once plus each adapter's own tensors.
#[test]
fn two_adapters_and_the_base_share_one_upload_and_give_their_own_tokens() {
    let lora = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_lora");
    let adapters = [("plain", lora.join("llama")), ("saved", lora.join("llama_modules_to_save"))];
    let prompt = [1u32, 44, 73, 84];
    let want: Vec<String> = std::iter::once(None)
        .chain(adapters.iter().map(|(_, d)| Some(d.as_path())))
        .map(|a| reference_text(&prompt, a, 10))
        .collect();
    assert!(want[0] != want[1] && want[0] != want[2] && want[1] != want[2], "three different models: {want:?}");

    let base_only = start(|_| {});
    let base_bytes = gauge(&base_only, "vkformers_weight_bytes");
    base_only.stop().unwrap();
    let server = start(|c| c.adapters = adapters.iter().map(|(n, d)| (n.to_string(), d.clone())).collect());
    let own: f64 = adapters
        .iter()
        .map(|(_, d)| vkformers_models::lora::Adapter::load(d).unwrap())
        .map(|a| a.tensors.values().map(|t| t.data.len() * 4).sum::<usize>() as f64)
        .sum();
    assert_eq!(
        gauge(&server, "vkformers_weight_bytes"),
        base_bytes + own,
        "the base once, plus each adapter's tensors"
    );
    assert!(own < base_bytes, "the adapters ({own} B) are smaller than the base ({base_bytes} B)");

    let url = server.url("/v1/completions");
    let body = |model: &str| json!({"model": model, "prompt": prompt, "max_tokens": 10, "temperature": 0}).to_string();
    let got: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = ["tiny", "plain", "saved"]
            .map(|m| {
                let (url, b) = (&url, body(m));
                s.spawn(move || {
                    let (status, r) = call(url, Some(&b), None);
                    assert_eq!(status, 200, "{r}");
                    r["choices"][0]["text"].as_str().unwrap().to_string()
                })
            })
            .into_iter()
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(got, want, "base, `plain` and `saved` served at once vs each loaded alone");
    server.stop().unwrap();
}

/// The warm-up (on by default) leaves no trace: once the server listens nothing runs, no KV block
/// is held and no counter counts its work; a greedy completion's tokens and log-probabilities and
/// a seeded, penalised one's draws (two choices: slots 0 and 1, where the warm-up ran penalised
/// rows) are those of a server started without it (and the greedy text that of
/// `generate_continuous`).
#[test]
fn the_warm_up_leaves_no_trace() {
    let warm = start(|c| c.max_batch = 8);
    for name in [
        "vkformers_running_requests",
        "vkformers_queue_depth",
        "vkformers_kv_blocks_in_use",
        "vkformers_prefill_forwards_total",
        "vkformers_prompt_tokens_total",
        "vkformers_generated_tokens_total",
        "vkformers_requests_finished_total",
        "vkformers_host_sampled_rows_total",
        "vkformers_engine_steps_total",
        "vkformers_engine_step_seconds_total",
        "vkformers_time_to_first_token_seconds_count",
    ] {
        assert_eq!(gauge(&warm, name), 0.0, "{name} after the warm-up");
    }
    assert!(gauge(&warm, "vkformers_kv_blocks_total") > 0.0, "the pools are published before listening");
    // (It ran: not with VKFORMERS_SERVE_WARMUP=0 in the environment.)
    assert!(gauge(&warm, "vkformers_warmup_seconds") > 0.0, "the warm-up ran");
    let prompt = [1u32, 44, 73, 84];
    let greedy = json!({"model": "tiny", "prompt": prompt, "max_tokens": 10, "temperature": 0, "logprobs": 3});
    let sampled = json!({"model": "tiny", "prompt": prompt, "max_tokens": 10, "temperature": 1.3, "top_p": 0.9,
        "seed": 5, "logprobs": 2, "n": 2, "presence_penalty": 0.7, "frequency_penalty": 0.3});
    let answers = |server: &Server| -> Vec<Value> {
        [&greedy, &sampled]
            .map(|b| {
                let (status, r) = call(&server.url("/v1/completions"), Some(&b.to_string()), None);
                assert_eq!(status, 200, "{r}");
                r["choices"].clone()
            })
            .to_vec()
    };
    let got = answers(&warm);
    assert!(gauge(&warm, "vkformers_prefill_forwards_total") <= 3.0, "only the three choices' prefills");
    let tokens: usize =
        got.iter().flat_map(|c| c.as_array().unwrap()).map(|c| c["logprobs"]["tokens"].as_array().unwrap().len()).sum();
    assert_eq!(gauge(&warm, "vkformers_generated_tokens_total"), tokens as f64, "only the three choices' tokens");
    assert_eq!(gauge(&warm, "vkformers_time_to_first_token_seconds_count"), 3.0);
    warm.stop().unwrap();
    let cold = start(|c| {
        c.max_batch = 8;
        c.warmup = false;
    });
    assert_eq!(gauge(&cold, "vkformers_warmup_seconds"), 0.0, "no warm-up");
    let want = answers(&cold);
    cold.stop().unwrap();
    assert_eq!(got, want, "with the warm-up vs without it: same tokens, log-probabilities and draws");
    assert_eq!(got[0][0]["text"], reference_text(&prompt, None, 10), "greedy vs generate_continuous");
}
