# The bf16 GEMM reference of a prefill cell (`harness bench`, harness/src/bench/gemm_ref.rs):
# time torch bf16 matmuls (cuBLAS underneath) of a model's linear-layer shapes at M rows,
# CUDA-event timed, after a warm-up. Run as `python3 -c <this file> <json request>`; the
# request is {"m": M, "shapes": [[K, N, count], ...], "reps": R, "warmup": W,
# "warmup_s": S}. One rep is every shape's `count` products in order (one model's
# linear layers). Prints exactly one line `GEMM_REF <json>`, always exit status 0:
#   {"ms": [per-rep milliseconds], "torch": ..., "cuda": ..., "device": ..., "method": ...}
# or {"absent": "<why there is no measurement>"} (torch or CUDA missing, a failure).
# The harness counts the FLOPs (2 M N K summed) itself; this script only times.
import json
import sys
import time


def emit(obj):
    print("GEMM_REF " + json.dumps(obj, sort_keys=True), flush=True)


def measure(req):
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising anything else
        return {"absent": f"torch not importable by {sys.executable}: {type(e).__name__}: {e}"}
    version = str(torch.__version__)
    if not torch.cuda.is_available():
        return {
            "absent": f"torch {version} sees no CUDA device "
            f"(torch.cuda.is_available() is False; torch built for CUDA {torch.version.cuda})"
        }
    m = int(req["m"])
    shapes = [(int(k), int(n), int(c)) for k, n, c in req["shapes"]]
    reps = int(req["reps"])
    warmup = int(req["warmup"])
    warmup_s = float(req.get("warmup_s", 0.0))
    if m <= 0 or reps <= 0 or not shapes or any(min(s) <= 0 for s in shapes):
        return {"absent": f"bad request: {req!r}"}
    dev = torch.device("cuda")
    torch.manual_seed(0)
    ops = []
    for k, n, count in shapes:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        # y = x W^T, as nn.Linear: the weight stays [N, K] row-major.
        ops.append((a, w.t(), c, count))

    def one_pass():
        for a, wt, c, count in ops:
            for _ in range(count):
                torch.mm(a, wt, out=c)

    t0 = time.monotonic()
    done = 0
    while done < warmup or time.monotonic() - t0 < warmup_s:
        one_pass()
        torch.cuda.synchronize()
        done += 1
    ms = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        one_pass()
        end.record()
        end.synchronize()
        ms.append(float(start.elapsed_time(end)))
    reduced = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    return {
        "ms": ms,
        "torch": version,
        "cuda": str(torch.version.cuda),
        "device": torch.cuda.get_device_name(dev),
        "method": f"torch.mm bf16 (cuBLAS), y = x W^T, CUDA events per rep, {done} warm-up "
        f"rep(s) discarded, bf16 reduced-precision reduction {'on' if reduced else 'off'}",
    }


def main():
    try:
        req = json.loads(sys.argv[1])
    except Exception as e:
        emit({"absent": f"unreadable request: {type(e).__name__}: {e}"})
        return
    try:
        out = measure(req)
    except Exception as e:  # out of memory, a cuBLAS error: no measurement, say why
        out = {"absent": f"the GEMM timing failed: {type(e).__name__}: {e}"}
    emit(out)


main()
