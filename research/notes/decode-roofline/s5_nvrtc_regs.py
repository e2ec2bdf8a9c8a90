# Compile <kernels dir>/matvec.cu through NVRTC with the engine's options for one half
# (MV_PART 1 = one-token, 2 = batched) plus --ptxas-options=-v; print registers and stack
# frame / spill stores / spill loads per entry point, the compile time, and optionally write
# the cubin. Needs the nvidia-cuda-nvrtc==13.0.88 wheel (tools/nvrtc-check installs it) with
# its lib folder on LD_LIBRARY_PATH. MVX="-DMV_LD_REGS=96" adds options.
# KFILE / KDEFS (env) compile another kernel file with other defines instead
# (research/notes/prefill/s6/gemm_nvrtc_regs.py does so for gemm.cu).
# Usage: python3 s5_nvrtc_regs.py kernels 1 out.cubin
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
kfile = os.environ.get("KFILE", "matvec.cu")
defs = os.environ.get("KDEFS", f"-DMV_WARPS=8 -DMV_MAX_TOK=8 -DMV_TILE=640 -DMV_BATCH_TOK=8 -DMV_PART={part}").split()
out = []; expand(kfile, set(), out); src = "".join(out).encode()
opts = ["--gpu-architecture=sm_90a", "--std=c++17"] + defs + ["--ptxas-options=-v"] + extra
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, kfile.encode(), 0, None, None) == 0
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
print(f"compile {dt:.1f}s {kfile} part={part}")
if len(sys.argv) > 3:
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)); cb = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetCUBIN(prog, cb); open(sys.argv[3], "wb").write(cb.raw)
