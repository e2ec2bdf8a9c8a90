#!/usr/bin/env python3
"""Write reference.safetensors and reference.expected.json for the safetensors reader tests.

The file is written by Hugging Face's own `safetensors` package (its Rust serializer), and
the expected f32 values come from numpy / `ml_dtypes` conversions, so the Rust reader and
its F16/BF16/F8_E4M3 decoders are checked against implementations that are not ours.

    pip install safetensors==0.8.0 ml_dtypes==0.6.0 numpy
    python3 engine/src/model_file/testdata/gen_reference_safetensors.py

Expected values are stored as f32 bit patterns (u32), so no decimal round trip is involved.
"""
import json
import pathlib

import ml_dtypes
import numpy as np
import safetensors.numpy

HERE = pathlib.Path(__file__).resolve().parent


def main() -> None:
    f32 = ((np.arange(15, dtype=np.float32) - 7) * np.float32(0.37)).reshape(3, 5)
    f16 = np.array([-65504, -1.5, -(2.0**-24), 0, 0.1, 1, 65504], dtype=np.float16)
    bf16 = np.array([[1, -3, 0.1, 3.0e38], [2.0**-130, -0.0, 7.5, -1e-3]], dtype=ml_dtypes.bfloat16)
    f8 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    ids = np.array([1, -2, 3], dtype=np.int64)

    tensors = {
        "f32.mat": ("F32", f32),
        "f16.vec": ("F16", f16),
        "bf16.mat": ("BF16", bf16),
        "f8.codes": ("F8_E4M3", f8),
        "i64.ids": ("I64", ids),
    }
    meta = {"format": "pt", "producer": "gen_reference_safetensors.py"}
    arrays = {name: arr for name, (_, arr) in tensors.items()}
    safetensors.numpy.save_file(arrays, str(HERE / "reference.safetensors"), metadata=meta)

    expected = {"metadata": meta, "tensors": {}}
    for name, (dt, arr) in tensors.items():
        entry = {"dtype": dt, "shape": list(arr.shape)}
        if dt != "I64":
            bits = arr.astype(np.float32).reshape(-1).view(np.uint32)
            entry["f32_bits"] = [int(b) for b in bits]
        expected["tensors"][name] = entry
    (HERE / "reference.expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
