# usage: LD_LIBRARY_PATH=~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib python3 ptxas_regs.py KERNELS_DIR [ARCH ...]
# ptxas -v register / stack / spill report of the prompt-attention entry points
# (attn_prefill_*) of a kernels/ tree: attention.cu with the engine's Attention defines.
import ctypes, sys, os, re
kdir = sys.argv[1]
archs = sys.argv[2:] or ["sm_90a"]
lib = ctypes.CDLL(os.path.expanduser("~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib/libnvrtc.so.13"))
def expand(name, seen):
    out = []
    for line in open(os.path.join(kdir, name)).read().splitlines():
        t = line.strip()
        if t == "#pragma once": continue
        if t.startswith('#include') and t[8:].strip().startswith('"'):
            inc = t[8:].strip().strip('"')
            if inc not in seen:
                seen.append(inc); out.append(expand(inc, seen))
            continue
        out.append(line)
    return "\n".join(out)
src = expand("attention.cu", []).encode()
for arch in archs:
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"attention.cu", 0, None, None) == 0
    opts = [b"--gpu-architecture=" + arch.encode(), b"--std=c++17", b"-DATT_SPLIT=64",
            b"-DATT_PREFILL_SPLIT=1024", b"-DATT_WARPS=8", b"-DATT_MAX_HD=256", b"--ptxas-options=-v"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    r = lib.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, buf)
    log = buf.value.decode()
    print("#", arch, "rc", r)
    if r: print(log[:3000])
    cur = None; rows = {}
    for line in log.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?(\w+)'?", line)
        if m: cur = m.group(1); continue
        if cur and cur.startswith("attn_prefill"):
            info = line.split("info    :")[-1].strip()
            if "registers" in info or "spill" in info or "stack" in info:
                rows.setdefault(cur, []).append(info)
    for k in sorted(rows):
        print(f"{arch} {k:28s} " + " | ".join(rows[k]))
