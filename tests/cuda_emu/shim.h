/* shim.h: just enough CUDA for generated kiln kernels to compile as host C++
 * and run on the CPU (the emulation harness; never a runtime path). A launch
 * runs its blocks one after another (in either order: a grid-wide reduction
 * must not care which block finishes last) and the threads of a block as
 * pthreads, so __shared__ (function statics) is per block, __syncthreads is
 * a block barrier, warp shuffles exchange through per-warp slots between
 * barriers of the lanes their mask names (which must all call them, as on
 * the GPU), atomics take one lock and __threadfence is a full fence. The
 * intrinsics keep their CUDA meaning: bit casts, and f16 conversions that
 * round to nearest even. */
#ifndef KILN_CUDA_SHIM_H
#define KILN_CUDA_SHIM_H

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <condition_variable>
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
/* A barrier for however many lanes a mask names; the lanes of one warp use
 * one mask at a time, as the GPU requires of lanes that shuffle together. */
struct emu_lane_barrier {
  std::mutex m;
  std::condition_variable cv;
  unsigned arrived = 0, generation = 0;
  void wait(unsigned n) {
    std::unique_lock<std::mutex> g(m);
    unsigned gen = generation;
    if (++arrived == n) {
      arrived = 0;
      generation++;
      cv.notify_all();
    } else {
      cv.wait(g, [&] { return generation != gen; });
    }
  }
};
struct emu_block {
  pthread_barrier_t all;                  /* __syncthreads */
  std::vector<emu_lane_barrier> warps;    /* one per warp of the block */
  std::vector<long long> slots;           /* shuffle exchange, one per thread */
};
inline emu_block *emu_cur;
inline std::mutex emu_atomic_lock;

inline void __syncthreads() { pthread_barrier_wait(&emu_cur->all); }

/* The lanes of the calling thread's warp that exist (a partial last warp
 * has fewer than 32). */
inline unsigned emu_warp_width() {
  unsigned base = threadIdx.x - threadIdx.x % 32;
  return blockDim.x - base < 32 ? blockDim.x - base : 32;
}

/* Waits for the lanes of mask; a caller outside its mask, or a mask naming
 * a lane that does not exist, is a kernel bug the GPU would not report. */
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  unsigned width = emu_warp_width(), lanes = width == 32 ? 0xffffffffu : (1u << width) - 1;
  if (!(mask >> threadIdx.x % 32 & 1) || (mask & ~lanes)) {
    fprintf(stderr, "emulated kernel: thread %u syncs warp with mask %#x (%u lanes)\n", threadIdx.x, mask, width);
    abort();
  }
  emu_cur->warps[threadIdx.x / 32].wait((unsigned)__builtin_popcount(mask));
}

/* Every lane of the mask posts its value, then reads lane src's (its own
 * when src is outside the warp, as CUDA does). */
template <class T> inline T emu_shuffle(unsigned mask, T v, unsigned src_lane) {
  unsigned t = threadIdx.x, base = t - t % 32;
  memcpy(&emu_cur->slots[t], &v, sizeof v);
  __syncwarp(mask);
  T r = v;
  if (src_lane < 32 && (mask >> src_lane & 1)) memcpy(&r, &emu_cur->slots[base + src_lane], sizeof r);
  __syncwarp(mask);
  return r;
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d) {
  return emu_shuffle(mask, v, threadIdx.x % 32 + d);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, unsigned m) {
  return emu_shuffle(mask, v, (threadIdx.x % 32) ^ m);
}
template <class T> inline T __shfl_sync(unsigned mask, T v, int lane) { return emu_shuffle(mask, v, (unsigned)lane); }

template <class T> inline T atomicAdd(T *p, T v) {
  std::lock_guard<std::mutex> g(emu_atomic_lock);
  T old = *p;
  *p = old + v;
  return old;
}
/* old >= limit wraps to 0, else old + 1 (CUDA's atomicInc) */
inline unsigned atomicInc(unsigned *p, unsigned limit) {
  std::lock_guard<std::mutex> g(emu_atomic_lock);
  unsigned old = *p;
  *p = old >= limit ? 0 : old + 1;
  return old;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
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

/* Runs fn as a grid of blocks of threads: blocks one at a time, in order or
 * (reverse) last first, threads of one block concurrently. */
inline void emu_launch(unsigned grid, unsigned block, bool reverse, const std::function<void()> &fn) {
  gridDim = dim3(grid);
  blockDim = dim3(block);
  for (unsigned i = 0; i < grid; i++) {
    unsigned b = reverse ? grid - 1 - i : i;
    emu_block blk;
    pthread_barrier_init(&blk.all, nullptr, block);
    blk.warps = std::vector<emu_lane_barrier>((block + 31) / 32);
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
  }
}

#endif
