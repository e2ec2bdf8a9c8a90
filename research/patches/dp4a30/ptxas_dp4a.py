# usage: LD_LIBRARY_PATH=~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib python3 ptxas_dp4a.py KERNELS_DIR [arch ...] [-DDEF=V ...]
# ptxas -v register / spill report of every dp4a.cu entry point (NVRTC 13.0 wheel, no GPU);
# exit 1 if any entry spills or has a stack frame, or a compile fails.
import os, re, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nvrtc_tool import compile, ptxas_info

kdir = sys.argv[1]
archs = [a for a in sys.argv[2:] if a.startswith("sm_")] or ["sm_90a"]
extra = [a for a in sys.argv[2:] if a.startswith("-D")]
bad = 0
for arch in archs:
    r, log = compile(kdir, "dp4a.cu", [f"--gpu-architecture={arch}", "--std=c++17", "-DDP4A_WARPS=8",
                     "-DNORM_THREADS=256", "--ptxas-options=-v"] + extra)
    print(f"== {arch} {' '.join(extra)} rc {r}")
    if r:
        print(log[:3000])
        bad += 1
        continue
    for k, info in sorted(ptxas_info(log).items()):
        text = " | ".join(info)
        nonzero = [int(n) for n in re.findall(r"(\d+) bytes (?:spill stores|spill loads|stack frame)", text)]
        flag = "  <-- SPILL/STACK" if any(nonzero) else ""
        bad += bool(flag)
        print(f"{k:28s} {text}{flag}")
sys.exit(1 if bad else 0)
