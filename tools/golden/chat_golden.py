#!/usr/bin/env python3
"""Golden chat prompts for Assay's chat templates, rendered by the reference Jinja engine.

For each test model in the models cache ($ASSAY_MODELS_DIR, else ~/.cache/assay/models) and
each conversation in engine/tests/fixtures/chat/conversations/*.json, this renders the model's
own `tokenizer.chat_template` (read with the `gguf` package) with `jinja2` set up the way
Hugging Face's `apply_chat_template` sets it up:

  * ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) + loopcontrols,
  * globals raise_exception(msg) and strftime_now(fmt) (frozen at FIXED_TIME, UTC),
  * filter tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    = json.dumps with those arguments (no HTML escaping),
  * context: messages, tools (None when absent), add_generation_prompt, bos_token and
    eos_token (the texts of the file's BOS/EOS ids).

A Gemma-family file without a template uses Assay's built-in fallback
(engine/src/tokenizer/templates/gemma.jinja), as the engine does.

Output: engine/tests/fixtures/chat/golden/<model file stem>/<conversation>.txt holding the
prompt exactly, or the single line `!!ERROR` when the template raises (the Rust test then
expects an error). engine/tests/tokenizer_chat.rs renders the same inputs with minijinja and
compares byte for byte.

Usage:  pip install jinja2==3.1.6 gguf==0.19.0
        python3 tools/golden/chat_golden.py [--check]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import gguf
import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parents[2]
CONVERSATIONS = ROOT / "engine/tests/fixtures/chat/conversations"
GOLDEN = ROOT / "engine/tests/fixtures/chat/golden"
GEMMA_FALLBACK = ROOT / "engine/src/tokenizer/templates/gemma.jinja"
MODELS = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "Qwen2.5-Coder-0.5B-Instruct.gguf",
    "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
    "Gemma-3-270M.Q4_K_M.gguf",
]
# 2024-06-15 12:00:00 UTC; must equal FIXED_TIME in engine/tests/tokenizer_chat.rs.
FIXED_TIME = 1718452800
JINJA2_VERSION = "3.1.6"


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return datetime.datetime.fromtimestamp(FIXED_TIME, datetime.timezone.utc).strftime(fmt)


def make_env() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def field(reader: gguf.GGUFReader, key: str):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def model_template(path: Path) -> tuple[str, str, str]:
    r = gguf.GGUFReader(str(path))
    tokens = field(r, "tokenizer.ggml.tokens") or []

    def tok(key: str) -> str:
        i = field(r, key)
        return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else ""

    template = field(r, "tokenizer.chat_template")
    if template is None:
        arch = field(r, "general.architecture") or ""
        if not arch.startswith("gemma"):
            raise SystemExit(f"{path.name}: no chat template and no built-in one for {arch!r}")
        template = GEMMA_FALLBACK.read_text(encoding="utf-8")
    return template, tok("tokenizer.ggml.bos_token_id"), tok("tokenizer.ggml.eos_token_id")


def render(env, template: str, bos: str, eos: str, conv: dict) -> str:
    try:
        return env.from_string(template).render(
            messages=conv["messages"],
            tools=conv.get("tools"),
            add_generation_prompt=conv.get("add_generation_prompt", True),
            bos_token=bos,
            eos_token=eos,
        )
    except jinja2.exceptions.TemplateError:
        return "!!ERROR\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = ap.parse_args()
    if jinja2.__version__ != JINJA2_VERSION:
        print(f"warning: jinja2 {jinja2.__version__}, goldens were made with {JINJA2_VERSION}", file=sys.stderr)
    models_dir = Path(os.environ.get("ASSAY_MODELS_DIR", Path.home() / ".cache/assay/models"))
    env = make_env()
    convs = sorted(CONVERSATIONS.glob("*.json"))
    bad = 0
    for name in MODELS:
        path = models_dir / name
        if not path.exists():
            print(f"skip {name}: not in {models_dir} (run tools/fetch-models)")
            continue
        template, bos, eos = model_template(path)
        outdir = GOLDEN / path.stem
        outdir.mkdir(parents=True, exist_ok=True)
        for c in convs:
            conv = json.loads(c.read_text(encoding="utf-8"))
            text = render(env, template, bos, eos, conv)
            out = outdir / (c.stem + ".txt")
            if args.check:
                if not out.exists() or out.read_bytes() != text.encode("utf-8"):
                    print(f"DIFF {out.relative_to(ROOT)}")
                    bad += 1
            else:
                out.write_bytes(text.encode("utf-8"))
                print(f"wrote {out.relative_to(ROOT)} ({len(text)} chars)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
