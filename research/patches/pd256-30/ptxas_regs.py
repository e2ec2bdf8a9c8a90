# usage: LD_LIBRARY_PATH=~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib python3 ptxas_regs.py KERNELS_DIR [ARCH ...]
# ptxas -v register / stack / spill report of the prompt-attention entry points
# (attn_prefill_*) of a kernels/ tree: attention.cu with the engine's Attention defines.
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nvrtc_tool import compile, ptxas_info

kdir = sys.argv[1]
for arch in sys.argv[2:] or ["sm_90a"]:
    r, log = compile(kdir, "attention.cu", [f"--gpu-architecture={arch}", "--std=c++17", "-DATT_SPLIT=64",
                     "-DATT_PREFILL_SPLIT=1024", "-DATT_WARPS=8", "-DATT_MAX_HD=256", "--ptxas-options=-v"])
    print("#", arch, "rc", r)
    if r:
        print(log[:3000])
    for k, info in sorted(ptxas_info(log).items()):
        if k.startswith("attn_prefill"):
            print(f"{arch} {k:28s} " + " | ".join(info))
