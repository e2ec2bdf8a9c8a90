# usage: LD_LIBRARY_PATH=~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib python3 ptx_same.py KERNELS_A KERNELS_B [ENTRY]
# Compares the PTX of every attn_prefill entry point of the two kernels/ trees (compute_90a, the engine's Attention defines); prints same / differs (with ENTRY: the first lines of its diff).
import difflib, os, re, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nvrtc_tool import compile


def ptx(kdir):
    r, text = compile(kdir, "attention.cu", ["--gpu-architecture=compute_90a", "--std=c++17", "-DATT_SPLIT=64",
                      "-DATT_PREFILL_SPLIT=1024", "-DATT_WARPS=8", "-DATT_MAX_HD=256"], want_ptx=True)
    assert r == 0, text[:3000]
    return {m.group(1): m.group(0) for m in re.finditer(r"\.entry (\w+)\((.*?)\n}\n", text, re.S)}


a, b = ptx(sys.argv[1]), ptx(sys.argv[2])
for k in sorted(set(a) | set(b)):
    if not k.startswith("attn_prefill"):
        continue
    if k not in a or k not in b:
        print(k, "only in", "B" if k in b else "A")
        continue
    print(k, "same" if a[k] == b[k] else "differs")
if len(sys.argv) > 3:
    k = sys.argv[3]
    print("\n".join(list(difflib.unified_diff(a[k].splitlines(), b[k].splitlines(), lineterm=""))[:40]))
