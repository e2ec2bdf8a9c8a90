# usage: LD_LIBRARY_PATH=~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib python3 ptxas_regs.py KERNELS_DIR
# ptxas -v register/spill report of the streamed matvec entry points (MV_PART=1) of a kernels/ tree.
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nvrtc_tool import compile, ptxas_info

r, log = compile(sys.argv[1], "matvec.cu", ["--gpu-architecture=sm_90a", "--std=c++17", "-DMV_WARPS=8", "-DMV_MAX_TOK=8",
                 "-DMV_TILE=640", "-DMV_BATCH_TOK=8", "-DMV_PART=1", "--ptxas-options=-v"])
print("rc", r)
if r:
    print(log[:3000])
for k, info in sorted(ptxas_info(log).items()):
    if "_wr" in k:
        for i in info:
            print(k, i)
