"""Malformed input: every case gets a 4xx with an OpenAI-style JSON error body, and the
server keeps serving after each."""

from __future__ import annotations

import json

import pytest

from conftest import MODEL

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def ok_chat():
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


def with_(**kw):
    d = ok_chat()
    d.update(kw)
    return json.dumps(d).encode()


CASES = [
    ("truncated JSON", CHAT, b'{"model": "smol", "messages": [{"role": "us', 400),
    ("empty body", CHAT, b"", 400),
    ("not an object", CHAT, b"[1, 2, 3]", 400),
    ("JSON null", CHAT, b"null", 400),
    ("invalid UTF-8", CHAT, b'{"model": "smol", "messages": [{"role": "user", "content": "\xff\xfe"}]}', 400),
    ("lone surrogate escape", CHAT, b'{"model": "smol", "messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 1}', 400),
    ("deeply nested", CHAT, b"[" * 100000 + b"]" * 100000, None),
    ("10 MB body", CHAT, b'{"model": "smol", "pad": "' + b"a" * (10 << 20) + b'"}', 413),
    ("unknown model", CHAT, with_(model="nope"), 404),
    ("model wrong type", CHAT, with_(model=7), 400),
    ("missing messages", CHAT, json.dumps({"model": MODEL}).encode(), 400),
    ("messages not a list", CHAT, with_(messages="hi"), 400),
    ("empty messages", CHAT, with_(messages=[]), 400),
    ("message not an object", CHAT, with_(messages=["hi"]), 400),
    ("role the template rejects", CHAT, with_(messages=[{"role": "wizard", "content": "hi"}]), 400),
    ("content wrong type", CHAT, with_(messages=[{"role": "user", "content": 5}]), 400),
    ("image content part", CHAT, with_(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), 400),
    ("negative max_tokens", CHAT, with_(max_tokens=-1), 400),
    ("zero max_tokens", CHAT, with_(max_tokens=0), 400),
    ("huge max_tokens", CHAT, with_(max_tokens=10**30), 400),
    ("float max_tokens", CHAT, with_(max_tokens=1.5), 400),
    ("string max_tokens", CHAT, with_(max_tokens="5"), 400),
    ("huge temperature", CHAT, with_(temperature=1e308), 400),
    ("temperature wrong type", CHAT, with_(temperature="hot"), 400),
    ("top_p zero", CHAT, with_(top_p=0), 400),
    ("huge seed", CHAT, with_(seed=10**40), 400),
    ("stop wrong type", CHAT, with_(stop=5), 400),
    ("too many stops", CHAT, with_(stop=["a", "b", "c", "d", "e"]), 400),
    ("stream wrong type", CHAT, with_(stream="yes"), 400),
    ("stream_options without stream", CHAT, with_(stream_options={"include_usage": True}), 400),
    ("n=2", CHAT, with_(n=2), 400),
    ("logit_bias", CHAT, with_(logit_bias={"1": 100}), 400),
    ("tool of unknown type", CHAT, with_(tools=[{"type": "code", "function": {"name": "f"}}]), 400),
    ("tool_choice naming no tool", CHAT,
     with_(tools=[{"type": "function", "function": {"name": "f"}}],
           tool_choice={"type": "function", "function": {"name": "g"}}), 400),
    ("unknown response_format", CHAT, with_(response_format={"type": "yaml"}), 400),
    ("unsupported schema keyword", CHAT,
     with_(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}), 400),
    ("top_logprobs out of range", CHAT, with_(logprobs=True, top_logprobs=99), 400),
    ("unknown field", CHAT, with_(frobnicate=True), 400),
    ("prompt missing", COMP, json.dumps({"model": MODEL}).encode(), 400),
    ("prompt wrong type", COMP, json.dumps({"model": MODEL, "prompt": {"a": 1}}).encode(), 400),
    ("several prompts", COMP, json.dumps({"model": MODEL, "prompt": ["a", "b"]}).encode(), 400),
    ("token id out of range", COMP, json.dumps({"model": MODEL, "prompt": [1, 10**9]}).encode(), 400),
    ("negative token id", COMP, json.dumps({"model": MODEL, "prompt": [1, -1]}).encode(), 400),
    ("prompt too long", COMP, json.dumps({"model": MODEL, "prompt": "word " * 3000, "max_tokens": 1}).encode(), 413),
    ("echo", COMP, json.dumps({"model": MODEL, "prompt": "a", "echo": True}).encode(), 400),
]


def new_client(server, key):
    import httpx2 as httpx

    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=300)


@pytest.mark.parametrize("name,path,body,status", CASES, ids=[c[0] for c in CASES])
def test_malformed_gets_4xx_and_server_keeps_serving(server, key_file, name, path, body, status):
    # Each case has its own connection, and "keeps serving" is checked on another new one:
    # a server may close a connection whose request body it did not read (the 10 MB case
    # is refused after the first megabytes), and a pooled client that reuses such a
    # connection races that close (RFC 9112 section 9.6).
    with new_client(server, key_file[1]) as bad:
        r = bad.post(path, content=body, headers={"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500, (name, r.status_code, r.text[:300])
    if status is not None:
        assert r.status_code == status, (name, r.text[:300])
    err = r.json()["error"]
    assert err["message"] and err["type"], err
    if name == "10 MB body":
        # The body was left unread: the server says it closes the connection.
        assert r.headers.get("connection") == "close", dict(r.headers)
    assert server.alive()
    with new_client(server, key_file[1]) as fresh:
        assert fresh.get("/health").status_code == 200
        ok = fresh.post(CHAT, json=ok_chat())
        assert ok.status_code == 200, ok.text


def test_wrong_method_and_route(http):
    for method, path, status in [("GET", CHAT, 405), ("DELETE", "/v1/models", 405), ("GET", "/v1/nothing", 404),
                                 ("POST", "/nothing", 404)]:
        r = http.request(method, path)
        assert r.status_code == status
        assert r.json()["error"]["message"]


def test_wrong_content_type_is_still_parsed_as_json(http):
    r = http.post(CHAT, content=json.dumps(ok_chat()).encode(), headers={"Content-Type": "text/plain"})
    assert r.status_code == 200
