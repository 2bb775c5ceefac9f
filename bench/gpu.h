/* gpu.h: kiln_bench's CUDA side (--device cuda:0, bench/gpu.c): the versions
 * and the device, the yardsticks kiln's GPU kernels are measured against (a
 * device-to-device copy, cuBLASLt called directly), host-device transfers,
 * the memory held after the first kernel, and kiln_rand on both devices.
 * gpu.c is built only with the CUDA toolkit; this header always (types). */
#ifndef KILN_BENCH_GPU_H
#define KILN_BENCH_GPU_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A row-major f32 product C (m x n) = A (m x k) B, B k x n, or n x k read
 * transposed when b_trans (kiln_linear's x @ W^T). */
typedef struct {
  int64_t m, n, k;
  bool b_trans;
  const float *a, *b;   /* host data, uploaded before timing */
} gpu_gemm;

/* Prints the versions (CUDA toolkit, NVRTC, cuBLASLt, driver) and cuda:0's
 * name, compute capability, SM count and memory; false, with why it cannot
 * be used, when it cannot (the first three are printed even then). */
bool gpu_info(void);
/* gpu_info, then the measurements that come before any workload: the
 * memory held after the process's first kernel (so nothing else has
 * allocated yet), kiln_rand on both devices, host-device transfers (runs
 * of each). Prints each; false when cuda:0 cannot be used. */
bool gpu_prologue(int runs);
/* The prologue's findings as the JSON members "device", "memory",
 * "transfers" and "rand" (a null or a "not run: ..." string where they were
 * not measured), each followed by ",\n". */
void gpu_json(FILE *f);
/* Whether the prologue found a difference between the devices' kiln_rand,
 * or a step of it failed: the bench then exits non-zero. */
bool gpu_failed(void);

/* Device time in ms of the work queued on kiln's stream of cuda:0 between
 * gpu_clock_start and gpu_clock_ms (CUDA events); NAN on a driver error. */
bool gpu_clock_start(void);
double gpu_clock_ms(void);

/* ms[0..runs): per-call device times, each the mean of reps calls queued
 * back to back, of a device-to-device copy of bytes / 2 (so bytes are read
 * and written in all, as a workload's ideal traffic counts them) and of g
 * through cuBLASLt with no epilogue (kiln's compute type: TF32 only under
 * KILN_ALLOW_TF32=1). False, with the failing call printed, on an error. */
bool gpu_copy_times(double bytes, int reps, double *ms, int runs);
bool gpu_gemm_times(const gpu_gemm *g, int reps, double *ms, int runs);

#endif
