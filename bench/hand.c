/* hand.c: the hand-written C loops of the benchmark (see hand.h). Written the
 * way a careful C programmer would: one fused pass, restrict pointers, no
 * intermediate arrays; the compiler flags are set in bench/CMakeLists.txt. */
#include "hand.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  void (*body)(void *ctx, int64_t lo, int64_t hi);
  void *ctx;
  int64_t lo, hi;
  pthread_t tid;
  int started;   /* tid is a running thread to join */
} chunk;

static void *chunk_run(void *p) {
  chunk *c = p;
  c->body(c->ctx, c->lo, c->hi);
  return NULL;
}

void hand_parallel_for(int threads, int64_t n, void (*body)(void *ctx, int64_t lo, int64_t hi),
                       void *ctx) {
  chunk *cs = threads > 1 ? malloc(sizeof *cs * (size_t)threads) : NULL;
  if (!cs) {  /* one thread, or no memory: still correct, only slower */
    body(ctx, 0, n);
    return;
  }
  for (int i = 0; i < threads; i++)
    cs[i] = (chunk){.body = body, .ctx = ctx, .lo = n * i / threads, .hi = n * (i + 1) / threads};
  for (int i = 1; i < threads; i++)
    cs[i].started = pthread_create(&cs[i].tid, NULL, chunk_run, &cs[i]) == 0;
  chunk_run(&cs[0]);
  /* A chunk whose thread failed to start runs here instead. */
  for (int i = 1; i < threads; i++) {
    if (cs[i].started) pthread_join(cs[i].tid, NULL);
    else chunk_run(&cs[i]);
  }
  free(cs);
}

typedef struct {
  float *out;
  const float *a, *b, *c;
} w1_args;

static void w1_body(void *ctx, int64_t lo, int64_t hi) {
  const w1_args *w = ctx;
  float *restrict out = w->out;
  const float *restrict a = w->a, *restrict b = w->b, *restrict c = w->c;
  for (int64_t i = lo; i < hi; i++) {
    float x = a[i], t = x * b[i] + c[i];
    out[i] = (t > 0.0f ? t : 0.0f) * (1.0f / (1.0f + expf(-x)));
  }
}

void hand_w1(float *out, const float *a, const float *b, const float *c, int64_t n, int threads) {
  w1_args w = {out, a, b, c};
  hand_parallel_for(threads, n, w1_body, &w);
}

typedef struct {
  float *out;
  const int32_t *a, *b, *c;
} w13_args;

static void w13_body(void *ctx, int64_t lo, int64_t hi) {
  const w13_args *w = ctx;
  float *restrict out = w->out;
  const int32_t *restrict a = w->a, *restrict b = w->b, *restrict c = w->c;
  for (int64_t i = lo; i < hi; i++) {
    int32_t x = a[i], y = b[i], q = x / y, r = x % y;
    if (r != 0 && (r ^ y) < 0) {   /* floor rounding: the remainder takes b's sign */
      q -= 1;
      r += y;
    }
    out[i] = (float)(int32_t)(((uint32_t)q + (uint32_t)r) & (uint32_t)c[i]);
  }
}

void hand_w13(float *out, const int32_t *a, const int32_t *b, const int32_t *c, int64_t n, int threads) {
  w13_args w = {out, a, b, c};
  hand_parallel_for(threads, n, w13_body, &w);
}

typedef struct {
  float *c;
  const float *b;
  int64_t n;
} gelu_args;

static void gelu_body(void *ctx, int64_t lo, int64_t hi) {
  const gelu_args *w = ctx;
  const float *restrict b = w->b;
  for (int64_t i = lo; i < hi; i++) {
    float *restrict c = w->c + i * w->n;
    for (int64_t j = 0; j < w->n; j++) {
      float x = c[j] + b[j];
      c[j] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    }
  }
}

void hand_bias_gelu(float *c, const float *b, int64_t m, int64_t n, int threads) {
  gelu_args w = {c, b, n};
  hand_parallel_for(threads, m, gelu_body, &w);
}

/* ---- row-wise: softmax (W2) and layer_norm (W3) ----------------------------
 * One row (16 KiB for W2, 4 KiB for W3) stays in L1/L2 between the passes
 * over it, so memory sees one read of x and one write of out. */

typedef struct {
  float *out;
  const float *x;
  int64_t cols, rows;   /* rows: the column loops' (W10-dim0) */
} rows_args;

static void softmax_body(void *ctx, int64_t lo, int64_t hi) {
  const rows_args *w = ctx;
  int64_t n = w->cols;
  for (int64_t r = lo; r < hi; r++) {
    const float *restrict x = w->x + r * n;
    float *restrict y = w->out + r * n;
    float m = x[0];  /* not -INFINITY: -ffast-math assumes no infinities */
    for (int64_t j = 1; j < n; j++) m = fmaxf(m, x[j]);
    float s = 0.0f;
    for (int64_t j = 0; j < n; j++) {
      y[j] = expf(x[j] - m);
      s += y[j];
    }
    float inv = 1.0f / s;
    for (int64_t j = 0; j < n; j++) y[j] *= inv;
  }
}

void hand_softmax_rows(float *out, const float *x, int64_t rows, int64_t cols, int threads) {
  rows_args w = {out, x, cols, rows};
  hand_parallel_for(threads, rows, softmax_body, &w);
}

static void layer_norm_body(void *ctx, int64_t lo, int64_t hi) {
  const rows_args *w = ctx;
  int64_t n = w->cols;
  for (int64_t r = lo; r < hi; r++) {
    const float *restrict x = w->x + r * n;
    float *restrict y = w->out + r * n;
    float s = 0.0f, q = 0.0f;
    for (int64_t j = 0; j < n; j++) s += x[j];
    float mean = s / (float)n;
    /* Two passes over the cached row: no cancellation from E[x^2] - E[x]^2. */
    for (int64_t j = 0; j < n; j++) q += (x[j] - mean) * (x[j] - mean);
    float rstd = 1.0f / sqrtf(q / (float)n + HAND_LN_EPS);
    for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mean) * rstd;
  }
}

void hand_layer_norm_rows(float *out, const float *x, int64_t rows, int64_t cols, int threads) {
  rows_args w = {out, x, cols, rows};
  hand_parallel_for(threads, rows, layer_norm_body, &w);
}

/* The running sum of x[0, n) from acc, accumulated in double as PyTorch's
 * CPU cumsum does (and kiln): one dependent add per element. */
static double cumsum_from(float *restrict y, const float *restrict x, int64_t n, double acc) {
  for (int64_t i = 0; i < n; i++) {
    acc += x[i];
    y[i] = (float)acc;
  }
  return acc;
}

/* W10: the running sum of each row. */
static void cumsum_body(void *ctx, int64_t lo, int64_t hi) {
  const rows_args *w = ctx;
  for (int64_t r = lo; r < hi; r++) cumsum_from(w->out + r * w->cols, w->x + r * w->cols, w->cols, 0);
}

void hand_cumsum_rows(float *out, const float *x, int64_t rows, int64_t cols, int threads) {
  rows_args w = {out, x, cols, rows};
  hand_parallel_for(threads, rows, cumsum_body, &w);
}

/* W10-dim0: cumsum(x, 0), the natural loop: a row of double accumulators
 * over each thread's columns, the rows in order. */
static void cumsum_cols_body(void *ctx, int64_t lo, int64_t hi) {
  const rows_args *w = ctx;
  double *acc = calloc((size_t)(hi - lo) + 1, sizeof *acc);
  if (!acc) return;   /* out stays as it was: the check of the result reports it */
  for (int64_t r = 0; r < w->rows; r++) {
    const float *restrict x = w->x + r * w->cols + lo;
    float *restrict y = w->out + r * w->cols + lo;
    for (int64_t j = 0; j < hi - lo; j++) {
      acc[j] += x[j];
      y[j] = (float)acc[j];
    }
  }
  free(acc);
}

void hand_cumsum_cols(float *out, const float *x, int64_t rows, int64_t cols, int threads) {
  rows_args w = {out, x, cols, rows};
  hand_parallel_for(threads, cols, cumsum_cols_body, &w);
}

/* W10-long: the serial loop. */
void hand_cumsum(float *out, const float *x, int64_t n) { cumsum_from(out, x, n, 0); }

void hand_logcumsumexp(float *out, const float *x, int64_t n) {
  double acc = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    double v = x[i], mx = fmax(acc, v), mn = fmin(acc, v);
    if (mn != mx || isfinite(mn)) acc = mx + log1p(exp(mn - mx));   /* two equal infinities keep acc */
    out[i] = (float)acc;
  }
}

/* Two passes: each thread's chunk total (vectorized), a serial scan of the
 * totals, then each chunk's running sum from its offset. */
typedef struct {
  float *out;
  const float *x;
  int64_t n;
  int threads;
  double *offset;       /* per chunk: its total, then the sum before it */
} scan2_args;

static void chunk_total(void *ctx, int64_t lo, int64_t hi) {
  scan2_args *w = ctx;
  for (int64_t c = lo; c < hi; c++) {
    double s = 0;
    for (int64_t i = w->n * c / w->threads; i < w->n * (c + 1) / w->threads; i++) s += w->x[i];
    w->offset[c] = s;
  }
}

static void chunk_scan(void *ctx, int64_t lo, int64_t hi) {
  scan2_args *w = ctx;
  for (int64_t c = lo; c < hi; c++) {
    int64_t a = w->n * c / w->threads, b = w->n * (c + 1) / w->threads;
    cumsum_from(w->out + a, w->x + a, b - a, w->offset[c]);
  }
}

void hand_cumsum_2pass(float *out, const float *x, int64_t n, int threads) {
  double offset[64];
  if (threads > 64) threads = 64;
  scan2_args w = {out, x, n, threads, offset};
  hand_parallel_for(threads, threads, chunk_total, &w);
  double before = 0;
  for (int c = 0; c < threads; c++) {
    double t = offset[c];
    offset[c] = before;
    before += t;
  }
  hand_parallel_for(threads, threads, chunk_scan, &w);
}

/* ---- W6: column standardization ------------------------------------------
 * x does not fit in cache, so the column statistics are one pass (each thread
 * a range of columns, sums in double, shifted by the first row so a large
 * mean does not cancel), then one pass over rows writes the output. */

enum { COL_BLOCK = 1024 };  /* two double accumulators per column: 16 KiB, in L1 */

typedef struct {
  float *out, *mean, *inv_std;  /* mean, inv_std: one per column */
  const float *x;
  int64_t rows, cols;
} cols_args;

static void col_stats_body(void *ctx, int64_t lo, int64_t hi) {
  const cols_args *w = ctx;
  int64_t n = w->rows, ld = w->cols;
  for (int64_t c0 = lo; c0 < hi; c0 += COL_BLOCK) {
    int64_t nc = hi - c0 < COL_BLOCK ? hi - c0 : COL_BLOCK;
    const float *restrict k = w->x + c0;  /* the shift: row 0 */
    double s[COL_BLOCK] = {0}, q[COL_BLOCK] = {0};
    for (int64_t r = 0; r < n; r++) {
      const float *restrict x = w->x + r * ld + c0;
      for (int64_t j = 0; j < nc; j++) {
        double d = (double)x[j] - (double)k[j];
        s[j] += d;
        q[j] += d * d;
      }
    }
    for (int64_t j = 0; j < nc; j++) {
      double var = (q[j] - s[j] * s[j] / (double)n) / (double)(n - 1);  /* unbiased */
      w->mean[c0 + j] = (float)(k[j] + s[j] / (double)n);
      w->inv_std[c0 + j] = (float)(1.0 / sqrt(var));
    }
  }
}

static void col_apply_body(void *ctx, int64_t lo, int64_t hi) {
  const cols_args *w = ctx;
  const float *restrict mean = w->mean, *restrict inv = w->inv_std;
  for (int64_t r = lo; r < hi; r++) {
    const float *restrict x = w->x + r * w->cols;
    float *restrict y = w->out + r * w->cols;
    for (int64_t j = 0; j < w->cols; j++) y[j] = (x[j] - mean[j]) * inv[j];
  }
}

void hand_standardize_cols(float *out, const float *x, int64_t rows, int64_t cols, int threads) {
  float *stats = malloc(sizeof *stats * 2 * (size_t)cols);
  if (!stats) abort();  /* 16 KiB for W6: not worth a recovery path in a benchmark */
  cols_args w = {out, stats, stats + cols, x, rows, cols};
  hand_parallel_for(threads, cols, col_stats_body, &w);
  hand_parallel_for(threads, rows, col_apply_body, &w);
  free(stats);
}

/* ---- W5: sums and the STREAM-like yardsticks ------------------------------ */

/* Sum of x[lo, hi) in 64 float lanes: independent vector accumulators, so
 * the loop is bound by memory, not by the latency of one chain of adds. */
static float sum_lanes(const float *restrict x, int64_t lo, int64_t hi) {
  float acc[64] = {0};
  int64_t i = lo;
  for (; i + 64 <= hi; i += 64)
    for (int j = 0; j < 64; j++) acc[j] += x[i + j];
  float s = 0.0f;
  for (; i < hi; i++) s += x[i];
  for (int j = 0; j < 64; j++) s += acc[j];
  return s;
}

typedef struct {
  const float *x;
  bool exact;        /* c-hand: blocks of floats combined in double */
  pthread_mutex_t mu;
  double total;
} sum_args;

enum { SUM_BLOCK = 4096 };  /* float partial sums stay small: error ~ 1e-7 relative */

static void sum_body(void *ctx, int64_t lo, int64_t hi) {
  sum_args *w = ctx;
  double s = 0.0;
  if (w->exact)
    for (int64_t i = lo; i < hi; i += SUM_BLOCK) s += sum_lanes(w->x, i, hi - i < SUM_BLOCK ? hi : i + SUM_BLOCK);
  else
    s = sum_lanes(w->x, lo, hi);
  pthread_mutex_lock(&w->mu);
  w->total += s;
  pthread_mutex_unlock(&w->mu);
}

static float sum_with(const float *x, int64_t n, int threads, bool exact) {
  sum_args w = {.x = x, .exact = exact, .mu = PTHREAD_MUTEX_INITIALIZER};
  hand_parallel_for(threads, n, sum_body, &w);
  return (float)w.total;
}

float hand_sum(const float *x, int64_t n, int threads) { return sum_with(x, n, threads, true); }

float hand_stream_sum(const float *x, int64_t n, int threads) { return sum_with(x, n, threads, false); }

typedef struct {
  float *a;
  const float *b, *c;
  float s;
} triad_args;

static void triad_body(void *ctx, int64_t lo, int64_t hi) {
  const triad_args *w = ctx;
  float *restrict a = w->a;
  const float *restrict b = w->b, *restrict c = w->c;
  for (int64_t i = lo; i < hi; i++) a[i] = b[i] + w->s * c[i];
}

void hand_stream_triad(float *a, const float *b, const float *c, float s, int64_t n, int threads) {
  triad_args w = {a, b, c, s};
  hand_parallel_for(threads, n, triad_body, &w);
}

typedef struct {
  float *out;
  const float *table, *bias;
  const int64_t *idx;
  int64_t cols;
} gather_args;

static void gather_body(void *ctx, int64_t lo, int64_t hi) {
  const gather_args *g = ctx;
  const float *restrict bias = g->bias;
  for (int64_t r = lo; r < hi; r++) {
    const float *restrict row = g->table + g->idx[r] * g->cols;
    float *restrict o = g->out + r * g->cols;
    for (int64_t j = 0; j < g->cols; j++) o[j] = row[j] + bias[j];
  }
}

void hand_gather_bias(float *out, const float *table, const int64_t *idx, const float *bias, int64_t rows,
                      int64_t cols, int threads) {
  gather_args g = {out, table, bias, idx, cols};
  hand_parallel_for(threads, rows, gather_body, &g);
}

typedef struct {
  float *out;
  const float *x;
  hand_math fn;
} math_args;

static void math_body(void *ctx, int64_t lo, int64_t hi) {
  const math_args *w = ctx;
  float *restrict out = w->out;
  const float *restrict x = w->x;
  if (w->fn == HAND_ERF)
    for (int64_t i = lo; i < hi; i++) out[i] = erff(x[i]);
  else
    for (int64_t i = lo; i < hi; i++) out[i] = log1pf(x[i]);
}

void hand_math_map(float *out, const float *x, int64_t n, hand_math fn, int threads) {
  math_args w = {out, x, fn};
  hand_parallel_for(threads, n, math_body, &w);
}

/* W11: the 8 largest of each row, largest first: a sorted window of k
 * that a row element enters only when it beats the smallest kept. */
typedef struct {
  float *out;
  const float *x;
  int64_t cols, k;
} topk_args;

static void topk_body(void *ctx, int64_t lo, int64_t hi) {
  const topk_args *w = ctx;
  for (int64_t r = lo; r < hi; r++) {
    const float *x = w->x + r * w->cols;
    float *y = w->out + r * w->k;
    int64_t m = 0;
    for (int64_t j = 0; j < w->cols; j++) {
      if (m == w->k && x[j] <= y[m - 1]) continue;
      int64_t i = m < w->k ? m++ : m - 1;
      for (; i > 0 && y[i - 1] < x[j]; i--) y[i] = y[i - 1];
      y[i] = x[j];
    }
  }
}

void hand_topk_rows(float *out, const float *x, int64_t rows, int64_t cols, int64_t k, int threads) {
  topk_args w = {out, x, cols, k};
  hand_parallel_for(threads, rows, topk_body, &w);
}

static int float_order(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

void hand_sort(float *out, const float *x, int64_t n) {
  memcpy(out, x, sizeof *out * (size_t)n);
  qsort(out, (size_t)n, sizeof *out, float_order);
}
