# usage: LD_LIBRARY_PATH=~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib python3 ptx_same.py KERNELS_A KERNELS_B [ENTRY]
# Compares the PTX of every attn_prefill entry point of the two kernels/ trees (compute_90a, the engine's Attention defines); prints same / differs (with ENTRY: the first lines of its diff).
import ctypes, sys, os, re
lib = ctypes.CDLL(os.path.expanduser("~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib/libnvrtc.so.13"))
def expand(kdir, name, seen):
    out = []
    for line in open(os.path.join(kdir, name)).read().splitlines():
        t = line.strip()
        if t == "#pragma once": continue
        if t.startswith('#include') and t[8:].strip().startswith('"'):
            inc = t[8:].strip().strip('"')
            if inc not in seen:
                seen.append(inc); out.append(expand(kdir, inc, seen))
            continue
        out.append(line)
    return "\n".join(out)
def ptx(kdir):
    src = expand(kdir, "attention.cu", []).encode()
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"attention.cu", 0, None, None) == 0
    opts = [b"--gpu-architecture=compute_90a", b"--std=c++17", b"-DATT_SPLIT=64",
            b"-DATT_PREFILL_SPLIT=1024", b"-DATT_WARPS=8", b"-DATT_MAX_HD=256"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    assert lib.nvrtcCompileProgram(prog, len(opts), arr) == 0
    n = ctypes.c_size_t(); lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value); lib.nvrtcGetPTX(prog, buf)
    text = buf.value.decode()
    funcs = {}
    for m in re.finditer(r"\.entry (\w+)\((.*?)\n}\n", text, re.S):
        funcs[m.group(1)] = m.group(0)
    return funcs
a, b = ptx(sys.argv[1]), ptx(sys.argv[2])
for k in sorted(set(a) | set(b)):
    if not k.startswith("attn_prefill"): continue
    if k not in a or k not in b: print(k, "only in", "B" if k in b else "A"); continue
    print(k, "same" if a[k] == b[k] else "differs")
if len(sys.argv) > 3:
    import difflib
    k = sys.argv[3]
    print("\n".join(list(difflib.unified_diff(a[k].splitlines(), b[k].splitlines(), lineterm=""))[:40]))
