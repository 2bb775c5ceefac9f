/* kiln_bench: times kiln's fused kernels against eager kiln and hand-written
 * C on the workloads of bench/README.md, prints a table of medians and ratios and
 * writes JSON. A workload is one row of `workloads[]`: setup, the kiln
 * expression, the reference result, teardown, and the implementations to run.
 * With --device cuda:0 the inputs live on the GPU, kiln's rows are timed
 * there and set against a device-to-device copy and cuBLASLt (gpu.c). */
#include <kiln.h>

#include "attention.h"
#include "common.h"
#include "gpu.h"
#include "hand.h"

#ifdef KILN_BENCH_OPENBLAS
#include <cblas.h>

#include "conv.h"
#endif
#ifdef KILN_BENCH_MODELS
#include "models.h"
#endif

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_IMPLS 6
#define MIN_RUNS 5
#define MISMATCH_TOL 1e-5   /* largest |got - want| / max(1, |want|) */

/* ---- workload table types ------------------------------------------------ */

typedef struct {
  const char *name;                        /* row label: kiln-fused, c-hand, ... */
  int mode;                                /* kiln rows: KILN_EAGER's 1 is kiln_set_eager(1), KILN_GENERIC's 2
                                              the shape-generic variant (kiln_set_dynamic), KILN_FN's 3 a
                                              replay through kiln_compile / kiln_fn_run, KILN_SPECIALISED's
                                              5 the shape-specialised variant */
  void (*native)(void *st, int threads);   /* non-kiln rows; NULL for kiln rows */
  double bytes;                            /* ideal bytes when not the workload's (stream-triad) */
} impl;

#define KILN_FUSED {"kiln-fused", 0, NULL, 0}
#define KILN_EAGER {"kiln-eager", 1, NULL, 0}
/* fused, with sizes and strides as launch arguments (kiln_set_dynamic) */
#define KILN_GENERIC {"kiln-generic", 2, NULL, 0}
#define KILN_FN_MODE 3
#define KILN_FN {"kiln-fn", KILN_FN_MODE, NULL, 0}
/* the kernels' own times of a kiln-fn replay, summed (KILN_DEBUG=1 in a child) */
#define KILN_KERNELS_MODE 4
#define KILN_KERNELS {"kernels-sum", KILN_KERNELS_MODE, NULL, 0}
/* fused, shape-specialised (a CPU GEMM's fused row is shape-generic) */
#define KILN_SPECIALISED_MODE 5
#define KILN_SPECIALISED {"kiln-specialised", KILN_SPECIALISED_MODE, NULL, 0}

/* The state of a workload with a kiln-fn row starts with its input tensors:
 * the row builds the expression on placeholders in their place, compiles it
 * once and times kiln_fn_run with the real ones (the output written in place). */
typedef struct {
  int n;
  kiln_tensor *t[3];
} fn_inputs;

typedef struct {
  const char *name;                        /* W1 */
  const char *what;                        /* one line shown above the table */
  double bytes;                            /* ideal bytes moved per run; 0: no GB/s */
  int runs;                                /* timed runs; 0: --runs */
  void *(*setup)(void);                    /* NULL when it cannot allocate */
  kiln_tensor *(*build)(void *st);         /* the expression; realized by the runner */
  const float *(*expected)(void *st, int64_t *n);  /* the reference result */
  void (*teardown)(void *st);
  impl impls[MAX_IMPLS];                   /* ends at the first without a name */
  double flops;                            /* ideal FLOPs per run; 0: no GFLOP/s */
  double tol;                              /* largest relative difference; 0: MISMATCH_TOL */
  /* A matrix product: its shape and host operands, for cuBLASLt on a GPU. */
  void (*gemm)(void *st, gpu_gemm *g);
} workload;

static int bench_threads;  /* kiln's pool and the hand loops use this many */
static bool on_gpu;        /* --device cuda:0 */
static int failed;         /* a mismatch or a kiln error: exit non-zero */
static const kiln_device cuda0 = {KILN_CUDA, 0};

/* A workload's input view of host memory, on cuda:0 under --device (copied
 * there now, before any timing). */
static kiln_tensor *placed(kiln_tensor *host) {
  if (!on_gpu) return host;
  kiln_tensor *d = kiln_to(host, cuda0);
  if (kiln_realize(d) != KILN_OK) {
    printf("ERROR input to cuda:0: %s\n", kiln_last_error());
    failed = 1;
  }
  kiln_release(host);
  return d;
}

/* ---- data ---------------------------------------------------------------- */

/* splitmix64: a fixed-seed generator, so every run sees the same inputs. */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Fills p[0, n) uniformly in [lo, hi). */
static void fill_floats(float *p, int64_t n, uint64_t seed, double lo, double hi) {
  for (int64_t i = 0; i < n; i++)
    p[i] = (float)(lo + (double)(rng_next(&seed) >> 11) * 0x1p-53 * (hi - lo));
}

/* n floats uniform in [lo, hi), 64-byte aligned like kiln's own buffers;
 * writing them also faults every page in before timing. */
static float *random_floats_in(int64_t n, uint64_t seed, double lo, double hi) {
  float *p = bench_alloc((size_t)n * sizeof(float));
  if (p) fill_floats(p, n, seed, lo, hi);
  return p;
}

static float *random_floats(int64_t n, uint64_t seed) { return random_floats_in(n, seed, -2.0, 2.0); }

/* ---- W1: relu(a*b + c) * sigmoid(a) on 16M f32 ---------------------------- */

#define W1_N ((int64_t)16 << 20)

/* Three inputs, one f32 output: W1's (f32 inputs) and W13's (i32). */
typedef struct {
  void *a, *b, *c;
  float *out;                    /* the hand loop's result, the reference */
  kiln_tensor *ta, *tb, *tc;     /* zero-copy views of a, b, c */
  int threads;
} w1_state;

static void w1_teardown(void *p) {
  w1_state *s = p;
  kiln_release(s->ta);
  kiln_release(s->tb);
  kiln_release(s->tc);
  free(s->a);
  free(s->b);
  free(s->c);
  free(s->out);
  free(s);
}

static void w1_hand(void *p, int threads) {
  w1_state *s = p;
  hand_w1(s->out, s->a, s->b, s->c, W1_N, threads);
}

static void *w1_setup(void) {
  w1_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->a = random_floats(W1_N, 1);
  s->b = random_floats(W1_N, 2);
  s->c = random_floats(W1_N, 3);
  s->out = random_floats(W1_N, 4);  /* also touches every page before timing */
  if (!s->a || !s->b || !s->c || !s->out) {
    w1_teardown(s);
    return NULL;
  }
  s->ta = placed(kiln_from_buffer(s->a, KILN_F32, KILN_SHAPE(W1_N)));
  s->tb = placed(kiln_from_buffer(s->b, KILN_F32, KILN_SHAPE(W1_N)));
  s->tc = placed(kiln_from_buffer(s->c, KILN_F32, KILN_SHAPE(W1_N)));
  w1_hand(s, bench_threads);
  return s;
}

static kiln_tensor *w1_build(void *p) {
  w1_state *s = p;
  return kiln_mul(kiln_relu(kiln_add(kiln_mul(s->ta, s->tb), s->tc)), kiln_sigmoid(s->ta));
}

static const float *w1_expected(void *p, int64_t *n) {
  *n = W1_N;
  return ((w1_state *)p)->out;
}

/* ---- W13: integer floor_divide, remainder, bitwise_and on 16M i32 -------- */

#define W13_N ((int64_t)16 << 20)

static void w13_hand(void *p, int threads) {
  w1_state *s = p;
  hand_w13(s->out, s->a, s->b, s->c, W13_N, threads);
}

/* a over all of int32, b in +-[2, 100] (never 0 or -1: see hand_w13), c any. */
static void *w13_setup(void) {
  w1_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  int32_t *a = s->a = bench_alloc(sizeof *a * (size_t)W13_N), *b = s->b = bench_alloc(sizeof *b * (size_t)W13_N);
  int32_t *c = s->c = bench_alloc(sizeof *c * (size_t)W13_N);
  s->out = bench_alloc(sizeof *s->out * (size_t)W13_N);
  if (!a || !b || !c || !s->out) {
    w1_teardown(s);
    return NULL;
  }
  uint64_t seed = 13;
  for (int64_t i = 0; i < W13_N; i++) {
    uint64_t r = rng_next(&seed);
    a[i] = (int32_t)(uint32_t)r;
    b[i] = (int32_t)(2 + (r >> 32) % 99) * ((r >> 40) & 1 ? -1 : 1);
    c[i] = (int32_t)(uint32_t)(r >> 17);
  }
  s->ta = placed(kiln_from_buffer(s->a, KILN_I32, KILN_SHAPE(W13_N)));
  s->tb = placed(kiln_from_buffer(s->b, KILN_I32, KILN_SHAPE(W13_N)));
  s->tc = placed(kiln_from_buffer(s->c, KILN_I32, KILN_SHAPE(W13_N)));
  w13_hand(s, bench_threads);
  return s;
}

static kiln_tensor *w13_build(void *p) {
  w1_state *s = p;
  kiln_tensor *q = kiln_floor_divide(s->ta, s->tb), *r = kiln_remainder(s->ta, s->tb);
  return kiln_cast(kiln_bitwise_and(kiln_add(q, r), s->tc), KILN_F32);
}

static const float *w13_expected(void *p, int64_t *n) {
  *n = W13_N;
  return ((w1_state *)p)->out;
}

/* ---- Wm: one math function on 16M f32, against glibc's libm ------------- */

#define WM_N ((int64_t)16 << 20)

typedef struct {
  float *x, *out;                /* out: the hand loop's result, the reference */
  kiln_tensor *tx;               /* a zero-copy view of x */
  hand_math fn;
} wm_state;

static void wm_teardown(void *p) {
  wm_state *s = p;
  kiln_release(s->tx);
  free(s->x);
  free(s->out);
  free(s);
}

static void wm_hand(void *p, int threads) {
  wm_state *s = p;
  hand_math_map(s->out, s->x, WM_N, s->fn, threads);
}

static void *wm_setup(hand_math fn, double lo, double hi) {
  wm_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->fn = fn;
  s->x = random_floats_in(WM_N, 5, lo, hi);
  s->out = random_floats(WM_N, 6);
  if (!s->x || !s->out) {
    wm_teardown(s);
    return NULL;
  }
  s->tx = placed(kiln_from_buffer(s->x, KILN_F32, KILN_SHAPE(WM_N)));
  wm_hand(s, bench_threads);
  return s;
}

static void *wm_erf_setup(void) { return wm_setup(HAND_ERF, -4, 4); }
static void *wm_log1p_setup(void) { return wm_setup(HAND_LOG1P, -0.99, 8); }

static kiln_tensor *wm_build(void *p) {
  wm_state *s = p;
  return s->fn == HAND_ERF ? kiln_erf(s->tx) : kiln_log1p(s->tx);
}

static const float *wm_expected(void *p, int64_t *n) {
  *n = WM_N;
  return ((wm_state *)p)->out;
}

/* ---- W2, W3, W6: one f32 matrix in, one out ------------------------------ *
 * The hand-written loop's result is the reference kiln's is checked against
 * (it is computed in setup, and rewritten identically by the c-hand row). */

typedef struct {
  int64_t rows, cols;
  float *x, *out;                /* out: the hand loop's result, the reference */
  kiln_tensor *tx;               /* zero-copy view of x */
  hand_matrix_fn *hand;
} mat_state;

static void mat_teardown(void *p) {
  mat_state *s = p;
  kiln_release(s->tx);
  free(s->x);
  free(s->out);
  free(s);
}

static void mat_hand(void *p, int threads) {
  mat_state *s = p;
  s->hand(s->out, s->x, s->rows, s->cols, threads);
}

static void *mat_setup(int64_t rows, int64_t cols, hand_matrix_fn *hand) {
  mat_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  *s = (mat_state){.rows = rows, .cols = cols, .hand = hand};
  s->x = random_floats(rows * cols, 10);
  s->out = random_floats(rows * cols, 11);
  if (!s->x || !s->out) {
    mat_teardown(s);
    return NULL;
  }
  s->tx = placed(kiln_from_buffer(s->x, KILN_F32, KILN_SHAPE(rows, cols)));
  mat_hand(s, bench_threads);
  return s;
}

static const float *mat_expected(void *p, int64_t *n) {
  mat_state *s = p;
  *n = s->rows * s->cols;
  return s->out;
}

static kiln_tensor *mat_x(void *p) { return ((mat_state *)p)->tx; }

static void *w2_setup(void) { return mat_setup(4096, 4096, hand_softmax_rows); }
static kiln_tensor *w2_build(void *p) { return kiln_softmax(mat_x(p), -1); }

static void *w3_setup(void) { return mat_setup(8192, 1024, hand_layer_norm_rows); }
static kiln_tensor *w3_build(void *p) { return kiln_layer_norm(mat_x(p), 1, NULL, NULL, HAND_LN_EPS); }

static void *w6_setup(void) { return mat_setup(8192, 2048, hand_standardize_cols); }
static kiln_tensor *w6_build(void *p) {
  kiln_tensor *x = mat_x(p);
  return kiln_div(kiln_sub(x, kiln_mean_dims(x, KILN_DIMS(0), 1)), kiln_std_dims(x, KILN_DIMS(0), 1, 1));
}

static void *w10_setup(void) { return mat_setup(4096, 4096, hand_cumsum_rows); }
static kiln_tensor *w10_build(void *p) { return kiln_cumsum(mat_x(p), -1); }

/* ---- W11: top-k along rows, and one long sort ------------------------------ *
 * W11-topk: topk(x, 8, -1) of f32[4096,4096]; W11-sort: sort of f32[16M].
 * The C rows: a sorted window of 8 per row; qsort of a copy. */

#define W11_ROWS 4096
#define W11_COLS 4096
#define W11_K 8
#define W11_N ((int64_t)16 << 20)

typedef struct {
  int64_t n, nout;
  float *x, *out;                /* out: the C result, the reference */
  kiln_tensor *tx;
} w11_state;

static void w11_teardown(void *p) {
  w11_state *s = p;
  kiln_release(s->tx);
  free(s->x);
  free(s->out);
  free(s);
}

static void w11_topk_hand(void *p, int threads) {
  w11_state *s = p;
  hand_topk_rows(s->out, s->x, W11_ROWS, W11_COLS, W11_K, threads);
}

static void w11_sort_hand(void *p, int threads) {
  w11_state *s = p;
  (void)threads;   /* qsort is one thread; so is kiln's sort of one line */
  hand_sort(s->out, s->x, s->n);
}

static void *w11_setup(int64_t n, int64_t nout, int ndim, const int64_t *shape, void (*hand)(void *, int)) {
  w11_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  *s = (w11_state){.n = n, .nout = nout};
  s->x = random_floats(n, 12);
  s->out = random_floats(nout, 13);
  if (!s->x || !s->out) {
    w11_teardown(s);
    return NULL;
  }
  s->tx = placed(kiln_from_buffer(s->x, KILN_F32, ndim, shape));
  hand(s, bench_threads);
  return s;
}

static void *w11_topk_setup(void) {
  return w11_setup(W11_ROWS * W11_COLS, W11_ROWS * W11_K, KILN_SHAPE(W11_ROWS, W11_COLS), w11_topk_hand);
}
static void *w11_sort_setup(void) { return w11_setup(W11_N, W11_N, KILN_SHAPE(W11_N), w11_sort_hand); }

static kiln_tensor *w11_topk_build(void *p) {
  kiln_tensor *v = NULL;
  kiln_topk(((w11_state *)p)->tx, W11_K, -1, 1, 1, &v, NULL);
  return v;
}

static kiln_tensor *w11_sort_build(void *p) {
  kiln_tensor *v = NULL;
  kiln_sort(((w11_state *)p)->tx, 0, 0, 0, &v, NULL);
  return v;
}

static const float *w11_expected(void *p, int64_t *n) {
  w11_state *s = p;
  *n = s->nout;
  return s->out;
}

/* ---- W10-dim0 and W10-long: cumsum down the columns, and of one long line -- */
static void *w10d_setup(void) { return mat_setup(4096, 4096, hand_cumsum_cols); }
static kiln_tensor *w10d_build(void *p) { return kiln_cumsum(mat_x(p), 0); }

static void w10l_hand(void *p, int threads) {
  w11_state *s = p;
  (void)threads;   /* the serial loop: one thread */
  hand_cumsum(s->out, s->x, s->n);
}

static void w10l_two_pass(void *p, int threads) {
  w11_state *s = p;
  hand_cumsum_2pass(s->out, s->x, s->n, threads);
}

static void *w10l_setup(void) { return w11_setup(W11_N, W11_N, KILN_SHAPE(W11_N), w10l_hand); }
static kiln_tensor *w10l_build(void *p) { return kiln_cumsum(((w11_state *)p)->tx, 0); }

/* ---- W10-lcse: logcumsumexp of one long line ------------------------------ */
static void w10x_hand(void *p, int threads) {
  w11_state *s = p;
  (void)threads;   /* the serial loop: one thread */
  hand_logcumsumexp(s->out, s->x, s->n);
}

static void *w10x_setup(void) { return w11_setup(W11_N, W11_N, KILN_SHAPE(W11_N), w10x_hand); }
static kiln_tensor *w10x_build(void *p) { return kiln_logcumsumexp(((w11_state *)p)->tx, 0); }

#define MAT_BYTES(rows, cols, passes) (passes) * 4.0 * (rows) * (cols)
#define MAT_IMPLS {KILN_FUSED, KILN_EAGER, {"c-hand", 0, mat_hand, 0}}
#define MAT_IMPLS_GENERIC {KILN_FUSED, KILN_GENERIC, KILN_EAGER, {"c-hand", 0, mat_hand, 0}}

/* ---- W5: sum of 64M f32, with the STREAM-like yardsticks ------------------ */

#define W5_N ((int64_t)64 << 20)

typedef struct {
  float *x;                      /* summed; also triad's b */
  float *c, *a;                  /* triad's other input and its output */
  float want;                    /* hand_sum's result, the reference */
  volatile float sink;           /* stream-sum's result, kept so it is computed */
  kiln_tensor *tx;
} w5_state;

static void w5_teardown(void *p) {
  w5_state *s = p;
  kiln_release(s->tx);
  free(s->x);
  free(s->c);
  free(s->a);
  free(s);
}

static void w5_hand(void *p, int threads) {
  w5_state *s = p;
  s->want = hand_sum(s->x, W5_N, threads);
}

static void w5_stream_sum(void *p, int threads) {
  w5_state *s = p;
  s->sink = hand_stream_sum(s->x, W5_N, threads);
}

static void w5_stream_triad(void *p, int threads) {
  w5_state *s = p;
  hand_stream_triad(s->a, s->x, s->c, 3.0f, W5_N, threads);
}

static void *w5_setup(void) {
  w5_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  /* [0, 1), not [-2, 2): a sum that cannot cancel to near zero, so a relative
   * tolerance on it means something. */
  s->x = random_floats_in(W5_N, 12, 0.0, 1.0);
  s->c = random_floats(W5_N, 13);
  s->a = random_floats(W5_N, 14);
  if (!s->x || !s->c || !s->a) {
    w5_teardown(s);
    return NULL;
  }
  s->tx = placed(kiln_from_buffer(s->x, KILN_F32, KILN_SHAPE(W5_N)));
  w5_hand(s, bench_threads);
  return s;
}

static kiln_tensor *w5_build(void *p) { return kiln_sum(((w5_state *)p)->tx); }

static const float *w5_expected(void *p, int64_t *n) {
  *n = 1;
  return &((w5_state *)p)->want;
}

/* ---- W9: compile and dispatch per kernel, on tiny inputs ------------------ *
 * Four kinds of kernel on 16x16 f32; shapes used nowhere else in the run, so
 * each warm-up compiles (its kiln-compile row) and the timed runs measure the
 * cached dispatch. The reference is plain C in double. */

#define W9_D 16

typedef struct {
  fn_inputs in;                  /* a, b, c */
  float a[W9_D * W9_D], b[W9_D * W9_D], c[W9_D * W9_D], want[W9_D * W9_D];
  float out[W9_D * W9_D];        /* a c-hand row's result */
  int64_t nwant;
} w9_state;

static void w9_teardown(void *p) {
  w9_state *s = p;
  for (int i = 0; i < s->in.n; i++) kiln_release(s->in.t[i]);
  free(s);
}

/* Inputs, their views, then ref() fills want. */
static void *w9_setup(void (*ref)(w9_state *s)) {
  w9_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  fill_floats(s->a, W9_D * W9_D, 15, -2.0, 2.0);
  fill_floats(s->b, W9_D * W9_D, 16, -2.0, 2.0);
  fill_floats(s->c, W9_D * W9_D, 17, -2.0, 2.0);
  s->in = (fn_inputs){3, {kiln_from_buffer(s->a, KILN_F32, KILN_SHAPE(W9_D, W9_D)),
                          kiln_from_buffer(s->b, KILN_F32, KILN_SHAPE(W9_D, W9_D)),
                          kiln_from_buffer(s->c, KILN_F32, KILN_SHAPE(W9_D, W9_D))}};
  ref(s);
  return s;
}

static const float *w9_expected(void *p, int64_t *n) {
  w9_state *s = p;
  *n = s->nwant;
  return s->want;
}

/* An elementwise chain: tanh(a*b + c) - a. */
static void w9_ew_ref(w9_state *s) {
  s->nwant = W9_D * W9_D;
  for (int i = 0; i < W9_D * W9_D; i++)
    s->want[i] = (float)(tanh((double)s->a[i] * s->b[i] + s->c[i]) - s->a[i]);
}
static void *w9_ew_setup(void) { return w9_setup(w9_ew_ref); }
static kiln_tensor *w9_ew_build(void *p) {
  w9_state *s = p;
  return kiln_sub(kiln_tanh(kiln_add(kiln_mul(s->in.t[0], s->in.t[1]), s->in.t[2])), s->in.t[0]);
}

/* A row reduction with a fused producer: sum(a*b, dim=1). */
static void w9_rowsum_ref(w9_state *s) {
  s->nwant = W9_D;
  for (int i = 0; i < W9_D; i++) {
    double t = 0;
    for (int j = 0; j < W9_D; j++) t += (double)s->a[i * W9_D + j] * s->b[i * W9_D + j];
    s->want[i] = (float)t;
  }
}
static void *w9_rowsum_setup(void) { return w9_setup(w9_rowsum_ref); }
static kiln_tensor *w9_rowsum_build(void *p) {
  w9_state *s = p;
  return kiln_sum_dims(kiln_mul(s->in.t[0], s->in.t[1]), KILN_DIMS(1), 0);
}

static void w9_softmax_ref(w9_state *s) {
  s->nwant = W9_D * W9_D;
  for (int i = 0; i < W9_D; i++) {
    const float *x = s->a + i * W9_D;
    double m = x[0], t = 0;
    for (int j = 1; j < W9_D; j++) m = fmax(m, x[j]);
    for (int j = 0; j < W9_D; j++) t += exp(x[j] - m);
    for (int j = 0; j < W9_D; j++) s->want[i * W9_D + j] = (float)(exp(x[j] - m) / t);
  }
}
/* The same softmax as plain C in float, libm's expf: a per-call row whose
 * time moves with the machine alone (a shared VM's speed can change by 1.5x
 * from one minute to the next, and this loop slows as much as kiln). */
static void w9_softmax_hand(void *p, int threads) {
  (void)threads;
  w9_state *s = p;
  for (int i = 0; i < W9_D; i++) {
    const float *x = s->a + i * W9_D;
    float *y = s->out + i * W9_D, m = x[0], t = 0;
    for (int j = 1; j < W9_D; j++) m = fmaxf(m, x[j]);
    for (int j = 0; j < W9_D; j++) t += y[j] = expf(x[j] - m);
    for (int j = 0; j < W9_D; j++) y[j] /= t;
  }
  __asm__ volatile("" ::: "memory");   /* the result is read by nobody: keep the loops */
}
static void *w9_softmax_setup(void) { return w9_setup(w9_softmax_ref); }
static kiln_tensor *w9_softmax_build(void *p) { return kiln_softmax(((w9_state *)p)->in.t[0], -1); }

static void w9_matmul_ref(w9_state *s) {
  s->nwant = W9_D * W9_D;
  for (int i = 0; i < W9_D; i++)
    for (int j = 0; j < W9_D; j++) {
      double t = 0;
      for (int k = 0; k < W9_D; k++) t += (double)s->a[i * W9_D + k] * s->b[k * W9_D + j];
      s->want[i * W9_D + j] = (float)t;
    }
}
static void *w9_matmul_setup(void) { return w9_setup(w9_matmul_ref); }
static kiln_tensor *w9_matmul_build(void *p) {
  w9_state *s = p;
  return kiln_matmul(s->in.t[0], s->in.t[1]);
}

/* A W9 row: kiln-fused (its warm-up gives the kiln-compile row) and the
 * same kernel replayed through a compiled function. */
#define W9_ROW(name, what, kind) \
  {name, what, 0, 10000, w9_##kind##_setup, w9_##kind##_build, w9_expected, w9_teardown, {KILN_FUSED, KILN_FN}, 0, 0, NULL}

/* ---- W8: dispatch of a cached kernel, a + b on 16 elements ---------------- */

#define W8_N 16

typedef struct {
  fn_inputs in;                  /* a, b */
  float a[W8_N], b[W8_N], sum[W8_N];
  int64_t calls;                 /* W8-scalar: builds so far */
} w8_state;

static void *w8_setup(void) {
  w8_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  for (int i = 0; i < W8_N; i++) {
    s->a[i] = (float)i;
    s->b[i] = 0.5f * (float)i;
    s->sum[i] = s->a[i] + s->b[i];
  }
  s->in = (fn_inputs){2, {kiln_from_buffer(s->a, KILN_F32, KILN_SHAPE(W8_N)),
                          kiln_from_buffer(s->b, KILN_F32, KILN_SHAPE(W8_N))}};
  return s;
}

static kiln_tensor *w8_build(void *p) {
  w8_state *s = p;
  return kiln_add(s->in.t[0], s->in.t[1]);
}

/* a * s with a new s every call (the first call's s is 1: its expected
 * result is a). */
static kiln_tensor *w8_scalar_build(void *p) {
  w8_state *s = p;
  return kiln_muls(s->in.t[0], 1.0 + 1e-3 * (double)s->calls++);
}

static const float *w8_scalar_expected(void *p, int64_t *n) {
  *n = W8_N;
  return ((w8_state *)p)->a;
}

static const float *w8_expected(void *p, int64_t *n) {
  *n = W8_N;
  return ((w8_state *)p)->sum;
}

static void w8_teardown(void *p) {
  w8_state *s = p;
  for (int i = 0; i < s->in.n; i++) kiln_release(s->in.t[i]);
  free(s);
}

/* ---- W8-threads: realizes on 2 threads at once against 1 ----------------------- *
 * A sample is W8T_PAIRS fresh graphs per thread, each a + b on f32[16] and
 * softmax on f32[16,16], realized and checked: with no lock held for a
 * whole realize, 2 threads should take about as long as 1 (on 2 free
 * cores), a per-thread throughput close to the single thread's. */
#define W8T_PAIRS 200

typedef struct {
  float a[W8_N], b[W8_N], x[256];
  bool bad[2];                   /* per thread: a wrong value */
} w8t_state;

typedef struct {
  w8t_state *s;
  int id;
} w8t_job;

static void *w8t_setup(void) {
  w8t_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  for (int i = 0; i < W8_N; i++) s->a[i] = (float)i, s->b[i] = 0.5f * (float)i;
  fill_floats(s->x, 256, 10, -2.0, 2.0);
  return s;
}

static void *w8t_worker(void *p) {
  w8t_job *j = p;
  w8t_state *s = j->s;
  for (int i = 0; i < W8T_PAIRS && !s->bad[j->id]; i++) {
    kiln_scope_begin();
    const float *sum = kiln_data(kiln_add(kiln_from_buffer(s->a, KILN_F32, KILN_SHAPE(W8_N)),
                                          kiln_from_buffer(s->b, KILN_F32, KILN_SHAPE(W8_N))));
    const float *sm = kiln_data(kiln_softmax(kiln_from_buffer(s->x, KILN_F32, KILN_SHAPE(16, 16)), -1));
    double row = 0;
    for (int k = 0; sm && k < 16; k++) row += sm[k];
    s->bad[j->id] = !sum || !sm || sum[W8_N - 1] != 1.5f * (W8_N - 1) || fabs(row - 1) > 1e-5;
    kiln_scope_end();
  }
  return NULL;
}

static void w8t_check(const w8t_state *s, int n) {
  for (int i = 0; i < n; i++)
    if (s->bad[i]) {
      printf("MISMATCH W8-threads: thread %d: %s\n", i, kiln_last_error());
      failed = 1;
    }
}

static void w8t_one(void *p, int threads) {
  (void)threads;
  w8t_worker(&(w8t_job){p, 0});
  w8t_check(p, 1);
}

static void w8t_two(void *p, int threads) {
  (void)threads;
  pthread_t th;
  w8t_job second = {p, 1};
  bool started = pthread_create(&th, NULL, w8t_worker, &second) == 0;
  w8t_worker(&(w8t_job){p, 0});
  if (started) pthread_join(th, NULL);
  else ((w8t_state *)p)->bad[1] = true;
  w8t_check(p, 2);
}

static void w8t_teardown(void *p) { free(p); }

/* ---- W8-batch: a new batch size every call ------------------------------------ *
 * relu(x * w + 1) on x f32[batch, 16] over the first batch rows of one
 * buffer: setup realizes two sizes, so the structure runs its shape-generic
 * kernel from then on, and each timed call (batch 3, 4, ... : never 1,
 * which would broadcast) plans its new shape but compiles nothing. */
#define W8B_COLS 16
#define W8B_ROWS 1026
#define W8B_RUNS 1000

typedef struct {
  float x[W8B_ROWS * W8B_COLS], w[W8B_COLS], want[W8B_ROWS * W8B_COLS];
  kiln_tensor *tw;
  int64_t calls, batch;
} w8b_state;

static kiln_tensor *w8b_expr(w8b_state *s, int64_t batch) {
  kiln_tensor *x = kiln_from_buffer(s->x, KILN_F32, KILN_SHAPE(batch, W8B_COLS));
  return kiln_relu(kiln_adds(kiln_mul(x, s->tw), 1.0));
}

static void *w8b_setup(void) {
  w8b_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  fill_floats(s->x, W8B_ROWS * W8B_COLS, 10, -2.0, 2.0);
  fill_floats(s->w, W8B_COLS, 11, -2.0, 2.0);
  for (int i = 0; i < W8B_ROWS * W8B_COLS; i++) s->want[i] = fmaxf(s->x[i] * s->w[i % W8B_COLS] + 1.0f, 0.0f);
  s->tw = kiln_from_buffer(s->w, KILN_F32, KILN_SHAPE(W8B_COLS));
  for (int64_t b = W8B_ROWS; b > W8B_ROWS - 2; b--) {
    kiln_scope_begin();
    bool ok = kiln_realize(w8b_expr(s, b)) == KILN_OK;
    kiln_scope_end();
    if (!ok) {
      kiln_release(s->tw);
      free(s);
      return NULL;
    }
  }
  return s;
}

static kiln_tensor *w8b_build(void *p) {
  w8b_state *s = p;
  s->batch = 2 + s->calls++ % (W8B_ROWS - 4);
  return w8b_expr(s, s->batch);
}

static const float *w8b_expected(void *p, int64_t *n) {
  w8b_state *s = p;
  *n = s->batch * W8B_COLS;
  return s->want;
}

static void w8b_teardown(void *p) {
  kiln_release(((w8b_state *)p)->tw);
  free(p);
}

/* ---- W8-process: a second process ----------------------------------------------- *
 * A child process (this program again, --child-program DIR) runs a 2-layer
 * MLP forward once with KILN_CACHE_DIR=DIR and reports its compiles and
 * disk hits. first-process empties DIR before each run, so it compiles
 * everything; second-process finds DIR filled by the run before, so it
 * compiles nothing. Each row times the whole child: start-up, LLVM's
 * initialisation and the realize. */
#define W8P_CHILD_FLAG "--child-program"

typedef struct {
  char dir[64];
  long long compiles, disk_hits;   /* the last child's */
  const char *shown;               /* the row whose counts were printed last, and they */
  long long shown_compiles, shown_hits;
} w8p_state;

static int w8p_child(const char *dir) {
  setenv("KILN_CACHE_DIR", dir, 1);
  setenv("KILN_CACHE", "1", 1);
  kiln_manual_seed(11);
  kiln_tensor *x = kiln_rand(KILN_SHAPE(64, 32), KILN_F32), *w1 = kiln_rand(KILN_SHAPE(48, 32), KILN_F32);
  kiln_tensor *w2 = kiln_rand(KILN_SHAPE(10, 48), KILN_F32), *b1 = kiln_zeros(KILN_SHAPE(48), KILN_F32);
  kiln_tensor *y = kiln_softmax(kiln_linear(kiln_relu(kiln_linear(x, w1, b1)), w2, NULL), -1);
  kiln_status st = kiln_realize(y);
  kiln_stats_t s = kiln_stats();
  printf("%llu %llu\n", (unsigned long long)s.compiles, (unsigned long long)s.disk_hits);
  kiln_shutdown();
  return st == KILN_OK ? 0 : 1;
}

/* This program again as a child, `kiln_bench flag arg`: its standard
 * output to read (NULL when it cannot start), *pid to reap. */
static FILE *spawn_self(const char *flag, const char *arg, pid_t *pid) {
  int fd[2];
  if (pipe(fd)) return NULL;
  *pid = fork();
  if (*pid == 0) {
    dup2(fd[1], STDOUT_FILENO);
    close(fd[0]);
    execl("/proc/self/exe", "kiln_bench", flag, arg, (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  FILE *f = *pid > 0 ? fdopen(fd[0], "r") : NULL;
  if (!f) close(fd[0]);
  return f;
}

/* Closes the child's output and waits for it: true when it exited with 0. */
static bool reap_self(FILE *f, pid_t pid) {
  if (f) fclose(f);
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Runs the child on s->dir; false (having said why) when it fails. */
static bool w8p_run_child(w8p_state *s) {
  pid_t pid = -1;
  FILE *f = spawn_self(W8P_CHILD_FLAG, s->dir, &pid);
  bool ok = f && fscanf(f, "%lld %lld", &s->compiles, &s->disk_hits) == 2;
  ok = reap_self(f, pid) && ok;
  if (!ok) {
    printf("ERROR W8-process: the child process on %s failed\n", s->dir);
    failed = 1;
  }
  return ok;
}

static void w8p_empty(const char *dir) {
  DIR *d = opendir(dir);
  char path[512];
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
}

/* Prints the child's counts when they differ from those printed last. */
static void w8p_report(const char *row, w8p_state *s) {
  if (s->shown == row && s->shown_compiles == s->compiles && s->shown_hits == s->disk_hits) return;
  s->shown = row, s->shown_compiles = s->compiles, s->shown_hits = s->disk_hits;
  printf("%-10s %-13s child compiled %lld kernels, %lld from the disk cache\n", "W8-process", row, s->compiles,
         s->disk_hits);
}

static void w8p_first(void *p, int threads) {
  (void)threads;   /* the child reads KILN_NUM_THREADS, which set_threads set */
  w8p_state *s = p;
  w8p_empty(s->dir);
  if (w8p_run_child(s)) w8p_report("first-process", s);
}

static void w8p_second(void *p, int threads) {
  (void)threads;
  w8p_state *s = p;
  if (w8p_run_child(s)) w8p_report("second-process", s);
}

static void *w8p_setup(void) {
  w8p_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  snprintf(s->dir, sizeof s->dir, "/tmp/kiln_bench_w8p_XXXXXX");
  if (!mkdtemp(s->dir)) {
    free(s);
    return NULL;
  }
  return s;
}

static void w8p_teardown(void *p) {
  w8p_state *s = p;
  w8p_empty(s->dir);
  rmdir(s->dir);
  free(s);
}

/* ---- W9-mlp: a 2-layer MLP replayed, against its kernels' own times ---------- *
 * softmax(linear(relu(linear(x, w1, b1)), w2, b2), -1), x f32[256,784],
 * w1 f32[512,784], w2 f32[10,512]: kiln-fn replays it; kernels-sum is what
 * its kernels alone took (KILN_DEBUG=1's per-kernel times, read in a child
 * process: kiln reads KILN_DEBUG once), so the difference is kiln_fn_run's
 * own cost. */
#define W9M_B 256
#define W9M_IN 784
#define W9M_H 512
#define W9M_OUT 10
#define W9M_CHILD_FLAG "--child-kernels"

typedef struct {
  fn_inputs in;                  /* x */
  float *x, *w1, *b1, *w2, *b2, *want;
  kiln_tensor *tw1, *tb1, *tw2, *tb2;
} w9m_state;

static void w9m_teardown(void *p) {
  w9m_state *s = p;
  kiln_release(s->in.t[0]);
  kiln_release(s->tw1);
  kiln_release(s->tb1);
  kiln_release(s->tw2);
  kiln_release(s->tb2);
  free(s->x), free(s->w1), free(s->b1), free(s->w2), free(s->b2), free(s->want);
  free(s);
}

/* The reference in double: the rows' softmax of the two layers. */
static void w9m_ref(w9m_state *s) {
  double h[W9M_H], z[W9M_OUT];
  for (int r = 0; r < W9M_B; r++) {
    for (int j = 0; j < W9M_H; j++) {
      double a = s->b1[j];
      for (int k = 0; k < W9M_IN; k++) a += (double)s->x[r * W9M_IN + k] * s->w1[j * W9M_IN + k];
      h[j] = a > 0 ? a : 0;
    }
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < W9M_OUT; j++) {
      z[j] = s->b2[j];
      for (int k = 0; k < W9M_H; k++) z[j] += h[k] * s->w2[j * W9M_H + k];
      mx = fmax(mx, z[j]);
    }
    for (int j = 0; j < W9M_OUT; j++) sum += exp(z[j] - mx);
    for (int j = 0; j < W9M_OUT; j++) s->want[r * W9M_OUT + j] = (float)(exp(z[j] - mx) / sum);
  }
}

static void *w9m_setup(void) {
  w9m_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->x = random_floats_in(W9M_B * W9M_IN, 120, -1, 1);
  s->w1 = random_floats_in(W9M_H * W9M_IN, 121, -0.05, 0.05);
  s->b1 = random_floats_in(W9M_H, 122, -0.1, 0.1);
  s->w2 = random_floats_in(W9M_OUT * W9M_H, 123, -0.1, 0.1);
  s->b2 = random_floats_in(W9M_OUT, 124, -0.1, 0.1);
  s->want = malloc(sizeof *s->want * W9M_B * W9M_OUT);
  if (!s->x || !s->w1 || !s->b1 || !s->w2 || !s->b2 || !s->want) {
    free(s->x), free(s->w1), free(s->b1), free(s->w2), free(s->b2), free(s->want);
    free(s);
    return NULL;
  }
  w9m_ref(s);
  s->in = (fn_inputs){1, {kiln_from_buffer(s->x, KILN_F32, KILN_SHAPE(W9M_B, W9M_IN))}};
  s->tw1 = kiln_from_buffer(s->w1, KILN_F32, KILN_SHAPE(W9M_H, W9M_IN));
  s->tb1 = kiln_from_buffer(s->b1, KILN_F32, KILN_SHAPE(W9M_H));
  s->tw2 = kiln_from_buffer(s->w2, KILN_F32, KILN_SHAPE(W9M_OUT, W9M_H));
  s->tb2 = kiln_from_buffer(s->b2, KILN_F32, KILN_SHAPE(W9M_OUT));
  return s;
}

static kiln_tensor *w9m_build(void *p) {
  w9m_state *s = p;
  kiln_tensor *h = kiln_relu(kiln_linear(s->in.t[0], s->tw1, s->tb1));
  return kiln_softmax(kiln_linear(h, s->tw2, s->tb2), -1);
}

static const float *w9m_expected(void *p, int64_t *n) {
  *n = W9M_B * W9M_OUT;
  return ((w9m_state *)p)->want;
}

/* ---- W7: matmul n^3 f32; W4: gelu(x @ W^T + b) -------------------------- *
 * OpenBLAS's cblas_sgemm is the comparison point and gives the expected
 * results; without OpenBLAS hand_linear gives them (kiln's differ by the
 * order of f32 sums, hence each row's tol). */

typedef struct {
  int64_t m, n, k;
  bool linear;                   /* W4: x @ W^T, then bias and gelu */
  float *a, *b, *bias, *want, *out;
  kiln_tensor *ta, *tb, *tbias;
} mm_state;

static void mm_teardown(void *p) {
  mm_state *s = p;
  kiln_release(s->ta);
  kiln_release(s->tb);
  kiln_release(s->tbias);
  free(s->a);
  free(s->b);
  free(s->bias);
  free(s->want);
  free(s->out);
  free(s);
}

#ifdef KILN_BENCH_OPENBLAS
/* out = a @ b (W7) or gelu(a @ b^T + bias) (W4: the sgemm, then the fused
 * C epilogue). */
static bool mm_reference(mm_state *s, float *out, int threads) {
  openblas_set_num_threads(threads);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, s->linear ? CblasTrans : CblasNoTrans, (int)s->m, (int)s->n,
              (int)s->k, 1.0f, s->a, (int)s->k, s->b, s->linear ? (int)s->k : (int)s->n, 0.0f, out, (int)s->n);
  if (s->linear) hand_bias_gelu(out, s->bias, s->m, s->n, threads);
  return true;
}

static void mm_native(void *p, int threads) {
  mm_state *s = p;
  mm_reference(s, s->out, threads);
}
#else
/* The same results from hand_linear: W4's b is already (n, k); W7's is
 * transposed into that layout first. False when that copy cannot be made. */
static bool mm_reference(mm_state *s, float *out, int threads) {
  if (s->linear) {
    hand_linear(out, s->a, s->b, s->bias, s->m, s->k, s->n, 1, threads);
    return true;
  }
  float *bt = bench_alloc(sizeof *bt * (size_t)(s->k * s->n));
  if (!bt) return false;
  for (int64_t i = 0; i < s->k; i++)
    for (int64_t j = 0; j < s->n; j++) bt[j * s->k + i] = s->b[i * s->n + j];
  hand_linear(out, s->a, bt, NULL, s->m, s->k, s->n, 0, threads);
  free(bt);
  return true;
}
#endif

static void *mm_setup(int64_t m, int64_t n, int64_t k, bool linear) {
  mm_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  *s = (mm_state){.m = m, .n = n, .k = k, .linear = linear};
  s->a = random_floats(m * k, 5);
  s->b = random_floats(k * n, 6);
  s->bias = random_floats(n, 7);
  s->want = random_floats(m * n, 8);
  s->out = random_floats(m * n, 9);
  if (!s->a || !s->b || !s->bias || !s->want || !s->out) {
    mm_teardown(s);
    return NULL;
  }
  s->ta = placed(kiln_from_buffer(s->a, KILN_F32, KILN_SHAPE(m, k)));
  s->tb = placed(linear ? kiln_from_buffer(s->b, KILN_F32, KILN_SHAPE(n, k))
                        : kiln_from_buffer(s->b, KILN_F32, KILN_SHAPE(k, n)));
  s->tbias = placed(kiln_from_buffer(s->bias, KILN_F32, KILN_SHAPE(n)));
  if (!mm_reference(s, s->want, bench_threads)) {
    mm_teardown(s);
    return NULL;
  }
  return s;
}

static void *w7_1024_setup(void) { return mm_setup(1024, 1024, 1024, false); }
static void *w7_2048_setup(void) { return mm_setup(2048, 2048, 2048, false); }
static void *w4_setup(void) { return mm_setup(4096, 1024, 1024, true); }

/* A matmul of another shape first, so the GEMM driver (compiled once per
 * process) is there whatever ran before: the row's kiln-compile is then
 * what a new GEMM shape costs. */
static void *w7_new_shape_setup(void) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_ones(KILN_SHAPE(96, 80), KILN_F32), *y = kiln_ones(KILN_SHAPE(80, 64), KILN_F32);
  kiln_status st = kiln_realize(kiln_matmul(x, y));
  kiln_scope_end();
  if (st != KILN_OK) return NULL;
  return mm_setup(1000, 1000, 1000, false);
}

static kiln_tensor *mm_build(void *p) {
  mm_state *s = p;
  if (s->linear) return kiln_gelu(kiln_linear(s->ta, s->tb, s->tbias));
  return kiln_matmul(s->ta, s->tb);
}

static const float *mm_expected(void *p, int64_t *n) {
  mm_state *s = p;
  *n = s->m * s->n;
  return s->want;
}

static void mm_gemm(void *p, gpu_gemm *g) {
  mm_state *s = p;
  *g = (gpu_gemm){s->m, s->n, s->k, s->linear, s->a, s->b};
}

#define MM_ROWS(n) 2.0 * (n) * (n) * (n), 1e-3, mm_gemm
/* The OpenBLAS row of a matrix product, after kiln's rows, when there is one. */
#ifdef KILN_BENCH_OPENBLAS
#define OPENBLAS_IMPL(name) , {name, 0, mm_native, 0}

static void *w14_setup(void) { return w14_setup_with(placed); }
#else
#define OPENBLAS_IMPL(name)
#endif

/* ---- W12: an embedding lookup plus a bias: one kernel --------------------- */

#define W12_ROWS ((int64_t)65536)
#define W12_VOCAB ((int64_t)50000)
#define W12_DIM ((int64_t)512)

typedef struct {
  float *table, *bias, *out;     /* out: the hand loop's result, the reference */
  int64_t *idx;
  kiln_tensor *ttable, *tbias, *tidx;
} w12_state;

static void w12_teardown(void *p) {
  w12_state *s = p;
  kiln_release(s->ttable);
  kiln_release(s->tbias);
  kiln_release(s->tidx);
  free(s->table);
  free(s->bias);
  free(s->out);
  free(s->idx);
  free(s);
}

static void w12_hand(void *p, int threads) {
  w12_state *s = p;
  hand_gather_bias(s->out, s->table, s->idx, s->bias, W12_ROWS, W12_DIM, threads);
}

static void *w12_setup(void) {
  w12_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->table = random_floats(W12_VOCAB * W12_DIM, 30);
  s->bias = random_floats(W12_DIM, 31);
  s->out = random_floats(W12_ROWS * W12_DIM, 32);
  s->idx = malloc(sizeof *s->idx * (size_t)W12_ROWS);
  if (!s->table || !s->bias || !s->out || !s->idx) {
    w12_teardown(s);
    return NULL;
  }
  uint64_t seed = 33;
  for (int64_t r = 0; r < W12_ROWS; r++) s->idx[r] = (int64_t)(rng_next(&seed) % (uint64_t)W12_VOCAB);
  s->ttable = placed(kiln_from_buffer(s->table, KILN_F32, KILN_SHAPE(W12_VOCAB, W12_DIM)));
  s->tbias = placed(kiln_from_buffer(s->bias, KILN_F32, KILN_SHAPE(W12_DIM)));
  s->tidx = placed(kiln_from_buffer(s->idx, KILN_I64, KILN_SHAPE(W12_ROWS)));
  w12_hand(s, bench_threads);
  return s;
}

static kiln_tensor *w12_build(void *p) {
  w12_state *s = p;
  return kiln_add(kiln_embedding(s->tidx, s->ttable), s->tbias);
}

static const float *w12_expected(void *p, int64_t *n) {
  *n = W12_ROWS * W12_DIM;
  return ((w12_state *)p)->out;
}

#ifdef KILN_BENCH_MODELS
/* ---- W16: the examples' transformer block forward ------------------------ *
 * examples/models.c's block (RMS norm, causal attention, GELU MLP, two
 * residuals) on activations f32[4, 512, 512], 8 heads, MLP 2048; c-hand is
 * the same block as plain C loops (hand_block.c), which also gives the
 * expected result. */

#define W16_B 4
#define W16_T 512
#define W16_D 512
#define W16_H 8
#define W16_F 2048
#define W16_N ((int64_t)W16_B * W16_T * W16_D)
/* Multiply-adds: the four projections, the two MLP products and the causal
 * half of the scores and of their product with v. */
#define W16_FLOPS (2.0 * W16_B * W16_T * W16_D * (4.0 * W16_D + 2.0 * W16_F) + 2.0 * W16_B * W16_T * W16_T * W16_D)

typedef struct {
  transformer m;
  hand_block hb;
  kiln_tensor *host[11];        /* the weights on the host, for c-hand under --device */
  float *x, *out;               /* out: c-hand's result, the reference */
  kiln_tensor *tx;
} w16_state;

static void w16_teardown(void *p) {
  w16_state *s = p;
  transformer_free(&s->m);
  for (int i = 0; i < 11; i++) kiln_release(s->host[i]);
  kiln_release(s->tx);
  free(s->x), free(s->out);
  free(s);
}

static void w16_hand(void *p, int threads) {
  w16_state *s = p;
  hand_transformer_block(s->out, s->x, &s->hb, threads);
}

static void *w16_setup(void) {
  w16_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->m = (transformer){.vocab = 1, .dim = W16_D, .heads = W16_H, .mlp = W16_F, .batch = W16_B, .seq = W16_T};
  transformer_init(&s->m, 160);
  kiln_tensor **w[11] = {&s->m.wte, &s->m.g1, &s->m.wq, &s->m.wk, &s->m.wv, &s->m.wo,
                         &s->m.g2, &s->m.w1, &s->m.b1, &s->m.w2, &s->m.b2};
  for (int i = 0; i < 11; i++) *w[i] = kiln_retain(s->host[i] = *w[i]);   /* each freed twice */
  s->hb = (hand_block){W16_B, W16_T, W16_D, W16_H, W16_F, kiln_data(s->m.g1), kiln_data(s->m.wq),
                       kiln_data(s->m.wk), kiln_data(s->m.wv), kiln_data(s->m.wo), kiln_data(s->m.g2),
                       kiln_data(s->m.w1), kiln_data(s->m.b1), kiln_data(s->m.w2), kiln_data(s->m.b2)};
  s->x = random_floats(W16_N, 161);
  s->out = random_floats(W16_N, 162);
  if (!s->x || !s->out || !s->hb.w2) {
    w16_teardown(s);
    return NULL;
  }
  for (int i = 0; on_gpu && i < 11; i++) *w[i] = placed(*w[i]);
  s->tx = placed(kiln_from_buffer(s->x, KILN_F32, KILN_SHAPE(W16_B, W16_T, W16_D)));
  w16_hand(s, bench_threads);
  return s;
}

static kiln_tensor *w16_build(void *p) {
  w16_state *s = p;
  return transformer_block(&s->m, s->tx);
}

static const float *w16_expected(void *p, int64_t *n) {
  *n = W16_N;
  return ((w16_state *)p)->out;
}
#endif

/* The first workload's first kiln row is the first compile of the process:
 * keep W1 first so its kiln-compile row is a cold compile. */
static const workload workloads[] = {
  {"W1", "relu(a*b + c) * sigmoid(a), a b c f32[16M]", 16.0 * (double)W1_N, 0,
   w1_setup, w1_build, w1_expected, w1_teardown,
   {KILN_FUSED, KILN_GENERIC, KILN_EAGER, {"c-hand", 0, w1_hand, 0}}, 0, 0, NULL},
  {"W2", "softmax(x, -1), x f32[4096,4096]", MAT_BYTES(4096, 4096, 2), 0,
   w2_setup, w2_build, mat_expected, mat_teardown, MAT_IMPLS_GENERIC, 0, 0, NULL},
  {"W3", "layer_norm(x, 1, no affine, eps 1e-5), x f32[8192,1024]", MAT_BYTES(8192, 1024, 2), 0,
   w3_setup, w3_build, mat_expected, mat_teardown, MAT_IMPLS_GENERIC, 0, 1e-4, NULL},
  {"W4", "gelu(x @ W^T + b), x f32[4096,1024], W f32[1024,1024]", 0, 0,
   w4_setup, mm_build, mm_expected, mm_teardown,
   {KILN_FUSED, KILN_EAGER OPENBLAS_IMPL("c-hand")}, 2.0 * 4096 * 1024 * 1024, 1e-3, mm_gemm},
  {"W5", "sum(x), x f32[64M]; stream-triad: a = b + s*c on 3 x f32[64M]", 4.0 * (double)W5_N, 0,
   w5_setup, w5_build, w5_expected, w5_teardown,
   {KILN_FUSED, KILN_EAGER, {"c-hand", 0, w5_hand, 0}, {"stream-sum", 0, w5_stream_sum, 0},
    /* STREAM's count: 2 reads and 1 write (the write-allocate read is not counted) */
    {"stream-triad", 0, w5_stream_triad, 12.0 * (double)W5_N}}, 0, 1e-4, NULL},
  /* x is read twice: the column statistics need every row before the first
   * output, and x (64 MiB) does not fit in cache. */
  {"W6", "(x - x.mean(0)) / x.std(0), x f32[8192,2048]", MAT_BYTES(8192, 2048, 3), 0,
   w6_setup, w6_build, mat_expected, mat_teardown, MAT_IMPLS, 0, 1e-4, NULL},
  {"W7-1024", "matmul f32[1024,1024] @ f32[1024,1024]", 0, 0,
   w7_1024_setup, mm_build, mm_expected, mm_teardown,
   {KILN_FUSED, KILN_SPECIALISED OPENBLAS_IMPL("openblas")}, MM_ROWS(1024)},
  {"W7-2048", "matmul f32[2048,2048] @ f32[2048,2048]", 0, 0,
   w7_2048_setup, mm_build, mm_expected, mm_teardown,
   {KILN_FUSED OPENBLAS_IMPL("openblas")}, MM_ROWS(2048)},
  {"W7-1000", "matmul f32[1000,1000] @ f32[1000,1000] after one of another shape: a new shape's compile", 0, 0,
   w7_new_shape_setup, mm_build, mm_expected, mm_teardown,
   {KILN_FUSED OPENBLAS_IMPL("openblas")}, MM_ROWS(1000)},
  {"W8", "a + b on f32[16], kernel cached: per-realize dispatch", 0, 10000,
   w8_setup, w8_build, w8_expected, w8_teardown,
   {KILN_FUSED, KILN_FN}, 0, 0, NULL},
  {"W8-scalar", "a * s on f32[16] with a new s every call: per-realize dispatch, no compile", 0, 10000,
   w8_setup, w8_scalar_build, w8_scalar_expected, w8_teardown, {KILN_FUSED}, 0, 0, NULL},
  /* bytes: the gathered rows read, the output written, the indices and the bias */
  {"W12", "embedding(idx, table) + bias: 65536 rows of f32[50000,512] by int64 index",
   8.0 * (double)(W12_ROWS * W12_DIM) + 8.0 * (double)W12_ROWS + 4.0 * (double)W12_DIM, 0,
   w12_setup, w12_build, w12_expected, w12_teardown,
   {KILN_FUSED, KILN_EAGER, {"c-hand", 0, w12_hand, 0}}, 0, 0, NULL},
  {"W13", "f32((a // b + a % b) & c), a b c i32[16M] (integer division checked for zero)", 16.0 * (double)W13_N, 0,
   w13_setup, w13_build, w13_expected, w1_teardown,
   {KILN_FUSED, KILN_EAGER, {"c-hand", 0, w13_hand, 0}}, 0, 0, NULL},
  {"Wm-erf", "erf(x), x f32[16M] in [-4, 4); c-hand: glibc's erff", 8.0 * (double)WM_N, 0,
   wm_erf_setup, wm_build, wm_expected, wm_teardown,
   {KILN_FUSED, KILN_EAGER, {"c-hand", 0, wm_hand, 0}}, 0, 0, NULL},
  {"Wm-log1p", "log1p(x), x f32[16M] in [-0.99, 8); c-hand: glibc's log1pf", 8.0 * (double)WM_N, 0,
   wm_log1p_setup, wm_build, wm_expected, wm_teardown,
   {KILN_FUSED, KILN_EAGER, {"c-hand", 0, wm_hand, 0}}, 0, 0, NULL},
  W9_ROW("W9-ew", "tanh(a*b + c) - a on f32[16,16]: compile, cached dispatch", ew),
  W9_ROW("W9-rowsum", "sum(a*b, dim=1) on f32[16,16]: compile, cached dispatch", rowsum),
  {"W9-softmax", "softmax(a, -1) on f32[16,16]: compile, cached dispatch, and the same in plain C", 0, 10000,
   w9_softmax_setup, w9_softmax_build, w9_expected, w9_teardown,
   {KILN_FUSED, KILN_FN, {"c-hand", 0, w9_softmax_hand, 0}}, 0, 0, NULL},
  W9_ROW("W9-matmul", "f32[16,16] @ f32[16,16]: compile, cached dispatch", matmul),
  {"W8-threads", "a + b on f32[16] and softmax on f32[16,16], fresh graphs, on 1 thread and on 2 at once", 0, 20,
   w8t_setup, NULL, NULL, w8t_teardown, {{"1-thread", 0, w8t_one, 0}, {"2-threads", 0, w8t_two, 0}}, 0, 0, NULL},
  {"W8-batch", "relu(x*w + 1), x f32[batch,16] with a new batch size every call: plans, no compile", 0, W8B_RUNS,
   w8b_setup, w8b_build, w8b_expected, w8b_teardown, {KILN_FUSED}, 0, 0, NULL},
  {"W9-mlp", "softmax(linear(relu(linear(x, w1, b1)), w2, b2)), x f32[256,784], hidden 512: kiln_fn vs its kernels", 0, 50,
   w9m_setup, w9m_build, w9m_expected, w9m_teardown, {KILN_FUSED, KILN_FN, KILN_KERNELS}, 2.0 * W9M_B * W9M_H * (W9M_IN + W9M_OUT),
   1e-4, NULL},
  {"W8-process", "a 2-layer MLP forward in a new process: its disk cache empty, then filled by the last run", 0, 0,
   w8p_setup, NULL, NULL, w8p_teardown,
   {{"first-process", 0, w8p_first, 0}, {"second-process", 0, w8p_second, 0}}, 0, 0, NULL},
  {"W10", "cumsum(x, -1), x f32[4096,4096]", MAT_BYTES(4096, 4096, 2), 0,
   w10_setup, w10_build, mat_expected, mat_teardown, MAT_IMPLS_GENERIC, 0, 0, NULL},
  {"W11-topk", "topk(x, 8, -1) values, x f32[4096,4096]", 4.0 * W11_ROWS * W11_COLS, 0,
   w11_topk_setup, w11_topk_build, w11_expected, w11_teardown,
   {KILN_FUSED, KILN_EAGER, {"c-hand", 0, w11_topk_hand, 0}}, 0, 0, NULL},
  {"W11-sort", "sort(x, 0) values, x f32[16M]", 8.0 * (double)W11_N, 0,
   w11_sort_setup, w11_sort_build, w11_expected, w11_teardown,
   {KILN_FUSED, {"c-qsort", 0, w11_sort_hand, 0}}, 0, 0, NULL},
#ifdef KILN_BENCH_MODELS
  {"W16", "transformer block forward (examples/models.c): x f32[4,512,512], 8 heads, MLP 2048, causal", 0, 0,
   w16_setup, w16_build, w16_expected, w16_teardown,
   {KILN_FUSED, KILN_EAGER, {"c-hand", 0, w16_hand, 0}}, W16_FLOPS, 1e-3, NULL},
#endif
#ifdef KILN_BENCH_OPENBLAS
  {"W14", "relu(conv2d(x, w, b, padding 1)), x f32[8,64,56,56], w f32[64,64,3,3]", 0, 0,
   w14_setup, w14_build, w14_expected, w14_teardown,
   {KILN_FUSED, KILN_EAGER, {"im2col+openblas", 0, w14_im2col_sgemm, 0}, {"openblas-sgemm-only", 0, w14_sgemm_only, 0}},
   W14_FLOPS, 1e-3, NULL},
#endif
  {"W15-1024", "causal sdpa, q k v f32[4,8,1024,64]: fused kernel vs the composition (kiln-plain) vs C", 0, 0,
   w15_setup_1024, w15_build, w15_expected, w15_teardown,
   {KILN_FUSED, {"kiln-plain", 0, w15_plain, 0}, {"c-hand", 0, w15_hand, 0}}, W15_FLOPS(1024), 1e-4, NULL},
  {"W15-4096", "causal sdpa, q k v f32[4,8,4096,64]: fused kernel vs the composition (kiln-plain) vs C", 0, 3,
   w15_setup_4096, w15_build, w15_expected, w15_teardown,
   {KILN_FUSED, {"kiln-plain", 0, w15_plain, 0}, {"c-hand", 0, w15_hand, 0}}, W15_FLOPS(4096), 1e-4, NULL},
  {"W10-dim0", "cumsum(x, 0), x f32[4096,4096]", MAT_BYTES(4096, 4096, 2), 0,
   w10d_setup, w10d_build, mat_expected, mat_teardown, MAT_IMPLS_GENERIC, 0, 0, NULL},
  {"W10-long", "cumsum(x, 0), x f32[16M]; c-2pass: chunk totals, then each chunk's scan", 8.0 * (double)W11_N, 0,
   w10l_setup, w10l_build, w11_expected, w11_teardown,
   {KILN_FUSED, {"c-hand", 0, w10l_hand, 0}, {"c-2pass", 0, w10l_two_pass, 0}}, 0, 1e-5, NULL},
  {"W10-lcse", "logcumsumexp(x, 0), x f32[16M]; c-hand: the serial loop in double", 8.0 * (double)W11_N, 0,
   w10x_setup, w10x_build, w11_expected, w11_teardown, {KILN_FUSED, {"c-hand", 0, w10x_hand, 0}}, 0, 1e-5, NULL},
};
#define NUM_WORKLOADS ((int)(sizeof workloads / sizeof workloads[0]))

/* ---- results ------------------------------------------------------------- */

typedef struct {
  const char *workload, *impl;
  int threads;
  double median_ms, min_ms, max_ms;
  double gbps;        /* NAN: not meaningful */
  double gflops;      /* NAN: not meaningful */
  int64_t kernels;    /* -1: not a kiln row */
} result;

static result results[NUM_WORKLOADS * (MAX_IMPLS + 1)];
static int num_results;

static void print_row(const result *r) {
  char gbps[32] = "-", kernels[24] = "-", us[32] = "";
  if (!isnan(r->gbps)) snprintf(gbps, sizeof gbps, "%.1f", r->gbps);
  if (r->kernels >= 0) snprintf(kernels, sizeof kernels, "%lld", (long long)r->kernels);
  if (r->median_ms < 1.0) snprintf(us, sizeof us, "  (%.2f us)", r->median_ms * 1e3);
  if (!isnan(r->gflops)) snprintf(us, sizeof us, "  (%.1f GFLOP/s)", r->gflops);
  printf("%-10s %-13s %7d %11.4f %11.4f %11.4f %8s %7s%s\n", r->workload, r->impl,
         r->threads, r->median_ms, r->min_ms, r->max_ms, gbps, kernels, us);
  fflush(stdout);
}

static void add_result(result r) {
  results[num_results++] = r;
  print_row(&r);
}

/* ---- running one implementation ----------------------------------------- */

/* Largest |got - want| / max(1, |want|). */
static double max_rel_err(const float *got, const float *want, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]) / fmax(1.0, fabs((double)want[i]));
    if (!(d <= worst)) worst = d;  /* NaN counts as the worst */
  }
  return worst;
}

static void check_result(const workload *w, const impl *im, void *st, kiln_tensor *t) {
  int64_t n;
  const float *want = w->expected(st, &n);
  const float *got = kiln_data(kiln_cpu(t));
  if (!got || kiln_numel(t) != n) {
    printf("MISMATCH %s %s: no result of %lld elements (%s)\n", w->name, im->name,
           (long long)n, kiln_last_error());
    failed = 1;
    return;
  }
  double err = max_rel_err(got, want, n);
  if (!(err < (w->tol > 0 ? w->tol : MISMATCH_TOL))) {
    printf("MISMATCH %s %s: max relative difference %g\n", w->name, im->name, err);
    failed = 1;
  }
}

typedef struct {
  double ms;
  int64_t kernels, compiles;
  bool ok;
} kiln_sample;

/* One kiln run: the clock covers building the expression and realizing it;
 * releasing it (kiln_scope_end) is outside, and the allocator keeps the
 * freed buffer for the next run. */
static kiln_sample kiln_run(const workload *w, const impl *im, void *st, bool check) {
  kiln_sample s = {0};
  kiln_scope_begin();
  kiln_stats_t before = kiln_stats();
  double t0 = bench_now_ms();
  kiln_tensor *t = w->build(st);
  kiln_status status = kiln_realize(t);
  s.ms = bench_now_ms() - t0;
  kiln_stats_t after = kiln_stats();
  s.kernels = (int64_t)(after.kernels_launched - before.kernels_launched);
  s.compiles = (int64_t)(after.compiles - before.compiles);
  s.ok = status == KILN_OK;
  if (!s.ok) printf("ERROR %s %s: %s\n", w->name, im->name, kiln_last_error());
  else if (check) check_result(w, im, st, t);
  kiln_scope_end();
  return s;
}

static double native_run(const impl *im, void *st) {
  double t0 = bench_now_ms();
  im->native(st, bench_threads);
  return bench_now_ms() - t0;
}

/* Reports the first (compiling) run minus the cached median as the compile
 * time; it includes the runtime's start-up on the process's first kernel. */
static void add_compile_row(const workload *w, kiln_sample warm, double median) {
  double ms = fmax(0.0, warm.ms - median);
  add_result((result){w->name, "kiln-compile", bench_threads, ms, ms, ms, NAN, NAN, warm.compiles});
}

/* Adds the row of a finished set of timed runs; returns the median. */
static double add_timed_row(const workload *w, const impl *im, double *ms, int runs,
                            int64_t kernels) {
  double med = bench_median(ms, runs);
  double bytes = im->bytes > 0 ? im->bytes : w->bytes;
  double gbps = bytes > 0 ? bytes / (med * 1e-3) / 1e9 : NAN;
  double gflops = w->flops > 0 ? w->flops / (med * 1e-3) / 1e9 : NAN;
  add_result((result){w->name, im->name, bench_threads, med, ms[0], ms[runs - 1], gbps, gflops, kernels});
  return med;
}

#ifdef KILN_BENCH_CUDA
#define DEVICE_REPS 20   /* runs queued back to back per sample on a GPU */

/* On a GPU a sample is the device time of DEVICE_REPS runs queued back to
 * back (CUDA events on kiln's stream), per run: the host's dispatch of the
 * next run overlaps the kernels of this one, as in a program that does not
 * wait for each result. */
static kiln_sample device_sample(const workload *w, const impl *im, void *st) {
  kiln_sample s = {.ok = gpu_clock_start()};
  for (int i = 0; i < DEVICE_REPS && s.ok; i++) s = kiln_run(w, im, st, false);
  s.ms = s.ok ? gpu_clock_ms() / DEVICE_REPS : NAN;
  s.ok = s.ok && !isnan(s.ms);
  return s;
}

/* What kiln's GPU rows are set against, on the workload's own sizes: a
 * device-to-device copy of its ideal traffic; for a matrix product,
 * cuBLASLt called directly with no epilogue. */
static void measure_yardsticks(const workload *w, void *st, double *ms, int runs) {
  static const impl copy = {"d2d-copy", 0, NULL, 0}, lt = {"cublaslt", 0, NULL, 0};
  gpu_gemm g;
  if (w->bytes > 0 && gpu_copy_times(w->bytes, DEVICE_REPS, ms, runs)) add_timed_row(w, &copy, ms, runs, -1);
  else if (w->bytes > 0) failed = 1;
  if (w->gemm) w->gemm(st, &g);
  if (w->gemm && gpu_gemm_times(&g, DEVICE_REPS, ms, runs)) add_timed_row(w, &lt, ms, runs, -1);
  else if (w->gemm) failed = 1;
}
#endif

static kiln_sample timed_run(const workload *w, const impl *im, void *st) {
#ifdef KILN_BENCH_CUDA
  if (on_gpu) return device_sample(w, im, st);
#endif
  return kiln_run(w, im, st, false);
}

/* A warm-up run, which compiles and is checked, then `runs` timed runs. */
static void measure_kiln(const workload *w, const impl *im, void *st, double *ms, int runs) {
  kiln_set_eager(im->mode == 1);
  kiln_set_dynamic(im->mode == 2 ? KILN_DYNAMIC_ON : im->mode == KILN_SPECIALISED_MODE ? KILN_DYNAMIC_OFF
                                                                                      : KILN_DYNAMIC_AUTO);
  kiln_sample warm = kiln_run(w, im, st, true), last = warm;
  int64_t compiles = 0;   /* after the warm-up: a loop's steady state compiles nothing */
  for (int i = 0; i < runs && last.ok; i++) {
    last = timed_run(w, im, st);
    ms[i] = last.ms;
    compiles += last.compiles;
  }
  if (compiles || !strcmp(w->name, "W8-batch"))   /* that row is there to show how many */
    printf("%-10s %-13s compiled %lld kernels during its %d timed runs (%.4f per call)\n", w->name, im->name,
           (long long)compiles, runs, (double)compiles / runs);
  kiln_set_eager(0);
  kiln_set_dynamic(KILN_DYNAMIC_AUTO);
  if (!last.ok) {
    failed = 1;
    return;
  }
  double med = add_timed_row(w, im, ms, runs, last.kernels);
  /* W7-1000 is there to show what a new shape costs, nothing included */
  if (im->mode == 0 && (warm.compiles > 0 || !strcmp(w->name, "W7-1000"))) add_compile_row(w, warm, med);
}

/* The expression built on placeholders standing for the state's inputs. */
static kiln_fn *compile_fn(const workload *w, fn_inputs *io) {
  kiln_tensor *real[3], *ph[3];
  for (int i = 0; i < io->n; i++) {
    real[i] = io->t[i];
    ph[i] = io->t[i] = kiln_placeholder(kiln_dtype_of(real[i]), kiln_ndim(real[i]), kiln_shape(real[i]));
  }
  kiln_tensor *y = w->build(io);
  for (int i = 0; i < io->n; i++) io->t[i] = real[i];
  kiln_fn *f = kiln_compile(io->n, ph, 1, &y);
  return f;
}

/* Compiles once, a checked first call, then `runs` timed calls that write
 * the first call's result tensor in place. */
static void measure_fn(const workload *w, const impl *im, void *st, double *ms, int runs) {
  fn_inputs *io = st;
  kiln_scope_begin();
  kiln_fn *f = compile_fn(w, io);
  kiln_tensor *out = NULL;
  kiln_status status = f ? kiln_fn_run(f, io->t, &out) : KILN_ERR_ARG;
  if (status == KILN_OK) check_result(w, im, st, out);
  kiln_stats_t before = kiln_stats();
  for (int i = 0; i < runs && status == KILN_OK; i++) {
    double t0 = bench_now_ms();
    status = kiln_fn_run(f, io->t, &out);
    ms[i] = bench_now_ms() - t0;
  }
  kiln_stats_t after = kiln_stats();
  if (status != KILN_OK) {
    printf("ERROR %s %s: %s\n", w->name, im->name, kiln_last_error());
    failed = 1;
  } else {
    add_timed_row(w, im, ms, runs, (int64_t)(after.kernels_launched - before.kernels_launched) / runs);
  }
  kiln_fn_free(f);
  kiln_scope_end();
}

static void measure_native(const workload *w, const impl *im, void *st, double *ms, int runs) {
  native_run(im, st);  /* warm-up: caches and page tables, like kiln's */
  for (int i = 0; i < runs; i++) ms[i] = native_run(im, st);
  add_timed_row(w, im, ms, runs, -1);
}

static const result *find_result(const char *workload, const char *impl);
static int parse_count(const char *s);

/* The sum of the kernel times in KILN_DEBUG=1's lines ("... 0.012 ms ...")
 * of text[0..n). */
static double kernel_ms(char *text, ssize_t n) {
  double sum = 0, ms;
  text[n > 0 ? n : 0] = 0;
  for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
    if (sscanf(line, "kiln: %*s %*d elems %lf ms", &ms) == 1) sum += ms;
  return sum;
}

/* The child of a kernels-sum row (W9-mlp's workload): with KILN_DEBUG=1 and
 * its standard error in a temporary file, replays the function runs + 1
 * times and prints, for each run after the first, its kernels' times summed. */
static int kernels_child(const char *arg) {
  int runs = parse_count(arg);
  const workload *w = NULL;
  for (int i = 0; i < NUM_WORKLOADS; i++)
    if (!strcmp(workloads[i].name, "W9-mlp")) w = &workloads[i];
  FILE *log = tmpfile();
  setenv("KILN_DEBUG", "1", 1);   /* before kiln's first call: it reads its options once */
  void *st = w && runs && log && dup2(fileno(log), STDERR_FILENO) >= 0 ? w->setup() : NULL;
  if (!st) return 1;
  static char text[1 << 16];
  kiln_fn *f = compile_fn(w, st);
  kiln_tensor *out = NULL;
  bool ok = f != NULL;
  for (int i = 0; ok && i <= runs; i++) {
    ok = !ftruncate(STDERR_FILENO, 0) && lseek(STDERR_FILENO, 0, SEEK_SET) == 0;
    ok = ok && kiln_fn_run(f, ((fn_inputs *)st)->t, &out) == KILN_OK;
    ok = ok && lseek(STDERR_FILENO, 0, SEEK_SET) == 0;
    ssize_t n = ok ? read(STDERR_FILENO, text, sizeof text - 1) : 0;
    if (ok && i > 0) printf("%.6f\n", kernel_ms(text, n));
  }
  kiln_release(out);
  kiln_fn_free(f);
  w->teardown(st);
  kiln_shutdown();
  return ok ? 0 : 1;
}

/* kernels-sum: the child's per-run sums as timed runs; then kiln-fn's
 * overhead over them. */
static void measure_kernels(const workload *w, const impl *im, double *ms, int runs) {
  char arg[16];
  snprintf(arg, sizeof arg, "%d", runs);
  pid_t pid = -1;
  FILE *f = spawn_self(W9M_CHILD_FLAG, arg, &pid);
  int got = 0;
  while (f && got < runs && fscanf(f, "%lf", &ms[got]) == 1) got++;
  if (!reap_self(f, pid) || got < runs) {
    printf("ERROR %s %s: the KILN_DEBUG=1 child failed\n", w->name, im->name);
    failed = 1;
    return;
  }
  double kernels = add_timed_row(w, im, ms, runs, -1);
  const result *fn = find_result(w->name, "kiln-fn");
  if (fn && kernels > 0)
    printf("%-10s kiln-fn / kernels-sum %.3fx: kiln_fn_run's own cost %+.1f%% of its kernels' (medians)\n", w->name,
           fn->median_ms / kernels, 100.0 * (fn->median_ms / kernels - 1.0));
}

static void run_workload(const workload *w, int runs) {
  printf("# %s: %s\n", w->name, w->what);
  void *st = w->setup();
  if (!st) {
    printf("ERROR %s: setup failed (out of memory?)\n", w->name);
    failed = 1;
    return;
  }
  int n = w->runs ? w->runs : runs;
  double *ms = malloc(sizeof *ms * (size_t)n);
  for (int i = 0; ms && i < MAX_IMPLS && w->impls[i].name; i++) {
    const impl *im = &w->impls[i];
    if (im->native && !on_gpu) measure_native(w, im, st, ms, n);   /* host code: no GPU row */
    else if (im->mode == KILN_FN_MODE && !on_gpu) measure_fn(w, im, st, ms, n);   /* placeholders are host tensors */
    else if (im->mode == KILN_KERNELS_MODE && !on_gpu) measure_kernels(w, im, ms, n);
    else if (!im->native && (im->mode < KILN_FN_MODE || im->mode == KILN_SPECIALISED_MODE))
      measure_kiln(w, im, st, ms, n);
  }
#ifdef KILN_BENCH_CUDA
  if (on_gpu && ms) measure_yardsticks(w, st, ms, n);
#endif
  free(ms);
  w->teardown(st);
}

/* ---- ratios and JSON ----------------------------------------------------- */

static const result *find_result(const char *workload, const char *impl) {
  for (int i = 0; i < num_results; i++)
    if (!strcmp(results[i].workload, workload) && !strcmp(results[i].impl, impl))
      return &results[i];
  return NULL;
}

/* W8-threads: each thread's realizes per second, and the 2 threads' total over
 * the single thread's (2.00x: no serialization at all). */
static void print_thread_scaling(void) {
  const result *one = find_result("W8-threads", "1-thread"), *two = find_result("W8-threads", "2-threads");
  if (!one || !two) return;
  double per_one = 2 * W8T_PAIRS / (one->median_ms * 1e-3), per_two = 2 * W8T_PAIRS / (two->median_ms * 1e-3);
  printf("\nW8-threads realizes per second per thread: 1 thread %.0f, each of 2 threads %.0f; 2 threads' total / 1 thread's %.2fx\n",
         per_one, per_two, 2 * per_two / per_one);
}


/* Speed of kiln-fused relative to every other timed row of its workload:
 * the ratio of GB/s where both rows have it (the same as the ratio of
 * medians, except for stream-triad, whose traffic differs), else of medians. */
static void print_ratios(void) {
  bool header = false;
  for (int i = 0; i < num_results; i++) {
    const result *r = &results[i];
    const result *fused = find_result(r->workload, "kiln-fused");
    if (!fused || r == fused || !strcmp(r->impl, "kiln-compile")) continue;
    if (!header)
      printf("\nratios (other median / kiln-fused median, or kiln-fused GB/s / other GB/s;"
             " > 1: kiln-fused is faster)\n");
    header = true;
    double ratio = !isnan(r->gbps) && !isnan(fused->gbps) ? fused->gbps / r->gbps
                                                         : r->median_ms / fused->median_ms;
    printf("  %-7s kiln-fused vs %-12s %6.2fx\n", r->workload, r->impl, ratio);
  }
}

static void cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) || !colon) continue;
    colon += strspn(colon + 1, " \t") + 1;
    colon[strcspn(colon, "\n")] = 0;
    snprintf(buf, len, "%s", colon);
    break;
  }
  if (f) fclose(f);
}

static void json_result(FILE *f, const result *r) {
  fprintf(f, "    {\"workload\": \"%s\", \"impl\": \"%s\", \"threads\": %d, \"median_ms\": ",
          r->workload, r->impl, r->threads);
  bench_json_number(f, r->median_ms);
  fputs(", \"min_ms\": ", f);
  bench_json_number(f, r->min_ms);
  fputs(", \"max_ms\": ", f);
  bench_json_number(f, r->max_ms);
  fputs(", \"kernels\": ", f);
  bench_json_number(f, r->kernels >= 0 ? (double)r->kernels : NAN);
  fputs(", \"gbps\": ", f);
  bench_json_number(f, r->gbps);
  fputs(", \"gflops\": ", f);
  bench_json_number(f, r->gflops);
  fputs("}", f);
}

static int write_json(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "kiln_bench: cannot write %s\n", path);
    return 1;
  }
  char cpu[256], date[32];
  cpu_model(cpu, sizeof cpu);
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  fputs("{\"machine\": {\"cpu\": ", f);
  bench_json_string(f, cpu);
  fprintf(f, ", \"cores\": %ld, \"date\": \"%s\"},\n", sysconf(_SC_NPROCESSORS_ONLN), date);
#ifdef KILN_BENCH_CUDA
  if (on_gpu) gpu_json(f);
#endif
  fputs(" \"results\": [\n", f);
  for (int i = 0; i < num_results; i++) {
    json_result(f, &results[i]);
    fputs(i + 1 < num_results ? ",\n" : "\n", f);
  }
  fputs(" ]}\n", f);
  return fclose(f) ? 1 : 0;
}

/* The whole run must fit a small machine's memory (about 8 GiB): say what it
 * took, kiln's kept blocks included. */
static void print_peak_rss(void) {
  struct rusage ru;
  if (!getrusage(RUSAGE_SELF, &ru)) printf("\npeak resident memory: %.0f MiB\n", (double)ru.ru_maxrss / 1024.0);
}

/* ---- options and main ---------------------------------------------------- */

typedef struct {
  bool chosen[NUM_WORKLOADS];   /* --only; all by default */
  int runs;
  const char *json;
  int info;                     /* --info 1: the versions and the device only; 2: the GPU prologue too */
} options;

static void usage(void) {
  fprintf(stderr, "usage: kiln_bench [--only W1,W8] [--runs N] [--threads N] [--json FILE] [--device cuda:0] [--info 1|2]\n"
                  "workloads:");
  for (int i = 0; i < NUM_WORKLOADS; i++) fprintf(stderr, " %s", workloads[i].name);
  fputc('\n', stderr);
}

/* A positive integer argument, or 0. */
static int parse_count(const char *s) {
  char *end;
  long v = s ? strtol(s, &end, 10) : 0;
  return s && *s && !*end && v > 0 && v < 1000000 ? (int)v : 0;
}

/* Chooses the workloads the n characters at s name: one by its full name,
 * or a family by its prefix before '-' (W7: W7-1024, W7-2048, W7-1000). False when
 * none matches. */
static bool choose_named(const char *s, size_t n, bool *chosen) {
  bool any = false;
  for (int i = 0; i < NUM_WORKLOADS; i++) {
    const char *name = workloads[i].name;
    if (!strncmp(s, name, n) && (name[n] == 0 || name[n] == '-')) chosen[i] = any = true;
  }
  return any;
}

/* --only W1,W8: chooses the named workloads; false on an unknown name. */
static bool parse_only(const char *list, bool *chosen) {
  memset(chosen, 0, sizeof(bool) * NUM_WORKLOADS);
  for (const char *p = list;; p++) {
    size_t n = strcspn(p, ",");
    if (!n || !choose_named(p, n, chosen)) return false;
    p += n;
    if (!*p) return true;
  }
}

/* Every option takes a value: flags and values alternate. */
static int parse_args(int argc, char **argv, options *o) {
  for (int i = 1; i < argc; i += 2) {
    const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(arg, "--only") && val) {
      if (!parse_only(val, o->chosen)) return 1;
    }
    else if (!strcmp(arg, "--runs") && parse_count(val)) o->runs = parse_count(val);
    else if (!strcmp(arg, "--threads") && parse_count(val)) bench_threads = parse_count(val);
    else if (!strcmp(arg, "--json") && val) o->json = val;
    else if (!strcmp(arg, "--info") && val && (!strcmp(val, "1") || !strcmp(val, "2"))) o->info = *val - '0';
    else if (!strcmp(arg, "--device") && val && (!strcmp(val, "cuda:0") || !strcmp(val, "cpu")))
      on_gpu = !strcmp(val, "cuda:0");
    else return 1;
  }
  return 0;
}

/* One thread count for kiln and the hand loops: --threads, else
 * KILN_NUM_THREADS, else all cores. Set before kiln reads its options. */
static void set_threads(void) {
  if (!bench_threads) bench_threads = parse_count(getenv("KILN_NUM_THREADS"));
  if (!bench_threads) bench_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (bench_threads < 1) bench_threads = 1;
  char buf[16];
  snprintf(buf, sizeof buf, "%d", bench_threads);
  setenv("KILN_NUM_THREADS", buf, 1);
}

#ifdef KILN_BENCH_OPENBLAS
/* OpenBLAS picks its kernel when it loads, before main, and its default on
 * this CPU is an old generic one (~29 GFLOP/s sgemm): on an AVX-512 CPU run again
 * with OPENBLAS_CORETYPE=SkylakeX, unless the user chose a core type. */
static void openblas_coretype(char **argv) {
  if (getenv("OPENBLAS_CORETYPE") || !__builtin_cpu_supports("avx512f")) return;
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  execv("/proc/self/exe", argv);  /* returns only on failure: the default kernel then */
}
#endif

#define NO_GPU_EXIT 3   /* --device cuda:0 and it cannot be used: nothing was timed */

/* --device cuda:0: keeps the workloads that have GPU rows (W1-W7, W10, W11: W8 and W9
 * time the host's dispatch) and runs gpu.c's prologue (with --info 1, only
 * its first part); false, having said why, when cuda:0 cannot be used. */
static bool gpu_start(options *o) {
#ifdef KILN_BENCH_CUDA
  for (int i = 0; i < NUM_WORKLOADS; i++) o->chosen[i] &= workloads[i].bytes > 0 || workloads[i].flops > 0;
  if (o->info == 1 ? gpu_info() : gpu_prologue(o->runs)) return true;
#else
  (void)o;
  printf("cuda:0 not usable: kiln_bench was built without the CUDA toolkit\n");
#endif
  kiln_shutdown();
  return false;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], W8P_CHILD_FLAG)) return w8p_child(argv[2]);
  if (argc == 3 && !strcmp(argv[1], W9M_CHILD_FLAG)) return kernels_child(argv[2]);
#ifdef KILN_BENCH_OPENBLAS
  openblas_coretype(argv);
#endif
  options o = {.runs = 7};
  for (int i = 0; i < NUM_WORKLOADS; i++) o.chosen[i] = true;
  if (parse_args(argc, argv, &o) || (o.info && !on_gpu)) {
    usage();
    return 2;
  }
  if (o.runs < MIN_RUNS) {
    printf("note: --runs raised to %d\n", MIN_RUNS);
    o.runs = MIN_RUNS;
  }
  set_threads();
  if (on_gpu && !gpu_start(&o)) {
    if (o.json) write_json(o.json);
    return NO_GPU_EXIT;
  }
  if (o.info) {   /* --info 2: the prologue's figures, its failure the exit status */
    kiln_shutdown();
    if (o.json && write_json(o.json)) failed = 1;
#ifdef KILN_BENCH_CUDA
    if (gpu_failed()) failed = 1;
#endif
    return failed;
  }
  printf("%-10s %-13s %7s %11s %11s %11s %8s %7s\n", "workload", "impl", "threads",
         "median_ms", "min_ms", "max_ms", "GB/s", "kernels");
  for (int i = 0; i < NUM_WORKLOADS; i++)
    if (o.chosen[i]) run_workload(&workloads[i], o.runs);
  print_ratios();
  print_thread_scaling();
  print_peak_rss();
  kiln_shutdown();
  if (o.json && write_json(o.json)) failed = 1;
#ifdef KILN_BENCH_CUDA
  if (gpu_failed()) failed = 1;
#endif
  if (failed) printf("kiln_bench: FAILED (see MISMATCH/ERROR lines above)\n");
  return failed;
}
