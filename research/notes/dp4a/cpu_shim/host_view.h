// host_view.h — the device builtins as host declarations, so that g++ can type-check the
// kernel units (dp4a_tu.cu, engine_tu.cu with kernels/matvec.cu) as host C++: kernels become
// plain functions, and launch_rewrite.py turns each `K<<<cfg>>>(args)` into
// `K(args), dp_cfg_check(cfg)`, so every launch's arguments are checked against the kernel's
// parameters (check_here.sh). Syntax and types only: nothing here is linked or run.
#pragma once
#include <cmath>
#include <cstddef>
#include "cuda_runtime.h"
#define __launch_bounds__(...)
#define __shared__
#define __restrict__ __restrict
#define __noinline__
struct DpDim3 { unsigned x, y, z; };
extern DpDim3 threadIdx, blockIdx, gridDim, blockDim;
struct uint4 { unsigned x, y, z, w; };
struct int4 { int x, y, z, w; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct uint2 { unsigned x, y; };
template <class T> T __shfl_xor_sync(unsigned, T, int, int = 32);
template <class T> T __shfl_sync(unsigned, T, int, int = 32);
template <class T> T __ldg(const T*);
void __syncthreads();
void __syncwarp(unsigned = 0xffffffffu);
void __trap();
float __fdiv_rn(float, float);
float __fmul_rn(float, float);
float __fadd_rn(float, float);
float __fsub_rn(float, float);
double __dmul_rn(double, double);
double __dadd_rn(double, double);
float __fmaf_rn(float, float, float);
float __int2float_rn(int);
int __float2int_rn(float);
float __int_as_float(int);
int __float_as_int(float);
float __uint_as_float(unsigned);
unsigned __float_as_uint(float);
size_t __cvta_generic_to_shared(const void*);
int __dp4a(int, int, int);
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
#include <math.h>
inline void dp_cfg_check(int, int, size_t, cudaStream_t) {}
