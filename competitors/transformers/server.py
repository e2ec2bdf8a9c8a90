#!/usr/bin/env python3
"""The transformers arm of `harness pair --vs transformers` (issue 12: the numerical
reference arm): Hugging Face transformers' `generate` with a static KV cache, behind the
small part of the OpenAI completions protocol the harness speaks, on token ids.

    python3 server.py --model DIR|FILE.gguf --port PORT [--dtype D] [--ctx N] [--device cuda|cpu]
    python3 server.py --fake --port PORT      # no torch: a deterministic toy model

DIR is the `<stem>.hf/` folder `harness synth` writes next to a BF16 synthetic GGUF
(config.json + safetensors), the weights vLLM loads too; FILE.gguf a real model's GGUF (the
harness's CPU cells of catalog models), dequantized by transformers on load. The GPU image has torch and
transformers; nothing is carried for this arm.

Endpoints (what harness/src/pair and harness/src/bench/serve_load send):
  GET  /health                   200 once the model is loaded
  POST /v1/completions           {"prompt": [ids], "max_tokens": n, "temperature": 0,
                                  "ignore_eos": true, "stream": bool,
                                  "logprobs": k, "return_tokens_as_token_ids": true, ...}
       not streamed: {"choices": [{"text": "", "token_ids": [...], "logprobs": ...}],
                      "usage": {...}}
       streamed (SSE): one event per token {"choices": [{"text": "", "token_ids": [id]}]},
                      then {"choices": [], "usage": {...}}, then [DONE]
Greedy only (temperature 0; anything else is a 400). Requests are served one at a time
(a lock): the arm is a reference, not a server under load, so the harness pairs it on
single-stream cells. Every call into the model (load, warm-up, generate, top) runs on one
model thread (`ModelThread`): transformers compiles the static-cache decode step with CUDA
graphs, whose state torch keeps per thread, and a generate from an HTTP handler thread after
a warm-up on the main thread failed with a bare `AssertionError` (session 36 on the H200;
pytorch/pytorch#123177). The toy model checks the same rule, so the harness's protocol tests
go red if a call leaves the model thread. `ignore_eos` keeps generating through
end-of-generation tokens (`min_new_tokens`); without it the stop token ends the completion.
"""

import argparse
import json
import math
import os
import queue
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeModel:
    """A deterministic toy next-token rule (no torch): tests of the protocol here."""

    name = "fake"
    version = "fake-0"
    vocab = 1000

    def __init__(self):
        # The real arm's constraint (see the module docstring): the thread that built the
        # model is the only one that may call it. Checked here so that tests without torch
        # catch a call from a handler thread.
        self.thread = threading.get_ident()

    def check_thread(self):
        if threading.get_ident() != self.thread:
            raise AssertionError("the model was called from a thread other than the model thread")

    def logits(self, ids):
        self.check_thread()
        h = 0
        for t in ids[-4:]:
            h = (h * 1_000_003 + t + 7) % 2_147_483_647
        return [((h >> (i % 24)) ^ (i * 2_654_435_761)) % 997 / 97.0 for i in range(self.vocab)]

    def top(self, ids, k):
        row = self.logits(ids)
        m = max(row)
        lse = m + math.log(sum(math.exp(x - m) for x in row))
        order = sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]
        return [(i, row[i] - lse) for i in order]

    def generate(self, ids, n, ignore_eos, emit):
        ids = list(ids)
        for _ in range(n):
            t = self.top(ids, 1)[0][0]
            ids.append(t)
            emit(t)


class ModelThread:
    """One thread that makes every call into the model, in the order they are submitted."""

    def __init__(self):
        self.jobs = queue.Queue()
        threading.Thread(target=self.loop, name="model", daemon=True).start()

    def loop(self):
        while True:
            fn, done = self.jobs.get()
            try:
                value = fn()
            except BaseException as e:  # the caller's error, reported to it, never this thread's end
                traceback.print_exc()
                done(None, e)
            else:
                done(value, None)

    def submit(self, fn, done):
        """Run fn() on the model thread; then done(value, None) or done(None, exception) there."""
        self.jobs.put((fn, done))

    def call(self, fn):
        """Run fn() on the model thread and wait for its value (or raise its exception)."""
        box = []
        ev = threading.Event()

        def done(value, err):
            box.append((value, err))
            ev.set()

        self.submit(fn, done)
        ev.wait()
        value, err = box[0]
        if err is not None:
            raise err
        return value


class HfModel:
    """transformers' AutoModelForCausalLM on `device` (the GPU; `cpu` for the harness's CPU
    cells), greedy `generate` with a static cache."""

    name = "transformers"

    def __init__(self, path, dtype, ctx, device="cuda"):
        import torch
        import transformers

        self.torch = torch
        self.version = transformers.__version__
        self.ctx = ctx
        self.device = device
        if path.endswith(".gguf"):
            # A real model's GGUF (the harness's CPU cells of a catalog model): transformers
            # dequantizes it on load (needs the `gguf` and `accelerate` packages); f32 by
            # default, the closest to the dequantized values our reference computes with.
            dt = getattr(torch, dtype or "float32")
            d, f = os.path.split(os.path.abspath(path))
            self.model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=dt)
        else:
            dt = getattr(torch, dtype or "bfloat16")
            self.model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dt)
        self.model.to(device).eval()
        self.eos = self.model.generation_config.eos_token_id
        # The static cache sized once for the whole context (transformers >= 5.x reads
        # `max_cache_len`): later requests reuse the warm-up's cache and its compiled step
        # instead of reallocating and recompiling for each new length.
        self.sized_cache = hasattr(transformers.GenerationConfig(), "max_cache_len")
        # One warm-up generate: the static cache and its kernels are set up before /health.
        self.generate([1, 2, 3, 4], 4, True, lambda t: None)

    def top(self, ids, k):
        torch = self.torch
        with torch.inference_mode():
            x = torch.tensor([ids], device=self.device)
            row = self.model(x).logits[0, -1].float().log_softmax(-1)
            v, i = torch.topk(row, k)
        return list(zip(i.tolist(), v.tolist()))

    def generate(self, ids, n, ignore_eos, emit):
        torch = self.torch

        class Ids:
            """A streamer: `generate` puts the prompt first, then each new token."""

            def __init__(self):
                self.prompt_seen = False

            def put(self, value):
                if not self.prompt_seen:
                    self.prompt_seen = True
                    return
                for t in value.reshape(-1).tolist():
                    emit(int(t))

            def end(self):
                pass

        x = torch.tensor([ids], device=self.device)
        kw = dict(
            max_new_tokens=n,
            do_sample=False,
            cache_implementation="static",
            streamer=Ids(),
            attention_mask=torch.ones_like(x),
            pad_token_id=0,
        )
        if self.sized_cache:
            kw["max_cache_len"] = max(self.ctx, len(ids) + n)
        if ignore_eos:
            kw["min_new_tokens"] = n
        with torch.inference_mode():
            self.model.generate(x, **kw)


def make_handler(model, worker, lock):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            sys.stderr.write("%s\n" % (fmt % args))

        def reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client read what it needed (the status line) and closed
            self.close_connection = True

        def do_GET(self):
            if self.path == "/health":
                self.reply(200, {"status": "ok"})
            elif self.path == "/version":
                self.reply(200, {"engine": model.name, "version": model.version})
            else:
                self.reply(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            if self.path != "/v1/completions":
                return self.reply(404, {"error": {"message": f"no route {self.path}"}})
            try:
                n = int(self.headers.get("Content-Length", "0"))
                if n > 64 << 20:
                    raise ValueError("body over 64 MiB")
                req = json.loads(self.rfile.read(n))
                prompt = req.get("prompt")
                if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) and t >= 0 for t in prompt)):
                    raise ValueError("prompt must be a non-empty list of token ids")
                max_tokens = int(req.get("max_tokens", 16))
                if max_tokens < 1:
                    raise ValueError("max_tokens must be at least 1")
                if float(req.get("temperature", 1.0)) != 0.0:
                    raise ValueError("greedy only: temperature must be 0")
                k = req.get("logprobs")
                k = int(k) if k is not None else None
            except (ValueError, TypeError, json.JSONDecodeError) as e:
                return self.reply(400, {"error": {"message": str(e)}})
            ignore_eos = bool(req.get("ignore_eos", False))
            usage = lambda c: {"prompt_tokens": len(prompt), "completion_tokens": c,
                               "total_tokens": len(prompt) + c}
            with lock:
                if req.get("stream"):
                    self.stream(prompt, max_tokens, ignore_eos, usage)
                    return
                try:
                    out = []
                    worker.call(lambda: model.generate(prompt, max_tokens, ignore_eos, out.append))
                    choice = {"index": 0, "text": "", "token_ids": out, "finish_reason": "length"}
                    if k:
                        top = worker.call(lambda: model.top(prompt, k))
                        choice["logprobs"] = {
                            "tokens": [f"token_id:{out[0]}"],
                            "top_logprobs": [{f"token_id:{i}": lp for i, lp in top}],
                        }
                    self.reply(200, {"object": "text_completion", "model": req.get("model", ""),
                                     "choices": [choice], "usage": usage(len(out))})
                except Exception as e:  # a failed generate is the request's error, not the server's end
                    self.reply(500, {"error": {"message": f"{type(e).__name__}: {e}"}})

        def stream(self, prompt, max_tokens, ignore_eos, usage):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            q = queue.Queue()
            err = []
            finished = threading.Event()

            def done(_value, e):
                if e is not None:
                    err.append(f"{type(e).__name__}: {e}")
                q.put(None)
                finished.set()

            worker.submit(lambda: model.generate(prompt, max_tokens, ignore_eos, q.put), done)
            count = 0
            try:
                while True:
                    t = q.get()
                    if t is None:
                        break
                    count += 1
                    ev = {"choices": [{"index": 0, "text": "", "token_ids": [t]}]}
                    self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
                    self.wfile.flush()
                if err:
                    self.wfile.write(b"data: " + json.dumps({"error": {"message": err[0]}}).encode() + b"\n\n")
                self.wfile.write(b"data: " + json.dumps({"choices": [], "usage": usage(count)}).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            finished.wait()

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="the safetensors folder (config.json + *.safetensors)")
    ap.add_argument("--fake", action="store_true", help="a toy model, no torch (protocol tests)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--dtype", default=None,
                    help="torch dtype (default: bfloat16 for a safetensors folder, float32 for a .gguf)")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--device", default="cuda", help="torch device: cuda (the GPU cells) or cpu")
    a = ap.parse_args()
    if not (a.fake or a.model):
        ap.error("--model DIR or --fake")
    t0 = time.time()
    worker = ModelThread()
    model = worker.call(lambda: FakeModel() if a.fake else HfModel(a.model, a.dtype, a.ctx, a.device))
    sys.stderr.write(f"{model.name} {model.version} ready in {time.time() - t0:.1f} s on {a.host}:{a.port}\n")
    srv = ThreadingHTTPServer((a.host, a.port), make_handler(model, worker, threading.Lock()))
    srv.serve_forever()


if __name__ == "__main__":
    main()
