// shim_pre.h — CUDA built-ins for running matvec.cu's bodies on the CPU: a block is one
// std::thread per CUDA thread (blocks one after another), __syncthreads / __syncwarp and the
// shuffles are std::barrier rendezvous, dynamic shared memory is sim::smem.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))

struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
struct SimDim { unsigned x = 0, y = 1, z = 1; };

namespace sim {
extern thread_local SimDim t_idx, b_idx;
extern SimDim g_dim, b_dim;
extern std::barrier<>* block_bar;
extern std::barrier<>* warp_bar[32];
extern float xf[32][32];
extern double xd[32][32];
extern unsigned char smem[];
extern bool late;  // cp.async copies land as late as wait_group allows (else at issue)
struct Copy { unsigned dst; const void* src; int n; };
extern thread_local std::vector<Copy> cur;
extern thread_local std::vector<std::vector<Copy>> pend;
}  // namespace sim

#define threadIdx sim::t_idx
#define blockIdx sim::b_idx
#define gridDim sim::g_dim
#define blockDim sim::b_dim

inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline int min(int a, int b) { return a < b ? a : b; }
#include <math.h>

inline void __syncthreads() { sim::block_bar->arrive_and_wait(); }
inline void __syncwarp() { sim::warp_bar[sim::t_idx.x / 32]->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    const int w = sim::t_idx.x / 32, l = sim::t_idx.x % 32;
    sim::xf[w][l] = v;
    sim::warp_bar[w]->arrive_and_wait();
    const float r = sim::xf[w][l ^ o];
    sim::warp_bar[w]->arrive_and_wait();
    return r;
}
inline double __shfl_xor_sync(unsigned, double v, int o) {
    const int w = sim::t_idx.x / 32, l = sim::t_idx.x % 32;
    sim::xd[w][l] = v;
    sim::warp_bar[w]->arrive_and_wait();
    const double r = sim::xd[w][l ^ o];
    sim::warp_bar[w]->arrive_and_wait();
    return r;
}
