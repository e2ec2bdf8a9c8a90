// cpu_shim/cuda_runtime.h — just enough of the CUDA runtime's declarations for g++ to
// syntax-check bench.cu's host code on a machine without CUDA (cpu_check's companion):
//   g++ -std=c++17 -fsyntax-only -Wall -Wno-unknown-pragmas -I research/notes/dp4a/cpu_shim
//       -x c++ research/notes/dp4a/bench.cu   (or cpu_shim/fake_runtime.cpp: a host-memory run)
// Not a runtime: fake_runtime.cpp implements it in host memory for the test run only.
#pragma once
#include <cstddef>
#define __global__
#define __host__
#define __device__
#define __forceinline__ inline
enum cudaError_t { cudaSuccess = 0, cudaErrorUnknown = 999 };
typedef struct CUstream_st* cudaStream_t;
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
typedef struct CUevent_st* cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeThreadLocal = 1 };
#define cudaStreamNonBlocking 0x01
struct int2 { int x, y; };
inline int2 make_int2(int x, int y) { return int2{x, y}; }
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct cudaDeviceProp {
    char name[256];
    int multiProcessorCount;
    int l2CacheSize;
};
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned);
cudaError_t cudaMalloc(void**, size_t);
template <class T>
cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc((void**)p, n); }
cudaError_t cudaMemcpy(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemset(void*, int, size_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
const char* cudaGetErrorString(cudaError_t);
cudaError_t cudaGetLastError();
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode);
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t*);
cudaError_t cudaGraphDestroy(cudaGraph_t);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t*, cudaGraph_t, unsigned long long);
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t);
cudaError_t cudaEventCreate(cudaEvent_t*);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float*, cudaEvent_t, cudaEvent_t);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t);
// Function attributes and occupancy (the kernel units' host halves; host_view.h).
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct cudaFuncAttributes {
    int numRegs;
    size_t localSizeBytes;
};
template <class T>
cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value);
template <class T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* entry);
template <class T>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, T func, int block, size_t smem);
