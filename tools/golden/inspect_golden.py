#!/usr/bin/env python3
"""Golden facts for `assay inspect`, from the `gguf` Python package (an independent reader).

For each catalog model: architecture, tensor count, quant census (bytes per format), and,
for a few tensors of every format present, the first 16 dequantized values and the sum and
L2 norm of all of them (accumulated in float64), via `gguf.quants.dequantize`.
Writes engine/tests/fixtures/inspect/<model>.json. Run from the repository root after
`tools/fetch-models`:  python3 tools/golden/inspect_golden.py
Requires: pip install -r tools/golden/requirements.txt
"""

import importlib.metadata
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import gguf
from gguf.quants import dequantize

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "engine" / "tests" / "fixtures" / "inspect"


def models_dir() -> Path:
    env = os.environ.get("ASSAY_MODELS_DIR")
    return Path(env) if env else Path.home() / ".cache" / "assay" / "models"


def pick_tensors(tensors):
    """Per format: the smallest tensor and the largest under 8M elements; plus token_embd."""
    by_fmt = defaultdict(list)
    for t in tensors:
        by_fmt[t.tensor_type.name].append(t)
    chosen = {}
    for fmt, ts in by_fmt.items():
        ts = sorted(ts, key=lambda t: (int(t.n_elements), t.name))
        chosen[ts[0].name] = ts[0]
        mid = [t for t in ts if int(t.n_elements) <= 8 * 1024 * 1024]
        if mid:
            chosen[mid[-1].name] = mid[-1]
    for t in tensors:
        if t.name == "token_embd.weight":
            chosen[t.name] = t
    return [chosen[k] for k in sorted(chosen)]


def main() -> int:
    catalog = json.loads((ROOT / "tools" / "models.json").read_text())
    OUT.mkdir(parents=True, exist_ok=True)
    for m in catalog["models"]:
        path = models_dir() / m["file"]
        if not path.exists():
            print(f"missing {path}; run tools/fetch-models", file=sys.stderr)
            return 1
        r = gguf.GGUFReader(str(path))
        arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
        census = defaultdict(int)
        for t in r.tensors:
            census[t.tensor_type.name] += int(t.n_bytes)
        tensors = []
        for t in pick_tensors(r.tensors):
            vals = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1)
            tensors.append({
                "name": t.name,
                "type": t.tensor_type.name,
                "shape": [int(x) for x in t.shape],
                "first": [float(x) for x in vals[:16]],
                "sum": float(vals.sum()),
                "l2": float(np.sqrt((vals * vals).sum())),
            })
        doc = {
            "model": m["name"],
            "sha256": m["sha256"],
            "gguf_package_version": importlib.metadata.version("gguf"),
            "architecture": arch,
            "tensor_count": len(r.tensors),
            "quant_census_bytes": dict(sorted(census.items())),
            "tensors": tensors,
        }
        dst = OUT / f"{m['name']}.json"
        dst.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {dst.relative_to(ROOT)} ({len(tensors)} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
