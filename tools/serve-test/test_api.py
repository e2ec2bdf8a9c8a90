"""The API surfaces agents use, through the official SDKs against `assay serve` (SmolLM2,
CPU): enforced json_schema (every sampled output parses and validates), json_object,
unsupported schema keywords refused with a 400, a tool-call round trip (forced by
tool_choice, blocking and streamed), logprobs in the chat and completions shapes, Anthropic
Messages (blocking, tool_use, streaming through the SDK's stream helper) and a Responses
request."""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import openai
import pytest

from conftest import MODEL

# Short keys and bounded values keep every answer a few dozen tokens.
PET = {
    "type": "object",
    "properties": {
        "k": {"enum": ["cat", "dog", "bird"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 9},
        "t": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
        "h": {"type": "object", "properties": {"big": {"type": "boolean"}}, "required": ["big"]},
    },
    "required": ["k", "n", "t", "h"],
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "maxLength": 12},
                                      "unit": {"enum": ["celsius", "fahrenheit"]}},
                       "required": ["city", "unit"]},
        "strict": True,
    },
}


def validate(schema: dict, v, path="$") -> None:
    """A validator for the subset of JSON schema used here (strict: no extra properties)."""
    if "enum" in schema:
        assert v in schema["enum"], f"{path}: {v!r} not in {schema['enum']}"
        return
    t = schema.get("type")
    if t == "object":
        assert isinstance(v, dict), f"{path}: {v!r} is not an object"
        props = schema.get("properties", {})
        for r in schema.get("required", []):
            assert r in v, f"{path}: missing {r}"
        for k, x in v.items():
            assert k in props, f"{path}: extra property {k}"
            validate(props[k], x, f"{path}.{k}")
    elif t == "array":
        assert isinstance(v, list), f"{path}: {v!r} is not an array"
        assert len(v) <= schema.get("maxItems", len(v)), f"{path}: too many items"
        for i, x in enumerate(v):
            validate(schema["items"], x, f"{path}[{i}]")
    elif t == "string":
        assert isinstance(v, str) and len(v) <= schema.get("maxLength", len(v)), f"{path}: {v!r}"
    elif t == "integer":
        assert isinstance(v, int) and not isinstance(v, bool), f"{path}: {v!r}"
        assert schema.get("minimum", v) <= v <= schema.get("maximum", v), f"{path}: {v}"
    elif t == "boolean":
        assert isinstance(v, bool), f"{path}: {v!r}"


def test_json_schema_every_sampled_output_validates(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}

    def one(seed: int):
        r = client.chat.completions.create(
            model=MODEL, max_tokens=32, temperature=1.0, seed=seed, response_format=fmt,
            messages=[{"role": "user", "content": "Describe a pet as JSON."}])
        return r.choices[0]

    t0 = time.time()
    with ThreadPoolExecutor(16) as pool:
        choices = list(pool.map(one, range(100)))
    texts = set()
    for c in choices:
        assert c.finish_reason == "stop", f"cut off: {c.message.content!r}"
        v = json.loads(c.message.content)
        validate(PET, v)
        texts.add(c.message.content)
    assert len(texts) > 10, "sampling with different seeds gave almost no variety"
    print(f"100 constrained requests in {time.time() - t0:.1f} s, {len(texts)} distinct")


def test_json_object_and_unsupported_schema(client):
    r = client.chat.completions.create(
        model=MODEL, max_tokens=40, temperature=0, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Give me a JSON object about Paris."}])
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.startswith("{")
    for schema, word in [({"type": "array", "uniqueItems": True}, "uniqueItems"),
                         ({"type": "object", "not": {"required": ["a"]}}, "not")]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}],
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        assert word in e.value.body["message"] and e.value.body["param"] == "response_format"


def test_tool_call_round_trip(client):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, tools=[WEATHER],
                                       tool_choice="required", max_tokens=60, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    [call] = c.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    args = json.loads(call.function.arguments)
    validate(WEATHER["function"]["parameters"], args)

    # the same call streamed as deltas (named tool_choice)
    stream = client.chat.completions.create(
        model=MODEL, messages=msgs, tools=[WEATHER], max_tokens=60, temperature=0, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    name, arguments, reasons = "", "", []
    for ch in stream:
        d = ch.choices[0].delta
        for tc in d.tool_calls or []:
            assert tc.index == 0
            name += tc.function.name or ""
            arguments += tc.function.arguments or ""
        reasons.append(ch.choices[0].finish_reason)
    assert name == "get_weather" and json.loads(arguments) == args
    assert reasons[-1] == "tool_calls"

    # the result goes back as a `tool` turn; the answer is text
    msgs += [c.message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'}]
    r2 = client.chat.completions.create(model=MODEL, messages=msgs, tools=[WEATHER],
                                        tool_choice="none", max_tokens=16, temperature=0)
    assert r2.choices[0].message.tool_calls is None
    assert r2.choices[0].message.content


def test_logprobs_chat_and_completions(client):
    kw = dict(model=MODEL, max_tokens=8, temperature=0,
              messages=[{"role": "user", "content": "What is the capital of France?"}])
    r = client.chat.completions.create(logprobs=True, top_logprobs=5, **kw)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(e.token for e in content) == r.choices[0].message.content
    for e in content:
        top = e.top_logprobs
        assert len(top) == 5
        # greedy: the chosen token is the most likely one, with the same value
        assert (e.token, e.logprob) == (top[0].token, top[0].logprob)
        assert all(a.logprob >= b.logprob for a, b in zip(top, top[1:]))
        assert all(t.logprob <= 0 for t in top)
        assert sum(math.exp(t.logprob) for t in top) <= 1 + 1e-9
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token or e.bytes
    # streamed logprobs are the same numbers
    s = client.chat.completions.create(logprobs=True, top_logprobs=5, stream=True, **kw)
    streamed = [e for ch in s if ch.choices and ch.choices[0].logprobs
                for e in ch.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]
    # completions shape
    c = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6,
                                  temperature=0, logprobs=3)
    lp = c.choices[0].logprobs
    assert "".join(lp.tokens) == c.choices[0].text
    assert len(lp.token_logprobs) == len(lp.tokens) == len(lp.top_logprobs) == len(lp.text_offset)
    for tok, v, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) <= 3 and max(top.values()) == v and top[tok] == v
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(top_logprobs=21, logprobs=True, **kw)


# This SDK version has no sampling parameters; ours still take `temperature` in the body.
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def claude(server, key_file):
    # the key goes as `x-api-key`, as Anthropic's SDK sends it
    return anthropic.Anthropic(base_url=server.url, api_key=key_file[1], max_retries=0, timeout=300)


def test_anthropic_messages_blocking_and_tools(claude):
    m = claude.messages.create(model=MODEL, max_tokens=12, system="Answer briefly.",
                               messages=[{"role": "user", "content": "What is the capital of France?"}],
                               extra_body=GREEDY)
    assert m.type == "message" and m.role == "assistant"
    assert m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens > 5 and 0 < m.usage.output_tokens <= 12
    tool = {"name": "get_weather", "description": "Current weather of a city",
            "input_schema": WEATHER["function"]["parameters"]}
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    m = claude.messages.create(model=MODEL, max_tokens=60, tools=[tool], tool_choice={"type": "any"},
                               messages=msgs, extra_body=GREEDY)
    assert m.stop_reason == "tool_use"
    [use] = [b for b in m.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.input["unit"] in ("celsius", "fahrenheit")
    msgs += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "21 C"}]}]
    m2 = claude.messages.create(model=MODEL, max_tokens=12, tools=[tool], tool_choice={"type": "none"},
                                messages=msgs, extra_body=GREEDY)
    assert m2.content[0].type == "text" and m2.stop_reason in ("end_turn", "max_tokens")
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=MODEL, max_tokens=8, extra_body={"temperature": 1.5},
                               messages=[{"role": "user", "content": "x"}])
    assert e.value.body["type"] == "error" and "temperature" in e.value.body["error"]["message"]


def test_anthropic_streaming_through_the_sdk_helper(claude):
    kw = dict(model=MODEL, max_tokens=12, extra_body=GREEDY,
              messages=[{"role": "user", "content": "What is the capital of France?"}])
    with claude.messages.stream(**kw) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    blocking = claude.messages.create(**kw)
    assert text and final.content[0].text == text == blocking.content[0].text
    assert final.stop_reason == blocking.stop_reason
    assert final.usage.output_tokens == blocking.usage.output_tokens


def test_responses_request(client):
    r = client.responses.create(model=MODEL, instructions="Answer briefly.",
                                input="What is the capital of France?", max_output_tokens=12,
                                temperature=0)
    assert r.object == "response" and r.status in ("completed", "incomplete")
    assert r.output_text and r.output[0].type == "message"
    assert 0 < r.usage.output_tokens <= 12
    r = client.responses.create(model=MODEL, input="Describe a pet.", max_output_tokens=48,
                                text={"format": {"type": "json_schema", "name": "pet", "schema": PET,
                                                 "strict": True}})
    assert r.status == "completed"
    validate(PET, json.loads(r.output_text))
    events = [e.type for e in client.responses.create(model=MODEL, input="Hi", max_output_tokens=4,
                                                      stream=True)]
    assert events[0] == "response.created" and events[-1] in ("response.completed", "response.incomplete")
    assert "response.output_text.delta" in events
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_1")
