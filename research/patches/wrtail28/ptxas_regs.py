# usage: LD_LIBRARY_PATH=~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib python3 ptxas_regs.py KERNELS_DIR
# ptxas -v register/spill report of the streamed matvec entry points (MV_PART=1) of a kernels/ tree.
import ctypes, sys, os, re
kdir = sys.argv[1]
lib = ctypes.CDLL(os.path.expanduser("~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib/libnvrtc.so.13"))
seen = []
def expand(name):
    out = []
    for line in open(os.path.join(kdir, name)).read().splitlines():
        t = line.strip()
        if t == "#pragma once": continue
        if t.startswith('#include') and t[8:].strip().startswith('"'):
            inc = t[8:].strip().strip('"')
            if inc not in seen:
                seen.append(inc); out.append(expand(inc))
            continue
        out.append(line)
    return "\n".join(out)
src = expand("matvec.cu").encode()
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"matvec.cu", 0, None, None) == 0
opts = [b"--gpu-architecture=sm_90a", b"--std=c++17", b"-DMV_WARPS=8", b"-DMV_MAX_TOK=8",
        b"-DMV_TILE=640", b"-DMV_BATCH_TOK=8", b"-DMV_PART=1", b"--ptxas-options=-v"]
arr = (ctypes.c_char_p * len(opts))(*opts)
r = lib.nvrtcCompileProgram(prog, len(opts), arr)
n = ctypes.c_size_t()
lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
buf = ctypes.create_string_buffer(n.value)
lib.nvrtcGetProgramLog(prog, buf)
log = buf.value.decode()
print("rc", r)
if r: print(log[:3000])
cur = None
for line in log.splitlines():
    m = re.search(r"Compiling entry function '(\w+)'", line)
    if m: cur = m.group(1); continue
    if cur and ("_wr" in cur) and ("registers" in line or "spill" in line):
        print(cur, line.split("info    :")[-1].strip())
