# Compile <kernels dir>/gemm.cu through NVRTC with the engine's gemm defines (sources.rs) plus
# --ptxas-options=-v; print registers and stack frame / spill stores / spill loads per entry
# point and the compile time (adapted from research/notes/decode-roofline/s5_nvrtc_regs.py).
# Needs the nvidia-cuda-nvrtc==13.0.88 wheel with its lib folder on LD_LIBRARY_PATH.
# MVX="-DGEMM_WARPS=8 -DGEMM_U=2" overrides defines (later -D wins).
# Usage: python3 gemm_nvrtc_regs.py kernels
import ctypes, os, re, sys, time
root = sys.argv[1]; part = sys.argv[2] if len(sys.argv) > 2 else "1"
extra = os.environ.get("MVX", "").split()
lib = ctypes.CDLL(os.path.expanduser("~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib/libnvrtc.so.13"))
def expand(path, seen, out):
    for line in open(os.path.join(root, path)):
        t = line.strip()
        if t == "#pragma once": continue
        if t.startswith("#include") and '"' in t:
            n = t.split('"')[1]
            if n not in seen:
                seen.add(n); expand(n, seen, out)
            continue
        out.append(line)
out = []; expand("gemm.cu", set(), out); src = "".join(out).encode()
opts = ["--gpu-architecture=sm_90a", "--std=c++17", "-DGEMM_MT=2", "-DGEMM_MT_GLU=1", "-DGEMM_N=64",
        "-DGEMM_WARPS=16", "-DGEMM_U=1", "--ptxas-options=-v"] + extra
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"gemm.cu", 0, None, None) == 0
arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
t0 = time.time(); r = lib.nvrtcCompileProgram(prog, len(opts), arr); dt = time.time() - t0
n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
buf = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, buf)
log = buf.value.decode(errors="replace")
if r != 0: print(log); sys.exit(1)
cur = None
for line in log.splitlines():
    m = re.search(r"Compiling entry function '(\w+)'", line)
    if m: cur = m.group(1); continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and cur: frame = m.groups()
    m = re.search(r"Used (\d+) registers", line)
    if m and cur: print(f"{cur:32s} regs {m.group(1):>4s} frame/spill_st/spill_ld {'/'.join(frame)}")
print(f"compile {dt:.1f}s")
if len(sys.argv) > 3:
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)); cb = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetCUBIN(prog, cb); open(sys.argv[3], "wb").write(cb.raw)
