#!/usr/bin/env python3
"""A stand-in for `vkformers serve` that answers every streamed completion at once (no model:
`max_tokens` chunks of one word each, then the usage chunk and `[DONE]`): what
tools/bench/serve.py's clients alone can take, its tokens/s and time-to-first-token ceiling.
Run it on the machine of the real run, then the same serve.py line against it:

  python3 tools/bench/serve_fake.py 8799 &
  python3 tools/bench/serve.py --base-url http://127.0.0.1:8799/v1 --model-name m --vocab 2000 \
      --clients 64 --requests 256 --max-tokens 256 --prompt-len 128 --prompt-spread 64 [--procs 8]

On a 2-core EPYC host one client process (--procs 1) tops out near 13,600 tokens/s with a
time-to-first-token p99 of 0.8 s: above the issue's 500 ms before any model runs. Standard
library only; HTTP/1.1 keep-alive with chunked transfer, as the openai client speaks it."""
import asyncio, json, sys, time

def chunk(i, text, finish=None, usage=None):
    d = {"id": "cmpl-x", "object": "text_completion", "created": 0, "model": "m",
         "choices": [] if usage else [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
    if usage:
        d["usage"] = usage
    return b"data: " + json.dumps(d).encode() + b"\n\n"

async def handle(reader, writer):
    while True:
        line = await reader.readline()
        if not line:
            break
        method, path, _ = line.decode().split(" ", 2)
        length = 0
        while True:
            h = await reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            k, v = h.decode().split(":", 1)
            if k.lower() == "content-length":
                length = int(v)
        body = await reader.readexactly(length) if length else b""
        if path.endswith("/metrics"):
            data = b"# none\n"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
            await writer.drain()
            continue
        req = json.loads(body)
        n = req.get("max_tokens", 16)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        def send(b):
            writer.write(b"%x\r\n" % len(b) + b + b"\r\n")
        for i in range(n):
            send(chunk(i, " w%d" % i, "length" if i == n - 1 else None))
            if i % 8 == 0:
                await writer.drain()
        send(chunk(0, "", usage={"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}))
        send(b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    writer.close()

async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8799)
    async with srv:
        await srv.serve_forever()

asyncio.run(main())
