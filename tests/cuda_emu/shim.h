/* shim.h: just enough CUDA for generated kiln kernels to compile as host C++
 * and run on the CPU (the emulation harness; never a runtime path). A launch
 * runs its blocks one after another and the threads of a block as pthreads,
 * so __shared__ (function statics) is per block, __syncthreads is a block
 * barrier, warp shuffles exchange through per-warp slots between warp
 * barriers, and atomics take one lock. The intrinsics keep their CUDA
 * meaning: bit casts, and f16 conversions that round to nearest even. */
#ifndef KILN_CUDA_SHIM_H
#define KILN_CUDA_SHIM_H

#include <math.h>
#include <pthread.h>
#include <string.h>

#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

/* ---- bit casts and narrow floats ---------------------------------------- */
template <class To, class From> inline To emu_bits(From f) {
  To t;
  memcpy(&t, &f, sizeof t);
  return t;
}
inline float __int_as_float(int i) { return emu_bits<float>(i); }
inline float __uint_as_float(unsigned i) { return emu_bits<float>(i); }
inline int __float_as_int(float f) { return emu_bits<int>(f); }
inline unsigned __float_as_uint(float f) { return emu_bits<unsigned>(f); }
inline double __longlong_as_double(long long i) { return emu_bits<double>(i); }
inline long long __double_as_longlong(double d) { return emu_bits<long long>(d); }

struct __half { unsigned short x; };
inline __half __float2half_rn(float f) { return __half{emu_bits<unsigned short>((_Float16)f)}; }
inline float __half2float(__half h) { return (float)emu_bits<_Float16>(h.x); }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }

/* ---- block state of the running launch ---------------------------------- */
struct emu_block {
  pthread_barrier_t all;                  /* __syncthreads */
  std::vector<pthread_barrier_t> warps;   /* one per warp of the block */
  std::vector<long long> slots;           /* shuffle exchange, one per thread */
};
inline emu_block *emu_cur;
inline std::mutex emu_atomic_lock;

inline void __syncthreads() { pthread_barrier_wait(&emu_cur->all); }
inline void __syncwarp(unsigned = 0xffffffffu) { pthread_barrier_wait(&emu_cur->warps[threadIdx.x / 32]); }

/* Every lane of the warp posts its value, then reads lane src's (its own
 * when src is outside the warp, as CUDA does). */
template <class T> inline T emu_shuffle(T v, unsigned src_lane) {
  unsigned t = threadIdx.x, base = t - t % 32;
  unsigned width = blockDim.x - base < 32 ? blockDim.x - base : 32;
  memcpy(&emu_cur->slots[t], &v, sizeof v);
  __syncwarp();
  T r = v;
  if (src_lane < width) memcpy(&r, &emu_cur->slots[base + src_lane], sizeof r);
  __syncwarp();
  return r;
}
template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned d) { return emu_shuffle(v, threadIdx.x % 32 + d); }
template <class T> inline T __shfl_xor_sync(unsigned, T v, unsigned m) { return emu_shuffle(v, (threadIdx.x % 32) ^ m); }
template <class T> inline T __shfl_sync(unsigned, T v, int lane) { return emu_shuffle(v, (unsigned)lane); }

template <class T> inline T atomicAdd(T *p, T v) {
  std::lock_guard<std::mutex> g(emu_atomic_lock);
  T old = *p;
  *p = old + v;
  return old;
}
template <class T> inline T atomicMax(T *p, T v) {
  std::lock_guard<std::mutex> g(emu_atomic_lock);
  T old = *p;
  *p = old > v ? old : v;
  return old;
}
template <class T> inline T atomicCAS(T *p, T cmp, T v) {
  std::lock_guard<std::mutex> g(emu_atomic_lock);
  T old = *p;
  if (old == cmp) *p = v;
  return old;
}

/* Runs fn as a grid of blocks of threads: blocks in order, threads of one
 * block concurrently. */
inline void emu_launch(unsigned grid, unsigned block, const std::function<void()> &fn) {
  gridDim = dim3(grid);
  blockDim = dim3(block);
  for (unsigned b = 0; b < grid; b++) {
    emu_block blk;
    pthread_barrier_init(&blk.all, nullptr, block);
    blk.warps.resize((block + 31) / 32);
    for (unsigned w = 0; w < blk.warps.size(); w++)
      pthread_barrier_init(&blk.warps[w], nullptr, block - 32 * w < 32 ? block - 32 * w : 32);
    blk.slots.resize(block);
    emu_cur = &blk;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; t++)
      threads.emplace_back([&fn, b, t] {
        blockIdx = dim3(b);
        threadIdx = dim3(t);
        fn();
      });
    for (auto &th : threads) th.join();
    pthread_barrier_destroy(&blk.all);
    for (auto &w : blk.warps) pthread_barrier_destroy(&w);
  }
}

#endif
