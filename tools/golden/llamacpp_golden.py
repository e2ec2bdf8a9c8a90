#!/usr/bin/env python3
"""Golden greedy continuations from llama.cpp's CPU backend, for Assay's reference executor.

For each real test model and each prompt below this records, as one compact JSON file per
model under engine/tests/fixtures/llamacpp/:

  - the prompt token ids exactly as llama.cpp tokenized them (so the executor comparison
    does not depend on Assay's tokenizer),
  - the greedy continuation of N_STEPS tokens (llama.cpp's own argmax at each step), and
  - the top-10 (token id, logit) of the logits at each step (the logits the step's token
    was chosen from), rounded to 1e-4.

llama.cpp comes from the `llama-cpp-python==0.3.36` sdist on PyPI, compiled here without
-march=native (a native build uses instructions this VM traps):

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
        pip install --no-binary llama-cpp-python llama-cpp-python==0.3.36

`--install VENV` does exactly that into a fresh virtual environment and re-runs the script
with it (about 25 minutes of compiling on 2 cores). Flash attention is off, the KV cache is
llama.cpp's default f16, 2 threads, one sequence, prompt evaluated in one batch.

Prompts: plain English text, Python code, a chat-templated request (the model's own GGUF
chat template rendered with jinja2; Gemma-3-270M ships none, so its turn markup is written
out), and a long (~1000 token) passage, which on Gemma 3 also crosses the 512-token sliding
window.

Usage:  tools/golden/llamacpp_golden.py [--models-dir DIR] [--out DIR] [--install VENV]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

LLAMA_CPP_PYTHON = "0.3.36"
CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
N_STEPS = 32
TOP = 10
THREADS = 2

MODELS = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "Qwen2.5-Coder-0.5B-Instruct.gguf",
    "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
    "Gemma-3-270M.Q4_K_M.gguf",
]

PLAIN = "The old lighthouse keeper climbed the spiral stairs every evening, and"

CODE = (
    "def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n"
    '    """Merge two sorted lists into one sorted list."""\n'
)

CHAT_USER = "Explain in two sentences why the sky is blue."

LONG = """\
The story of how people learned to keep time is, in many ways, the story of how they \
learned to cooperate. Long before anyone could name the hour, farmers watched the sky \
for the signs that told them when to plant and when to harvest. The rising of a bright \
star before dawn, the length of a shadow at noon, the return of migrating birds: each of \
these was a kind of clock, slow and seasonal, shared by everyone who lived under the \
same sky.

The first instruments that divided the day were simple. A stick set upright in the \
ground cast a shadow that swung from west to east as the sun crossed the sky, and marks \
scratched around it turned the shadow into a pointer. Sundials grew more refined over \
the centuries, with carefully angled gnomons and dials laid out for a particular \
latitude, but they all shared one weakness: they were useless at night and under \
clouds. Water clocks filled that gap. A vessel with a small hole in its base emptied \
at a nearly steady rate, and lines on its inner wall showed how much time had passed. \
Courts used them to limit the length of speeches, and astronomers used them to time the \
passage of stars.

Mechanical clocks appeared in European monasteries and town squares in the late Middle \
Ages. Their heart was the escapement, a device that let a falling weight turn a gear \
train in small, regular steps instead of all at once. These early clocks were not very \
accurate; they could gain or lose a quarter of an hour in a day, and they were often \
corrected by comparing them with a sundial. Still, they changed daily life. The bells \
of a tower clock could be heard across a whole town, and the rhythm of work, prayer and \
trade began to follow the hours they struck rather than the movement of the sun.

The great leap in precision came with the pendulum. A pendulum of a given length swings \
with almost the same period whether its arc is large or small, and a clock regulated by \
one could keep time to within a few seconds a day. Soon afterwards the balance spring \
did for portable watches what the pendulum had done for clocks. For the first time, an \
ordinary person could carry a reasonably accurate timepiece, and the minute hand became \
a common sight.

Accurate time turned out to be essential at sea. A navigator could find latitude from \
the height of the sun or the pole star, but longitude depended on knowing the time at \
home while observing the local noon. Every four minutes of error meant a degree of \
longitude, and on a long voyage that could mean missing an island entirely or running \
onto rocks in the dark. Governments offered large prizes for a solution, and after \
decades of work a carpenter and self-taught clockmaker built a series of marine \
chronometers that kept time well enough, through storms and changes of temperature, to \
settle the problem.

Railways brought the next change. When trains began to connect distant cities, the \
local times kept by each town, which differed by a few minutes from place to place, \
became a source of confusion and even of accidents. Railway companies adopted standard \
times, and eventually whole countries divided themselves into time zones, each keeping \
a single official time. The telegraph carried time signals along the lines, so that \
stations hundreds of miles apart could set their clocks to the same second.

In the twentieth century, quartz crystals replaced pendulums and springs in most \
clocks. A thin slice of quartz, made to vibrate by an electric current, oscillates at a \
very stable frequency, and counting those vibrations gives a clock that drifts by only \
a fraction of a second each day. Quartz watches became so cheap that almost everyone \
could own one. For the most demanding tasks, however, even quartz was not good enough. \
Atomic clocks, which count the oscillations of radiation absorbed or emitted by atoms, \
are so stable that they would lose less than a second over millions of years. Since the \
middle of the century the second itself has been defined by such atoms rather than by \
the rotation of the earth.

Today, precise time is woven invisibly into ordinary life. Satellite navigation works \
by comparing signals from clocks in orbit, and an error of a millionth of a second \
would put a position off by hundreds of meters. Computer networks, power grids and \
financial markets all depend on clocks that agree with one another to tiny fractions \
of a second. Yet the basic idea has not changed since the first stick was pushed into \
the ground: find something that repeats regularly, count the repetitions, and agree \
with your neighbors on what the count means. Looking back over this long history, the \
most important lesson is that"""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def install(venv: Path) -> None:
    """Build llama-cpp-python from its sdist into `venv`, then re-run this script there."""
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = dict(os.environ, CMAKE_ARGS=CMAKE_ARGS)
    subprocess.run(
        [str(py), "-m", "pip", "install", "--no-binary", "llama-cpp-python",
         f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "jinja2"],
        check=True, env=env,
    )
    args = [a for a in sys.argv[1:]]
    i = args.index("--install")
    del args[i:i + 2]
    os.execv(str(py), [str(py), __file__, *args])


def chat_prompt(llm, model_name: str) -> tuple[str, str]:
    """The chat-templated prompt text and how it was made."""
    tpl = llm.metadata.get("tokenizer.chat_template")
    messages = [{"role": "user", "content": CHAT_USER}]
    if tpl:
        import jinja2

        def raise_exception(msg):
            raise jinja2.TemplateError(msg)

        env = jinja2.Environment(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        text = env.from_string(tpl).render(
            messages=messages, add_generation_prompt=True, bos_token="", eos_token=""
        )
        return text, "gguf chat template (jinja2, bos/eos rendered empty)"
    # Gemma 3 turn markup (the file has no template); BOS comes from add_bos.
    text = f"<start_of_turn>user\n{CHAT_USER}<end_of_turn>\n<start_of_turn>model\n"
    return text, "gemma turn markup written out (no template in the file)"


def record(llm, tokens: list[int], n_vocab: int):
    import numpy as np

    llm.reset()
    llm.eval(tokens)
    steps = []
    for _ in range(N_STEPS):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,)).copy()
        order = np.lexsort((np.arange(n_vocab), -logits))[:TOP]
        top = [[int(i), round(float(logits[i]), 4)] for i in order]
        tok = int(order[0])
        steps.append({"token": tok, "top": top})
        llm.eval([tok])
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", type=Path,
                    default=Path(os.environ.get("ASSAY_MODELS_DIR", Path.home() / ".cache/assay/models")))
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parents[2] / "engine/tests/fixtures/llamacpp")
    ap.add_argument("--install", type=Path, metavar="VENV", help="build llama-cpp-python into VENV first")
    ap.add_argument("--only", help="only this model file")
    args = ap.parse_args()
    if args.install:
        install(args.install)

    import llama_cpp
    from llama_cpp import Llama

    if llama_cpp.__version__ != LLAMA_CPP_PYTHON:
        sys.exit(f"llama-cpp-python {llama_cpp.__version__} found, {LLAMA_CPP_PYTHON} required (use --install)")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        if args.only and name != args.only:
            continue
        path = args.models_dir / name
        if not path.exists():
            print(f"skip {name}: not in {args.models_dir}", file=sys.stderr)
            continue
        llm = Llama(model_path=str(path), n_ctx=2048, n_batch=2048, n_ubatch=2048, n_threads=THREADS,
                    n_threads_batch=THREADS, logits_all=False, flash_attn=False, verbose=False, seed=0)
        n_vocab = llm.n_vocab()
        add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"
        chat_text, chat_how = chat_prompt(llm, name)
        prompts = [("plain", PLAIN, "plain text"), ("code", CODE, "python code"),
                   ("chat", chat_text, chat_how), ("long", LONG, "long passage")]
        out = {
            "model": name,
            "model_sha256": sha256(path),
            "producer": f"llama-cpp-python {LLAMA_CPP_PYTHON} (CPU, CMAKE_ARGS={CMAKE_ARGS}, "
                        f"{THREADS} threads, f16 KV cache, flash attention off)",
            "n_vocab": n_vocab,
            "add_bos": add_bos,
            "steps": N_STEPS,
            "prompts": [],
        }
        for pid, text, how in prompts:
            tokens = llm.tokenize(text.encode(), add_bos=add_bos, special=True)
            steps = record(llm, tokens, n_vocab)
            cont = llm.detokenize([s["token"] for s in steps]).decode("utf-8", "replace")
            out["prompts"].append({"id": pid, "how": how, "text": text, "tokens": tokens,
                                   "continuation": cont, "steps": steps})
            print(f"{name} {pid}: {len(tokens)} prompt tokens -> {cont!r}", file=sys.stderr)
        dst = args.out / (Path(name).stem + ".json")
        with dst.open("w") as f:
            # One line per step keeps the file diffable and compact.
            f.write("{\n")
            for k in ("model", "model_sha256", "producer", "n_vocab", "add_bos", "steps"):
                f.write(f"  {json.dumps(k)}: {json.dumps(out[k])},\n")
            f.write('  "prompts": [\n')
            for i, p in enumerate(out["prompts"]):
                f.write("    {\n")
                for k in ("id", "how", "text", "continuation"):
                    f.write(f"      {json.dumps(k)}: {json.dumps(p[k])},\n")
                f.write(f'      "tokens": {json.dumps(p["tokens"])},\n')
                f.write('      "steps": [\n')
                for j, s in enumerate(p["steps"]):
                    comma = "," if j + 1 < len(p["steps"]) else ""
                    f.write(f"        {json.dumps(s, separators=(',', ':'))}{comma}\n")
                f.write("      ]\n")
                f.write("    }" + ("," if i + 1 < len(out["prompts"]) else "") + "\n")
            f.write("  ]\n}\n")
        print(f"wrote {dst}", file=sys.stderr)
        del llm


if __name__ == "__main__":
    main()
