/* hand.h: the hand-written C versions of the benchmark workloads, the
 * reference point kiln's kernels are measured against. hand.c is compiled
 * -O3 -march=native; each loop is split across pthreads like kiln's pool. */
#ifndef KILN_BENCH_HAND_H
#define KILN_BENCH_HAND_H

#include <stdint.h>

/* Runs body(ctx, lo, hi) on `threads` pthreads over contiguous chunks of
 * [0, n); the calling thread takes the first chunk. */
void hand_parallel_for(int threads, int64_t n, void (*body)(void *ctx, int64_t lo, int64_t hi),
                       void *ctx);

/* W1: out[i] = relu(a[i]*b[i] + c[i]) * sigmoid(a[i]). */
void hand_w1(float *out, const float *a, const float *b, const float *c, int64_t n, int threads);

/* W4's epilogue after an sgemm: c[i*n + j] = gelu(c[i*n + j] + b[j]), rows
 * split across threads. */
void hand_bias_gelu(float *c, const float *b, int64_t m, int64_t n, int threads);

#endif
