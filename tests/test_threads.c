/* test_threads.c: kiln from several threads at once (include/kiln.h,
 * "Threads"): independent graphs, shared realized inputs, shared handles,
 * compiled functions, one structure missed and hit by all threads at once,
 * and eviction while others run. Values are checked against the oracle.
 * scripts/tsan.sh runs this suite under ThreadSanitizer. */
#include "check_main.h"
#include "util/testutil.h"
#include "util/workers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NTHREADS = 4, ROUNDS = 12 };

/* ---- independent graphs -------------------------------------------------- */
/* Fresh graphs each round: elementwise, a softmax, a matmul with a
 * reduction, and one large enough to run on the thread pool. */
static void independent(tu_worker *w) {
  for (int r = 0; r < ROUNDS && !w->why[0]; r++) {
    kiln_scope_begin();
    uint64_t seed = 100 * (uint64_t)w->id + (uint64_t)r;
    kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(16), seed, TU_SMALL), *b = tu_data(KILN_F32, KILN_SHAPE(16), seed + 1, TU_SMALL);
    kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(16, 16), seed + 2, TU_SMALL);
    kiln_tensor *m = tu_data(KILN_F32, KILN_SHAPE(8, 16), seed + 3, TU_SMALL);
    kiln_tensor *big = tu_data(KILN_F32, KILN_SHAPE(1 << 17), seed + 4, TU_SMALL);
    (void)(tu_worker_check(w, "a+b", kiln_add(a, b)) && tu_worker_check(w, "softmax", kiln_softmax(kiln_relu(x), -1)) &&
           tu_worker_check(w, "matmul", kiln_sum_dims(kiln_matmul(m, x), KILN_DIMS(1), 0)) &&
           tu_worker_check(w, "pool", kiln_exp(kiln_muls(big, 0.25))));
    kiln_scope_end();
  }
}

START_TEST(independent_graphs) { tu_run_workers(NTHREADS, independent, NULL); }
END_TEST

/* ---- realized tensors shared as inputs ---------------------------------- */
typedef struct {
  kiln_tensor *w, *v;   /* realized by the main thread, read by every worker */
} shared_inputs;

static void read_shared(tu_worker *wk) {
  shared_inputs *s = wk->shared;
  for (int r = 0; r < ROUNDS && !wk->why[0]; r++) {
    kiln_scope_begin();
    kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(16, 16), 7 * (uint64_t)wk->id + (uint64_t)r, TU_SMALL);
    (void)(tu_worker_check(wk, "w*x+v", kiln_add(kiln_mul(s->w, x), s->v)) &&
           tu_worker_check(wk, "x@w^T", kiln_matmul(x, kiln_transpose(s->w, 0, 1))) &&
           tu_worker_check(wk, "sum(w)", kiln_sum(s->w)));
    kiln_scope_end();
  }
}

START_TEST(shared_realized_inputs) {
  shared_inputs s = {tu_data(KILN_F32, KILN_SHAPE(16, 16), 1, TU_SMALL),
                     tu_data(KILN_F32, KILN_SHAPE(16), 2, TU_SMALL)};
  ck_assert_int_eq(kiln_realize(s.w), KILN_OK);
  ck_assert_int_eq(kiln_realize(s.v), KILN_OK);
  tu_run_workers(NTHREADS, read_shared, &s);
  kiln_release(s.w);
  kiln_release(s.v);
}
END_TEST

/* ---- one handle retained and released from every thread ----------------- */
typedef struct {
  kiln_tensor *t;
} shared_handle;

static void retain_release(tu_worker *w) {
  shared_handle *s = w->shared;
  for (int i = 0; i < 20000; i++) {
    kiln_retain(s->t);
    if (i % 1000 == 0) {
      kiln_scope_begin();
      if (kiln_item(kiln_sum(s->t)) != 6.0) snprintf(w->why, sizeof w->why, "sum is not 6");
      kiln_scope_end();
    }
    kiln_release(s->t);
  }
}

START_TEST(shared_handle_counts) {
  float v[] = {1, 2, 3};
  shared_handle s = {kiln_from_data(v, KILN_F32, KILN_SHAPE(3))};
  kiln_retain(s.t);   /* two references: the workers' releases must never free it */
  tu_run_workers(NTHREADS, retain_release, &s);
  kiln_scope_begin();
  ck_assert_double_eq(kiln_item(kiln_sum(s.t)), 6.0);
  kiln_release(s.t);
  ck_assert_double_eq(kiln_item(kiln_sum(s.t)), 6.0);
  kiln_scope_end();
  kiln_release(s.t);
}
END_TEST

/* ---- a compiled function run from every thread -------------------------- */
enum { FB = 4, FK = 8, FN = 5 };

typedef struct {
  kiln_fn *f;
  float w[FK * FN];
} shared_fn;

static void run_fn(tu_worker *wk) {
  shared_fn *s = wk->shared;
  float in[FB * FK], out[FB * FN];
  for (int it = 0; it < 100 && !wk->why[0]; it++) {
    for (int i = 0; i < FB * FK; i++) in[i] = (float)((wk->id * 13 + it + i) % 7) - 3;
    kiln_tensor *x = kiln_from_buffer(in, KILN_F32, KILN_SHAPE(FB, FK)), *y = kiln_from_buffer(out, KILN_F32, KILN_SHAPE(FB, FN));
    if (kiln_fn_run(s->f, &x, &y) != KILN_OK) snprintf(wk->why, sizeof wk->why, "run: %s", kiln_last_error());
    for (int r = 0; r < FB && !wk->why[0]; r++)
      for (int c = 0; c < FN; c++) {
        float acc = 0;   /* small integers: exact in any order */
        for (int k = 0; k < FK; k++) acc += in[r * FK + k] * s->w[k * FN + c];
        if (out[r * FN + c] != (acc > 0 ? acc : 0))
          snprintf(wk->why, sizeof wk->why, "out[%d][%d] = %g, want %g", r, c, out[r * FN + c], acc > 0 ? acc : 0);
      }
    kiln_release(x);
    kiln_release(y);
  }
}

START_TEST(fn_from_threads) {
  shared_fn s = {0};
  for (int i = 0; i < FK * FN; i++) s.w[i] = (float)(i % 5) - 2;
  kiln_scope_begin();
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(FB, FK));
  kiln_tensor *y = kiln_relu(kiln_matmul(x, kiln_from_data(s.w, KILN_F32, KILN_SHAPE(FK, FN))));
  s.f = kiln_compile(1, &x, 1, &y);
  ck_assert_msg(s.f, "%s", kiln_last_error());
  tu_run_workers(NTHREADS, run_fn, &s);
  kiln_fn_free(s.f);
  kiln_scope_end();
}
END_TEST

/* ---- a dynamic compiled function served from every thread --------------- */
/* A server: one kiln_fn over a (-1, DK) placeholder, softmax(relu(linear)),
 * each thread calling it with a new batch size per request, so threads plan
 * variants while others run theirs (the variants once lived in one array
 * that a new variant moved under a running call). */
enum { DK = 32, DN = 6, DMAX = 64 };

typedef struct {
  kiln_fn *f;
  float w[DN * DK], b[DN];
} shared_dyn;

/* softmax(relu(x w^T + b)) of one row, in double. */
static void dyn_row(const shared_dyn *s, const float *x, double *y) {
  double mx = 0, sum = 0;
  for (int c = 0; c < DN; c++) {
    double acc = s->b[c];
    for (int k = 0; k < DK; k++) acc += (double)x[k] * s->w[c * DK + k];
    y[c] = acc > 0 ? acc : 0;
    mx = y[c] > mx ? y[c] : mx;
  }
  for (int c = 0; c < DN; c++) sum += y[c] = exp(y[c] - mx);
  for (int c = 0; c < DN; c++) y[c] /= sum;
}

static void serve(tu_worker *wk) {
  shared_dyn *s = wk->shared;
  static float in[NTHREADS][DMAX * DK], out[NTHREADS][DMAX * DN];
  float *x = in[wk->id], *y = out[wk->id];
  for (int it = 0; it < 300 && !wk->why[0]; it++) {
    int64_t batch = 1 + (wk->id * 17 + it * 7) % DMAX;
    for (int i = 0; i < batch * DK; i++) x[i] = (float)((wk->id + it + i) % 9) / 8 - 0.5f;
    kiln_tensor *tx = kiln_from_buffer(x, KILN_F32, KILN_SHAPE(batch, DK));
    kiln_tensor *ty = kiln_from_buffer(y, KILN_F32, KILN_SHAPE(batch, DN));
    if (kiln_fn_run(s->f, &tx, &ty) != KILN_OK) snprintf(wk->why, sizeof wk->why, "batch %lld: %s", (long long)batch, kiln_last_error());
    for (int r = 0; r < batch && !wk->why[0]; r++) {
      double want[DN];
      dyn_row(s, x + r * DK, want);
      for (int c = 0; c < DN; c++)
        if (fabs(y[r * DN + c] - want[c]) > 1e-5)
          snprintf(wk->why, sizeof wk->why, "batch %lld: out[%d][%d] = %g, want %g", (long long)batch, r, c, y[r * DN + c], want[c]);
    }
    kiln_release(tx);
    kiln_release(ty);
  }
}

START_TEST(dynamic_fn_from_threads) {
  shared_dyn s = {0};
  for (int i = 0; i < DN * DK; i++) s.w[i] = (float)(i % 11) / 10 - 0.5f;
  for (int i = 0; i < DN; i++) s.b[i] = (float)i / 10;
  kiln_scope_begin();
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(-1, DK));
  kiln_tensor *w = kiln_from_data(s.w, KILN_F32, KILN_SHAPE(DN, DK)), *b = kiln_from_data(s.b, KILN_F32, KILN_SHAPE(DN));
  kiln_tensor *y = kiln_softmax(kiln_relu(kiln_linear(x, w, b)), -1);
  s.f = kiln_compile(1, &x, 1, &y);
  ck_assert_msg(s.f, "%s", kiln_last_error());
  tu_run_workers(NTHREADS, serve, &s);
  kiln_fn_free(s.f);
  kiln_scope_end();
}
END_TEST

/* ---- one structure, missed and then hit by every thread at once --------- */
static void same_structure(tu_worker *w) {
  for (int r = 0; r < ROUNDS && !w->why[0]; r++) {
    kiln_scope_begin();
    kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(13, 7), 31 * (uint64_t)w->id + (uint64_t)r, TU_SMALL);
    tu_worker_check(w, "tanh(a)*3+a", kiln_add(kiln_muls(kiln_tanh(a), 3), a));
    kiln_scope_end();
  }
}

/* The first round misses together: the plans are made on every thread, but
 * the one kernel is compiled (or loaded from disk) once; every later round
 * hits. */
START_TEST(same_structure_at_once) {
  kiln_reset_stats();
  tu_run_workers(NTHREADS, same_structure, NULL);
  kiln_stats_t st = kiln_stats();
  ck_assert_uint_eq(st.compiles + st.disk_hits, 1);
  ck_assert_uint_eq(st.kernels_launched, NTHREADS * ROUNDS);
  ck_assert_uint_ge(st.cache_hits, NTHREADS * (ROUNDS - 1));
}
END_TEST

/* ---- eviction while other threads run ------------------------------------ */
/* KILN_KERNEL_CACHE_MB=0 keeps nothing: every plan and kernel goes as soon
 * as nobody runs it, on whichever thread lets go last. Each round's shape
 * is new, so every thread compiles, runs and evicts all the time. */
static void churn(tu_worker *w) {
  for (int r = 0; r < ROUNDS / 2 && !w->why[0]; r++) {
    kiln_scope_begin();
    int64_t n = 3 + (r % 3);
    kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(n, 5), 11 * (uint64_t)w->id + (uint64_t)r, TU_SMALL);
    tu_worker_check(w, "softmax(a*2)", kiln_softmax(kiln_muls(a, 2), -1));
    kiln_scope_end();
  }
}

START_TEST(eviction_while_running) {
  setenv("KILN_KERNEL_CACHE_MB", "0", 1);   /* read when this forked test first asks */
  kiln_reset_stats();
  tu_run_workers(NTHREADS, churn, NULL);
  ck_assert_uint_gt(kiln_stats().evictions, 0);
  ck_assert_uint_eq(kiln_stats().code_bytes, 0);
}
END_TEST

static Suite *threads_suite(void) {
  Suite *s = suite_create("threads");
  /* a case per test: CK_RUN_CASE=shared_handle_counts runs one */
  const struct { const char *name; const TTest *test; } cases[] = {
      {"independent_graphs", independent_graphs}, {"shared_realized_inputs", shared_realized_inputs},
      {"shared_handle_counts", shared_handle_counts}, {"fn_from_threads", fn_from_threads},
      {"dynamic_fn_from_threads", dynamic_fn_from_threads},
      {"same_structure_at_once", same_structure_at_once}, {"eviction_while_running", eviction_while_running}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    TCase *tc = tcase_create(cases[i].name);
    tcase_add_test(tc, cases[i].test);
    suite_add_tcase(s, tc);
  }
  return s;
}

KILN_TEST_MAIN(threads_suite)
