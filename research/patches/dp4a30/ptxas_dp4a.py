# usage: python3 ptxas_dp4a.py KERNELS_DIR [arch ...] [-DDEF=V ...]
# ptxas -v register / spill report of every dp4a.cu entry point (NVRTC 13.0 wheel, no GPU).
import ctypes, sys, os, re
kdir = sys.argv[1]
archs = [a for a in sys.argv[2:] if a.startswith("sm_")] or ["sm_90a"]
extra = [a.encode() for a in sys.argv[2:] if a.startswith("-D")]
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
src = expand("dp4a.cu", []).encode()
bad = 0
for arch in archs:
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"dp4a.cu", 0, None, None) == 0
    opts = [b"--gpu-architecture=" + arch.encode(), b"--std=c++17", b"-DDP4A_WARPS=8",
            b"-DNORM_THREADS=256", b"--ptxas-options=-v"] + extra
    arr = (ctypes.c_char_p * len(opts))(*opts)
    r = lib.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, buf)
    log = buf.value.decode()
    print(f"== {arch} {' '.join(a.decode() for a in extra)} rc {r}")
    if r: print(log[:3000]); bad += 1; continue
    cur = None; regs = {}; spill = {}
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m: cur = m.group(1); continue
        if not cur: continue
        m = re.search(r"Used (\d+) registers", line)
        if m: regs[cur] = int(m.group(1))
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m: spill[cur] = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"(\d+) bytes stack frame", line)
        if m and int(m.group(1)) > 0: spill.setdefault(cur, (0, 0)); spill[cur] = spill[cur] + (f"stack {m.group(1)}",)
    for k in sorted(regs):
        s = spill.get(k, (0, 0))
        flag = "" if s[:2] == (0, 0) and len(s) == 2 else "  <-- SPILL/STACK"
        if flag: bad += 1
        print(f"{k:28s} {regs[k]:4d} regs  spill st/ld {s[0]}/{s[1]} {' '.join(map(str, s[2:]))}{flag}")
sys.exit(1 if bad else 0)
