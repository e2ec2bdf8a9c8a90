// NVRTC compile check of the device code (no host code): gemmt.cu, then the draft.
//   LD_LIBRARY_PATH=~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib \
//     python3 /work/notes/nvrtc.py research/notes/wgmma2/nvrtc_check.cu sm_90a -Ikernels -Xptxas=-v
#include "gemmt.cu"
#include "gemmw2.cuh"
