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

/* y (rows, out) = x (rows, in) @ w^T + bias, gelu'd when gelu is non-zero
 * (torch's linear: w is (out, in), bias may be NULL): dot products over
 * contiguous rows, rows split across threads. W16's products, and W4's and
 * W7's reference results when kiln_bench is built without OpenBLAS. */
void hand_linear(float *y, const float *x, const float *w, const float *bias, int64_t rows, int64_t in,
                 int64_t out, int gelu, int threads);

/* Row-wise and column-wise kernels share one shape, so kiln_bench can keep the
 * function in its workload state: out and x are rows x cols, row-major. */
typedef void hand_matrix_fn(float *out, const float *x, int64_t rows, int64_t cols, int threads);

/* W3's epsilon, shared with kiln_bench's kiln_layer_norm call. */
#define HAND_LN_EPS 1e-5f

/* W2: softmax over each row. */
hand_matrix_fn hand_softmax_rows;
/* W3: layer_norm over each row, no affine, biased variance, HAND_LN_EPS. */
hand_matrix_fn hand_layer_norm_rows;
/* W6: (x - mean over rows) / unbiased std over rows, per column. */
hand_matrix_fn hand_standardize_cols;
/* W10: the running sum along each row (cumsum(x, -1)), in double. */
hand_matrix_fn hand_cumsum_rows;
/* W10-dim0: the running sum down each column (cumsum(x, 0)), in double. */
hand_matrix_fn hand_cumsum_cols;
/* W10-long: the running sum of x[0, n) in double: the serial loop, and two
 * passes over chunks, one per thread (chunk totals, then each chunk's scan
 * from the sum of the chunks before it). */
void hand_cumsum(float *out, const float *x, int64_t n);
void hand_cumsum_2pass(float *out, const float *x, int64_t n, int threads);
/* W10-lcse: the running log-sum-exp of x[0, n), the serial loop in
 * double (PyTorch's CPU kernel: max + log1p(exp(min - max)) per step). */
void hand_logcumsumexp(float *out, const float *x, int64_t n);

/* W5: the sum of x[0, n): float blocks added in double (the reference), and
 * the STREAM-like read loop (float lanes only, the bandwidth yardstick). */
float hand_sum(const float *x, int64_t n, int threads);
float hand_stream_sum(const float *x, int64_t n, int threads);

/* W12: out[r*cols + j] = table[idx[r]*cols + j] + bias[j] for r < rows
 * (an embedding lookup plus a bias), rows split across threads. */
void hand_gather_bias(float *out, const float *table, const int64_t *idx, const float *bias, int64_t rows,
                      int64_t cols, int threads);
/* W10: out[i] = erff(x[i]) or log1pf(x[i]), glibc's libm one element at a time. */
typedef enum { HAND_ERF, HAND_LOG1P } hand_math;
void hand_math_map(float *out, const float *x, int64_t n, hand_math fn, int threads);
/* W11: the k largest of each row of x (rows x cols), largest first, into
 * out (rows x k); and x[0, n) sorted into out by the C library's qsort. */
void hand_topk_rows(float *out, const float *x, int64_t rows, int64_t cols, int64_t k, int threads);
void hand_sort(float *out, const float *x, int64_t n);

/* STREAM's triad: a[i] = b[i] + s * c[i]. */
void hand_stream_triad(float *a, const float *b, const float *c, float s, int64_t n, int threads);

/* W13: out[i] = (float)((a[i] // b[i] + a[i] % b[i]) & c[i]) with Python's
 * floor division and remainder on int32; b has no 0 and no -1 (plain C
 * division would trap on them, which kiln's kernels check for). */
void hand_w13(float *out, const int32_t *a, const int32_t *b, const int32_t *c, int64_t n, int threads);

/* Causal attention (torch's top-left tril, scale 1/sqrt(dh)) of batch x
 * heads heads of seq rows of dh floats. q, k, v and out share one layout:
 * row t of head (b, h) starts at b * batch_stride + h * head_stride +
 * t * row_stride floats. One query row at a time: its scores against the
 * keys it sees (O(seq) scratch), their max, exps and sum, then the weighted
 * sum of the value rows. */
typedef struct {
  const float *q, *k, *v;
  float *out;
  int64_t batch, heads, seq, dh, batch_stride, head_stride, row_stride;
} hand_attention;
void hand_causal_attention(const hand_attention *a, int threads);

/* W16: a transformer block's weights (torch's layout: a linear's weight is
 * (out, in)) and sizes. */
typedef struct {
  int64_t batch, seq, dim, heads, mlp;
  const float *g1, *wq, *wk, *wv, *wo, *g2, *w1, *b1, *w2, *b2;
} hand_block;
/* out (batch*seq, dim) = the block of x: x1 = x + wo(causal attention of
 * rms_norm(x) * g1), out = x1 + w2(gelu(w1(rms_norm(x1) * g2) + b1)) + b2;
 * RMS norms with eps 1e-5, heads of dim / heads, scale 1/sqrt(head dim). */
void hand_transformer_block(float *out, const float *x, const hand_block *b, int threads);

#endif
