"""Drives `vkformers serve` with the official `openai` client for tests/serve_openai.rs.

Reads one job (JSON) on stdin, prints one result (JSON) on stdout:
- {"action": "run", "mode": "sequential" | "concurrent", "requests": [{"endpoint": "completions" |
  "chat" | "embeddings", "kwargs": {...}}]}: per request its choices' texts, finish reasons,
  log-probabilities and usage (embeddings: the vectors, decoded by the client, and usage), or the
  error status; streamed requests are gathered from their chunks.
- {"action": "queue_full", "kwargs": {...}}: opens a long stream, sends a second request once the
  first chunk came (expected: 429), then reads the stream to its end.
- {"action": "hold", "kwargs": {...}}: opens a stream, prints "first" once a chunk came, reads it
  to its end and prints the result (the SIGTERM test stops the server meanwhile).
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor

import openai


def client(job):
    return openai.OpenAI(base_url=job["base_url"], api_key=job.get("api_key") or "none", max_retries=0, timeout=300)


def gather_stream(endpoint, chunks):
    texts, finish, logprobs, usage = {}, {}, {}, None
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for c in chunk.choices:
            if endpoint == "chat":
                piece = c.delta.content or ""
                lps = [e.logprob for e in c.logprobs.content] if c.logprobs and c.logprobs.content else []
            else:
                piece = c.text or ""
                lps = list(c.logprobs.token_logprobs) if c.logprobs and c.logprobs.token_logprobs else []
            texts[c.index] = texts.get(c.index, "") + piece
            logprobs.setdefault(c.index, []).extend(lps)
            if c.finish_reason is not None:
                finish[c.index] = c.finish_reason
    n = len(texts)
    return {
        "texts": [texts[i] for i in range(n)],
        "finish": [finish.get(i) for i in range(n)],
        "logprobs": [logprobs.get(i, []) for i in range(n)],
        "usage": usage,
    }


def gather(endpoint, resp):
    texts, finish, logprobs = [], [], []
    for c in sorted(resp.choices, key=lambda c: c.index):
        if endpoint == "chat":
            texts.append(c.message.content)
            logprobs.append([e.logprob for e in c.logprobs.content] if c.logprobs else [])
        else:
            texts.append(c.text)
            logprobs.append(list(c.logprobs.token_logprobs) if c.logprobs else [])
        finish.append(c.finish_reason)
    return {"texts": texts, "finish": finish, "logprobs": logprobs, "usage": resp.usage.model_dump()}


EXTRAS = ("top_k", "min_p", "repetition_penalty")


def create(cl, endpoint, kwargs):
    """The client takes vLLM's extra sampling fields through `extra_body`."""
    api = cl.chat.completions if endpoint == "chat" else cl.completions
    extra = {k: kwargs[k] for k in EXTRAS if k in kwargs}
    rest = {k: v for k, v in kwargs.items() if k not in EXTRAS}
    return api.create(**rest, extra_body=extra or None)


def one(cl, req):
    endpoint, kwargs = req["endpoint"], req["kwargs"]
    try:
        if endpoint == "embeddings":
            # Without encoding_format the client asks for base64 and decodes it itself.
            resp = cl.embeddings.create(**kwargs)
            data = sorted(resp.data, key=lambda d: d.index)
            return {"embeddings": [list(map(float, d.embedding)) for d in data], "usage": resp.usage.model_dump()}
        resp = create(cl, endpoint, kwargs)
        if kwargs.get("stream"):
            return gather_stream(endpoint, resp)
        return gather(endpoint, resp)
    except openai.APIStatusError as e:
        return {"status": e.status_code, "error": e.body}


def run(job):
    cl = client(job)
    reqs = job["requests"]
    if job["mode"] == "concurrent":
        with ThreadPoolExecutor(max_workers=len(reqs)) as pool:
            return list(pool.map(lambda r: one(cl, r), reqs))
    return [one(cl, r) for r in reqs]


def queue_full(job):
    cl = client(job)
    stream = cl.completions.create(stream=True, **job["kwargs"])
    it = iter(stream)
    first = next(it)
    second = one(cl, {"endpoint": "completions", "kwargs": {**job["kwargs"], "max_tokens": 2}})
    rest = gather_stream("completions", [first, *it])
    return {"second": second, "first": rest}


def hold(job):
    cl = client(job)
    it = iter(cl.completions.create(stream=True, **job["kwargs"]))
    first = next(it)
    print("first", flush=True)
    return gather_stream("completions", [first, *it])


def main():
    job = json.load(sys.stdin)
    out = {"run": run, "queue_full": queue_full, "hold": hold}[job["action"]](job)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
