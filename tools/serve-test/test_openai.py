"""`assay serve` through the official OpenAI SDK: chat and completion, blocking and
streaming, stop sequences, usage (with cached prompt tokens), models list, auth failures,
error bodies."""

from __future__ import annotations

import openai
import pytest

from conftest import MODEL

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_chat_blocking_greedy_is_reproducible_with_usage(client):
    a = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=12, temperature=0)
    b = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=12, temperature=0)
    assert a.object == "chat.completion"
    assert a.choices[0].message.role == "assistant"
    text = a.choices[0].message.content
    assert "Paris" in text
    assert b.choices[0].message.content == text
    assert a.choices[0].finish_reason in ("stop", "length")
    u = a.usage
    assert u.prompt_tokens > 10 and 0 < u.completion_tokens <= 12
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    # The repeat reused the first one's prompt from the prefix cache.
    assert b.usage.prompt_tokens_details.cached_tokens > 0


def test_chat_streaming_equals_blocking(client):
    full = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=12, temperature=0)
    stream = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    text, reasons, usage = "", [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            if c.finish_reason:
                reasons.append(c.finish_reason)
    assert text == full.choices[0].message.content
    assert reasons == [full.choices[0].finish_reason]
    assert usage is not None and usage.completion_tokens == full.usage.completion_tokens


def test_completion_blocking_and_streaming(client):
    r = client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=6, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 6
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="The quick brown fox", max_tokens=6, temperature=0, stream=True) if c.choices)
    assert text == r.choices[0].text


def test_stop_sequences_blocking_and_streaming(client):
    full = client.completions.create(model=MODEL, prompt="1, 2, 3, 4, 5,", max_tokens=12, temperature=0).choices[0].text
    mid = len(full) // 2
    stop = full[mid - 1:mid + 2]
    want = full[:full.index(stop)]
    r = client.completions.create(model=MODEL, prompt="1, 2, 3, 4, 5,", max_tokens=12, temperature=0, stop=[stop])
    assert r.choices[0].text == want
    assert r.choices[0].finish_reason == "stop"
    got = ""
    for c in client.completions.create(model=MODEL, prompt="1, 2, 3, 4, 5,", max_tokens=12, temperature=0,
                                       stop=stop, stream=True):
        got += c.choices[0].text if c.choices else ""
    assert got == want


def test_seeded_sampling_is_reproducible(client):
    kw = dict(model=MODEL, messages=QUESTION, max_tokens=8, temperature=0.9, top_p=0.95, seed=42)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_auth_failures(server):
    for key in ("wrong-key", ""):
        bad = openai.OpenAI(base_url=server.url + "/v1", api_key=key or "x", max_retries=0)
        if not key:
            bad = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0,
                                default_headers={"Authorization": ""})
        with pytest.raises(openai.AuthenticationError) as e:
            bad.models.list()
        assert e.value.status_code == 401
        assert e.value.body["type"] == "authentication_error"


def test_error_bodies(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=QUESTION, max_tokens=2)
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=2, logit_bias={"5": 10})
    assert e.value.body["param"] == "logit_bias"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=2, n=2)
    assert e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=2, logprobs=True,
                                       top_logprobs=21)
    assert e.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=100000)
    assert e.value.body["param"] == "max_tokens"
