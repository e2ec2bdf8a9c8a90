# nvrtc_check.py — compile the bench's device code through NVRTC 13.0 (no nvcc needed): the
# dp4a kernels of dp4a.cuh (every configuration of dp4a_tu.cu, explicitly instantiated) and
# engine_tu.cu's narrowed matvec.cu with its explicitly instantiated entries; prints
# registers / spills per kernel (ptxas -v). Host code is not compiled here (nvcc builds it on
# the GPU machine). Needs the nvidia-cuda-nvrtc 13.0.88 wheel the engine's tools install
# (~/.cache/assay/cuda-nvrtc-13.0.88). Usage, from the repository root:
#   python3 research/notes/dp4a/nvrtc_check.py [dp4a|engine1|engine2 ...]
import ctypes, os, re, sys, time
here = os.path.dirname(os.path.abspath(__file__))
kern = os.path.join(here, "..", "..", "..", "kernels")
lib = ctypes.CDLL(os.path.expanduser("~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib/libnvrtc.so.13"))

def expand(text, seen, out):
    for line in text.splitlines(keepends=True):
        t = line.strip()
        if t == "#pragma once": continue
        if t.startswith("#include") and '"' in t:
            n = t.split('"')[1]
            if n in seen: continue
            seen.add(n)
            for d in (here, kern):
                p = os.path.join(d, n)
                if os.path.exists(p):
                    expand(open(p).read(), seen, out); break
            else:
                raise SystemExit(f"include not found: {n}")
            continue
        out.append(line)

# The configurations of dp4a_tu.cu: (design, format, R, GLU, U or D[, MINB]).
CFGS = []
for q in ("DpQ4_0", "DpQ8_0"):
    CFGS += [("wa", q, 1, "true", "2, 2"), ("wa", q, 2, "true", "1, 2"), ("wa", q, 4, "true", "1, 1"),
             ("wa", q, 2, "false", "2, 2"), ("wa", q, 4, "false", "1, 2")]
CFGS += [("wr", "DpQ4_0", 1, "true", 6), ("wr", "DpQ4_0", 2, "true", 4), ("wr", "DpQ4_0", 2, "false", 4),
         ("wr", "DpQ4_0", 4, "false", 3), ("wr", "DpQ8_0", 1, "true", 6), ("wr", "DpQ8_0", 2, "true", 3),
         ("wr", "DpQ8_0", 2, "false", 4), ("wr", "DpQ8_0", 4, "false", 3)]

def dp4a_src():
    s = '#include "dp4a.cuh"\ntemplate __global__ void dp_quant_kernel<DP_WARPS>(const float*, int, signed char*, int2*);\n'
    for d, q, r, glu, u in CFGS:
        for nt in (1, 2, 4, 8):
            s += f"template __global__ void dp_{d}_kernel<{q}, {r}, {nt}, {glu}, {u}>(DpArgs);\n"
    return s

def engine_src(part):
    # engine_tu.cu's device half: everything up to its host helpers.
    t = open(os.path.join(here, "engine_tu.cu")).read()
    head = t[: t.index('#include "bench.h"')]
    inst = {1: """ASSAY_MATVEC_R(q4_0, FmtQ4_0, 1, , 2, MV_LB_ONE)
ASSAY_MATVEC_GLU_R(q4_0, FmtQ4_0, 1, , 2, MV_LB_ONE)
ASSAY_MATVEC_R(q8_0, FmtQ8_0, 1, , 2, MV_LB_ONE)
ASSAY_MATVEC_GLU_R(q8_0, FmtQ8_0, 1, , 2, MV_LB_ONE)
ASSAY_MATVEC_GLU_WR_R(q4_0, FmtQ4_0, 1, 6)
""", 2: """ASSAY_MATVEC_TB(q4_0, FmtQ4_0)
ASSAY_MATVEC_TB(q8_0, FmtQ8_0)
"""}[part]
    # the instantiation lines must be engine_tu.cu's own
    for line in inst.strip().splitlines():
        assert line in t, f"engine_tu.cu lacks {line}"
    return head + inst

def compile_src(name, src, defs):
    out = []; expand(src, set(), out); code = "".join(out).encode()
    opts = ["--gpu-architecture=sm_90a", "--std=c++17", "--ptxas-options=-v"] + defs
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), code, name.encode(), 0, None, None) == 0
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    t0 = time.time(); r = lib.nvrtcCompileProgram(prog, len(opts), arr); dt = time.time() - t0
    n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, buf)
    log = buf.value.decode(errors="replace")
    if r != 0:
        print(log); print(f"{name}: COMPILE FAILED"); return False
    cur = None; frame = ("?", "?", "?")
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m: cur = m.group(1); continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur: frame = m.groups()
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            dm = os.popen(f"echo {cur} | c++filt").read().strip()
            print(f"  {dm[:70]:70s} regs {m.group(1):>4s} frame/spill_st/spill_ld {'/'.join(frame)}")
        if "warning" in line.lower(): print("  " + line)
    print(f"{name}: compiled in {dt:.1f} s")
    return True

what = sys.argv[1:] or ["dp4a", "engine1", "engine2"]
ok = True
for w in what:
    if w == "dp4a": ok &= compile_src("dp4a.cu", dp4a_src(), [])
    elif w == "engine1": ok &= compile_src("engine1.cu", engine_src(1), ["-DMV_WARPS=8", "-DMV_MAX_TOK=8", "-DMV_TILE=640", "-DMV_BATCH_TOK=8"])
    elif w == "engine2": ok &= compile_src("engine2.cu", engine_src(2), ["-DMV_WARPS=8", "-DMV_MAX_TOK=8", "-DMV_TILE=640", "-DMV_BATCH_TOK=8"])
sys.exit(0 if ok else 1)
