# Registers and spills of gemm.cu's entry points through NVRTC with the engine's gemm defines
# (sources.rs): research/notes/decode-roofline/s5_nvrtc_regs.py with KFILE / KDEFS set.
# Needs the nvidia-cuda-nvrtc==13.0.88 wheel with its lib folder on LD_LIBRARY_PATH.
# MVX="-DGEMM_WARPS=8 -DGEMM_U=2" overrides defines (later -D wins).
# Usage: python3 gemm_nvrtc_regs.py kernels
import os, runpy, sys
here = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("KFILE", "gemm.cu")
os.environ.setdefault("KDEFS", "-DGEMM_MT=2 -DGEMM_MT_GLU=1 -DGEMM_N=64 -DGEMM_WARPS=16 -DGEMM_U=1")
sys.argv = [sys.argv[0], sys.argv[1] if len(sys.argv) > 1 else "kernels", "0"]
runpy.run_path(os.path.join(here, "..", "..", "decode-roofline", "s5_nvrtc_regs.py"), run_name="__main__")
