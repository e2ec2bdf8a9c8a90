// cpu_shim/common/common.cuh — stands in for kernels/common/common.cuh and the CUDA built-ins
// when cpu_check.cpp compiles variants.cuh for the CPU (-I research/notes/matvec/cpu_shim,
// -DMVX_SIM). A CUDA block runs as one std::thread per CUDA thread; __syncthreads and the
// warp shuffles are std::barrier rendezvous; cp.async copies land either at issue time or at
// the last moment the kernel's cp.async.wait_group allows (sim::g_late), so that a read of a
// ring slot before its wait, or a refill of a slot still to be read, changes the results.
// Float arithmetic is the host's IEEE single precision (build with -ffp-contract=off).
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
#define __align__(n) __attribute__((aligned(n)))
#define __shared__

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

struct uint4 { u32 x, y, z, w; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }

struct SimDim { unsigned x = 0, y = 1, z = 1; };

namespace sim {
extern thread_local SimDim t_idx, b_idx;
extern SimDim g_dim, b_dim;
extern std::barrier<>* block_bar;
extern std::barrier<>* warp_bar[32];
extern float xchg[32][32];
extern unsigned char* smem_base;
extern bool g_late;
struct Copy { u32 dst; const void* src; int n; };
extern thread_local std::vector<Copy> cur_group;
extern thread_local std::vector<std::vector<Copy>> pending;
}  // namespace sim

#define threadIdx sim::t_idx
#define blockIdx sim::b_idx
#define gridDim sim::g_dim
#define blockDim sim::b_dim

inline float __uint_as_float(u32 u) { float f; memcpy(&f, &u, 4); return f; }
inline u32 __float_as_uint(float f) { u32 u; memcpy(&u, &f, 4); return u; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline int min(int a, int b) { return a < b ? a : b; }

inline void __syncthreads() { sim::block_bar->arrive_and_wait(); }
inline void __syncwarp() { sim::warp_bar[sim::t_idx.x / 32]->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    const int w = sim::t_idx.x / 32, l = sim::t_idx.x % 32;
    sim::xchg[w][l] = v;
    sim::warp_bar[w]->arrive_and_wait();
    const float r = sim::xchg[w][l ^ o];
    sim::warp_bar[w]->arrive_and_wait();
    return r;
}

// --- common.cuh's functions used by variants.cuh (same definitions, host arithmetic)
inline float f16_to_f32(u16 h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = std::ldexp((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = std::ldexp((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}
inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
inline float silu(float g) { return g / (1.0f + expf(-g)); }
inline void pdl_wait() {}
inline void pdl_trigger() {}

// --- variants.cuh's PTX helpers (MVX_SIM)
namespace mvx {
inline u32 smem_u32(const void* p) { return (u32)((const unsigned char*)p - sim::smem_base); }
inline void cp_land(const sim::Copy& c) { memcpy(sim::smem_base + c.dst, c.src, c.n); }
inline void cp_async16(u32 dst, const void* src) {
    if (sim::g_late) sim::cur_group.push_back({dst, src, 16});
    else cp_land({dst, src, 16});
}
inline void cp_async4(u32 dst, const void* src) {
    if (sim::g_late) sim::cur_group.push_back({dst, src, 4});
    else cp_land({dst, src, 4});
}
inline void cp_commit() {
    sim::pending.push_back(sim::cur_group);
    sim::cur_group.clear();
}
template <int N>
inline void cp_wait() {
    while ((int)sim::pending.size() > N) {
        for (const sim::Copy& c : sim::pending.front()) cp_land(c);
        sim::pending.erase(sim::pending.begin());
    }
}
template <u32 M>
inline u32 opaque_word(u32) { return M; }
// prmt.b32 (default mode): output byte i = byte s of {b, a} (a = bytes 0..3, b = 4..7),
// s = nibble i of sel; bit 3 of the nibble replicates that byte's sign bit.
inline float prmt_f(u32 a, u32 b, u32 sel) {
    const u64 ab = (u64)a | ((u64)b << 32);
    u32 r = 0;
    for (int i = 0; i < 4; i++) {
        const u32 s = (sel >> (4 * i)) & 15;
        u32 v = (u32)(ab >> (8 * (s & 7))) & 0xff;
        if (s & 8) v = (v & 0x80) ? 0xff : 0;
        r |= v << (8 * i);
    }
    return __uint_as_float(r);
}
}  // namespace mvx
