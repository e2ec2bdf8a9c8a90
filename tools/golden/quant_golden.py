#!/usr/bin/env python3
"""Golden vectors for Assay's quant formats, made with an independent implementation.

For every format Assay implements this writes, under engine/tests/fixtures/quant/:

  <FMT>.bin      the raw GGML block bytes of N random blocks, followed by the
                 dequantized values (little-endian f32) that `gguf.quants.dequantize`
                 (the `gguf` PyPI package, llama.cpp's Python side) computes for them;
  manifest.json  per format: ggml type id, block geometry, block count, byte offsets,
                 sha256 of the .bin; plus the seed and the gguf / numpy versions used.

The blocks are random bytes, except that every f16 scale field (d, dmin, m) is replaced
by a finite random f16 of random sign whose magnitude is log-uniform over [2^-18, 2^1]
(so some are f16 subnormals, none is zero, NaN or Inf). The plain float formats get
random bit patterns with a random sign and mantissa and an exponent field drawn
uniformly from zero (subnormals) up to the f16 maximum (F16) or 2^40 (F32, BF16, so that
dot products stay finite in f32); never NaN or Inf. Everything is drawn from one seeded numpy PCG64 generator, so a rerun with
the same pinned versions (requirements.txt) reproduces the fixtures byte for byte.

Usage:  python3 -m venv .venv-golden && .venv-golden/bin/pip install -r tools/golden/requirements.txt
        .venv-golden/bin/python tools/golden/quant_golden.py [--out DIR] [--check]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

SEED = 20250601
N_BLOCKS = 8  # blocks per quantized format
N_SCALAR = 256  # values for the plain float formats (F32, F16, BF16)

# Byte offsets of the f16 scale fields inside one block, per format (GGML layouts).
F16_FIELDS: dict[str, list[int]] = {
    "Q4_0": [0],  # d, qs[16]
    "Q4_1": [0, 2],  # d, m, qs[16]
    "Q5_0": [0],  # d, qh[4], qs[16]
    "Q5_1": [0, 2],  # d, m, qh[4], qs[16]
    "Q8_0": [0],  # d, qs[32] (int8)
    "Q2_K": [80, 82],  # scales[16], qs[64], d, dmin
    "Q3_K": [108],  # hmask[32], qs[64], scales[12], d
    "Q4_K": [0, 2],  # d, dmin, scales[12], qs[128]
    "Q5_K": [0, 2],  # d, dmin, scales[12], qh[32], qs[128]
    "Q6_K": [208],  # ql[128], qh[64], scales[16] (int8), d
    "IQ4_NL": [0],  # d, qs[16]
    "IQ4_XS": [0],  # d, scales_h (u16), scales_l[4], qs[128]
}

FORMATS = [
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
]


def random_scale_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """n finite, non-zero f16 values: random sign, log-uniform magnitude in [2^-18, 2^1]."""
    mag = np.exp2(rng.uniform(-18.0, 1.0, size=n))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    v = (sign * mag).astype(np.float16)
    # the smallest magnitudes can round to zero in f16; push them to the smallest subnormal
    tiny = np.float16(np.ldexp(1.0, -24))
    v = np.where(v == 0, np.copysign(tiny, sign).astype(np.float16), v)
    assert np.all(np.isfinite(v)) and np.all(v != 0)
    return v.astype(np.float16)


def random_float_bits(rng: np.random.Generator, n: int, mant_bits: int, exp_bits: int, exp_max: int) -> np.ndarray:
    """n random float bit patterns (sign, exponent field in [0, exp_max], random mantissa).

    Exponent field 0 gives zeros and subnormals; exp_max stays below all-ones, so no NaN/Inf.
    """
    sign = rng.integers(0, 2, size=n, dtype=np.uint64)
    exp = rng.integers(0, exp_max + 1, size=n, dtype=np.uint64)
    mant = rng.integers(0, 1 << mant_bits, size=n, dtype=np.uint64)
    bits = (sign << np.uint64(mant_bits + exp_bits)) | (exp << np.uint64(mant_bits)) | mant
    return bits.astype(np.uint32 if mant_bits + exp_bits + 1 == 32 else np.uint16)


def make_blocks(rng: np.random.Generator, name: str) -> tuple[np.ndarray, int, int, int]:
    """Returns (raw bytes as uint8 array, block_elems, block_bytes, n_blocks)."""
    qtype = T[name]
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    if name == "F32":
        # exponents up to 2^40 so that dot products with O(1) activations stay finite in f32
        raw = random_float_bits(rng, N_SCALAR, 23, 8, 127 + 40).astype("<u4").view(np.uint8)
        return raw, block_elems, block_bytes, N_SCALAR
    if name == "F16":
        raw = random_float_bits(rng, N_SCALAR, 10, 5, 30).astype("<u2").view(np.uint8)
        return raw, block_elems, block_bytes, N_SCALAR
    if name == "BF16":
        raw = random_float_bits(rng, N_SCALAR, 7, 8, 127 + 40).astype("<u2").view(np.uint8)
        return raw, block_elems, block_bytes, N_SCALAR
    blocks = rng.integers(0, 256, size=(N_BLOCKS, block_bytes), dtype=np.uint64).astype(np.uint8)
    for off in F16_FIELDS[name]:
        s = random_scale_f16(rng, N_BLOCKS).astype("<f2").view(np.uint8).reshape(N_BLOCKS, 2)
        blocks[:, off : off + 2] = s
    return blocks.reshape(-1), block_elems, block_bytes, N_BLOCKS


def golden_dequant(raw: np.ndarray, name: str) -> np.ndarray:
    values = gguf.quants.dequantize(raw.copy(), T[name])
    values = np.asarray(values, dtype=np.float32).reshape(-1)
    assert np.all(np.isfinite(values)), name
    return values


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo = Path(__file__).resolve().parents[2]
    ap.add_argument("--out", type=Path, default=repo / "engine/tests/fixtures/quant")
    ap.add_argument("--check", action="store_true", help="regenerate in memory and compare to --out")
    args = ap.parse_args()

    rng = np.random.Generator(np.random.PCG64(SEED))
    manifest: dict = {
        "generator": "tools/golden/quant_golden.py",
        "gguf_version": gguf.__version__ if hasattr(gguf, "__version__") else _dist_version("gguf"),
        "numpy_version": np.__version__,
        "seed": SEED,
        "layout": "<FMT>.bin = n_blocks * block_bytes raw GGML bytes, then n_blocks * block_elems f32 LE values",
        "formats": {},
    }
    files: dict[str, bytes] = {}
    for name in FORMATS:
        raw, be, bb, nb = make_blocks(rng, name)
        assert raw.size == nb * bb
        values = golden_dequant(raw, name)
        assert values.size == nb * be, (name, values.size)
        data = raw.tobytes() + values.astype("<f4").tobytes()
        fname = f"{name}.bin"
        files[fname] = data
        manifest["formats"][name] = {
            "file": fname,
            "ggml_type": int(T[name]),
            "block_elems": be,
            "block_bytes": bb,
            "n_blocks": nb,
            "quant_offset": 0,
            "quant_bytes": nb * bb,
            "values_offset": nb * bb,
            "n_values": nb * be,
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode()

    if args.check:
        bad = [f for f, d in files.items() if not (args.out / f).is_file() or (args.out / f).read_bytes() != d]
        for f in bad:
            print(f"differs: {args.out / f}", file=sys.stderr)
        print("fixtures up to date" if not bad else f"{len(bad)} fixture file(s) differ")
        return 1 if bad else 0

    args.out.mkdir(parents=True, exist_ok=True)
    for f, d in files.items():
        (args.out / f).write_bytes(d)
    print(f"wrote {len(files)} files to {args.out} (gguf {manifest['gguf_version']}, seed {SEED})")
    return 0


def _dist_version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    sys.exit(main())
