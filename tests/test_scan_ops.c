/* test_scan_ops.c: the scans (cumsum cumprod logcumsumexp cummax cummin)
 * and the sorts (sort argsort topk) against the reference evaluator, fused
 * and eager: every dtype, every dim (negative ones too), non-contiguous and
 * computed inputs, 0-size and size-1 dims, nan and inf, cummax's tie
 * positions and the sorts' stable order, long rows; kernel counts of the
 * fusions; error paths with message and file:line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "runtime/inspect.h"
#include "runtime/rt.h"
#include "util/testutil.h"

typedef enum { S_CUMSUM, S_CUMPROD, S_LOGCUMSUMEXP, S_CUMMAX, S_CUMMAX_I, S_CUMMIN, S_CUMMIN_I, S_NOPS } scan_op;
static const char *const scan_names[S_NOPS] = {"cumsum", "cumprod", "logcumsumexp", "cummax", "cummax.indices",
                                                "cummin", "cummin.indices"};

/* One result of op on x along dim (cummax/cummin: the values or the indices). */
static kiln_tensor *apply(scan_op op, kiln_tensor *x, int64_t dim) {
  kiln_tensor *r = NULL;
  switch (op) {
  case S_CUMSUM: return kiln_cumsum(x, dim);
  case S_CUMPROD: return kiln_cumprod(x, dim);
  case S_LOGCUMSUMEXP: return kiln_logcumsumexp(x, dim);
  case S_CUMMAX: kiln_cummax(x, dim, &r, NULL); return r;
  case S_CUMMAX_I: kiln_cummax(x, dim, NULL, &r); return r;
  case S_CUMMIN: kiln_cummin(x, dim, &r, NULL); return r;
  default: kiln_cummin(x, dim, NULL, &r); return r;
  }
}

typedef enum { IN_PLAIN, IN_TRANSPOSED, IN_SLICED, IN_COMPUTED, IN_FLIPPED } input_kind;

typedef struct {
  scan_op op;
  kiln_dtype dt;
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
  int64_t dim;
  input_kind in;
  tu_range range;
  bool consumer;        /* (scan + 1) * 2 on top, fused with it */
} ctx_t;

static kiln_tensor *input(const ctx_t *c) {
  kiln_tensor *x = tu_data(c->dt, c->ndim, c->shape, 17 + (uint64_t)c->op, c->range);
  switch (c->in) {
  case IN_TRANSPOSED: return kiln_transpose(tu_data(c->dt, c->ndim, c->shape, 5, c->range), 0, c->ndim - 1);
  case IN_SLICED: return kiln_slice(x, 0, 0, c->shape[0], 2);   /* every other row */
  case IN_COMPUTED: return kiln_abs(x);
  case IN_FLIPPED: return kiln_flip(x, KILN_DIMS(-1));   /* a negative stride */
  default: return x;
  }
}

static kiln_tensor *build(const void *p) {
  const ctx_t *c = p;
  kiln_tensor *s = apply(c->op, input(c), c->dim);
  return c->consumer ? kiln_muls(kiln_adds(s, 1), 2) : s;
}

static bool exact(scan_op op) { return op == S_CUMMAX || op == S_CUMMAX_I || op == S_CUMMIN || op == S_CUMMIN_I; }

/* Sums and products in the compute dtype, in order (the oracle's are f64),
 * logcumsumexp through the kernels' exp and log: a tolerance per dtype. */
static ref_tol tolerance(scan_op op, kiln_dtype dt) {
  if (exact(op) || !ir_is_float(dt)) return (ref_tol){0, 0};
  if (dt == KILN_F16) return (ref_tol){1e-2, 1e-2};
  if (dt == KILN_BF16) return (ref_tol){6e-2, 6e-2};
  return (ref_tol){dt == KILN_F32 ? 3e-5 : 1e-12, dt == KILN_F32 ? 3e-5 : 1e-12};
}

static void check(const ctx_t *c) {
  if (c->op == S_LOGCUMSUMEXP && !ir_is_float(c->dt)) return;
  char why[512];
  bool ok = tu_check_fused_eager(build, c, KILN_NUM_DTYPES, tolerance(c->op, c->dt), why, sizeof why);
  ck_assert_msg(ok, "%s %s dim %lld input %d consumer %d: %s", scan_names[c->op], kiln_dtype_name(c->dt),
                (long long)c->dim, c->in, c->consumer, why);
}

static const kiln_dtype dtypes[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I32, KILN_I64,
                                    KILN_U8,  KILN_I8,  KILN_I16, KILN_BOOL};
#define NDTYPES ((int)(sizeof dtypes / sizeof *dtypes))

/* every dtype along every dim of a 3-D tensor, negative dims included */
START_TEST(every_dtype_every_dim) {
  for (int d = 0; d < NDTYPES; d++)
    for (int64_t dim = -3; dim < 3; dim++) {
      ctx_t c = {(scan_op)_i, dtypes[d], 3, {4, 6, 5}, dim, IN_PLAIN, TU_SMALL, false};
      check(&c);
    }
}
END_TEST

/* strided and computed inputs, and a consumer fused on top */
START_TEST(views_and_fusion) {
  const input_kind ins[] = {IN_TRANSPOSED, IN_SLICED, IN_COMPUTED, IN_FLIPPED};
  for (int i = 0; i < 4; i++)
    for (int64_t dim = 0; dim < 2; dim++)
      for (int cons = 0; cons < 2; cons++) {
        ctx_t c = {(scan_op)_i, KILN_F32, 2, {6, 9}, dim, ins[i], TU_SMALL, cons};
        check(&c);
        c.dt = KILN_I32;
        check(&c);
      }
}
END_TEST

/* 0-size and size-1 dims, a 0-dim tensor, 1-D and 4-D */
START_TEST(odd_shapes) {
  const struct { int ndim; int64_t s[4]; int64_t dim; } shapes[] = {
    {2, {0, 4}, 1}, {2, {3, 0}, 1}, {2, {3, 0}, 0}, {2, {1, 1}, 0}, {3, {3, 1, 4}, 1}, {3, {3, 1, 4}, -1},
    {0, {0}, 0}, {0, {0}, -1}, {1, {1}, 0}, {1, {37}, 0}, {4, {2, 3, 2, 3}, 2},
  };
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    ctx_t c = {(scan_op)_i, KILN_F32, shapes[s].ndim, {0}, shapes[s].dim, IN_PLAIN, TU_SMALL, false};
    memcpy(c.shape, shapes[s].s, sizeof shapes[s].s);
    check(&c);
  }
}
END_TEST

/* every special value (nan, infinities, signed zeros, extremes) */
START_TEST(specials) {
  ctx_t c = {(scan_op)_i, KILN_F32, 2, {4, 16}, -1, IN_PLAIN, TU_FULL, false};
  check(&c);
  c.dt = KILN_F64;
  c.dim = 0;
  check(&c);
  c.dt = KILN_I32;
  check(&c);
}
END_TEST

/* ---- hand-worked values ----------------------------------------------------- */
static void expect_f32(kiln_tensor *t, const float *want, int n) {
  ck_assert_int_eq(kiln_realize(t), KILN_OK);
  const float *v = kiln_data(t);
  for (int i = 0; i < n; i++)
    ck_assert_msg((isnan(want[i]) && isnan(v[i])) || v[i] == want[i] || fabsf(v[i] - want[i]) <= 1e-5f * fabsf(want[i]),
                  "element %d: %g, want %g", i, v[i], want[i]);
}

static void expect_i64(kiln_tensor *t, const int64_t *want, int n) {
  ck_assert_int_eq(kiln_dtype_of(t), KILN_I64);
  ck_assert_int_eq(kiln_realize(t), KILN_OK);
  const int64_t *v = kiln_data(t);
  for (int i = 0; i < n; i++) ck_assert_msg(v[i] == want[i], "element %d: %lld, want %lld", i, (long long)v[i], (long long)want[i]);
}

START_TEST(hand_worked) {
  kiln_scope_begin();
  /* ties take the latest position; a nan stays, at the latest nan */
  kiln_tensor *x = kiln_from_data((float[]){3, 1, 3, NAN, 2, NAN, 5}, KILN_F32, KILN_SHAPE(7));
  kiln_tensor *v, *i;
  kiln_cummax(x, 0, &v, &i);
  expect_f32(v, (float[]){3, 3, 3, NAN, NAN, NAN, NAN}, 7);
  expect_i64(i, (int64_t[]){0, 0, 2, 3, 3, 5, 5}, 7);
  kiln_cummin(x, -1, &v, &i);
  expect_f32(v, (float[]){3, 1, 1, NAN, NAN, NAN, NAN}, 7);
  expect_i64(i, (int64_t[]){0, 1, 1, 3, 3, 5, 5}, 7);
  kiln_tensor *t = kiln_from_data((int32_t[]){2, 2, 1, 2}, KILN_I32, KILN_SHAPE(4));
  kiln_cummin(t, 0, &v, &i);
  expect_i64(i, (int64_t[]){0, 1, 2, 2}, 4);
  /* integers and bool sum to int64, past int32's range */
  kiln_tensor *big = kiln_from_data((int32_t[]){2000000000, 2000000000}, KILN_I32, KILN_SHAPE(2));
  expect_i64(kiln_cumsum(big, 0), (int64_t[]){2000000000, 4000000000}, 2);
  expect_i64(kiln_cumsum(kiln_gts(x, 2), 0), (int64_t[]){1, 1, 2, 2, 2, 2, 3}, 7);
  expect_i64(kiln_cumprod(big, 0), (int64_t[]){2000000000, 4000000000000000000}, 2);
  /* logcumsumexp: -inf is the identity, equal infinities stay, nan spreads */
  kiln_tensor *l = kiln_from_data((float[]){-INFINITY, 0, INFINITY, INFINITY, NAN, 1}, KILN_F32, KILN_SHAPE(6));
  expect_f32(kiln_logcumsumexp(l, 0), (float[]){-INFINITY, 0, INFINITY, INFINITY, NAN, NAN}, 6);
  kiln_tensor *m = kiln_from_data((float[]){1, 2, 3, -INFINITY}, KILN_F32, KILN_SHAPE(4));
  expect_f32(kiln_logcumsumexp(m, 0), (float[]){1, 2.3132617f, 3.4076059f, 3.4076059f}, 4);
  expect_f32(kiln_cumsum(kiln_from_data((float[]){1, INFINITY, -INFINITY, 1}, KILN_F32, KILN_SHAPE(4)), 0),
             (float[]){1, INFINITY, NAN, NAN}, 4);
  /* a 2-D column scan */
  kiln_tensor *g = kiln_from_data((float[]){1, 2, 3, 4, 5, 6}, KILN_F32, KILN_SHAPE(2, 3));
  expect_f32(kiln_cumsum(g, 0), (float[]){1, 2, 3, 5, 7, 9}, 6);
  expect_f32(kiln_cumprod(g, 1), (float[]){1, 2, 6, 4, 20, 120}, 6);
  kiln_scope_end();
}
END_TEST

/* A row much longer than a thread's chunk: integer-valued f32 data, so the
 * in-order f32 sums are exact and match the oracle's f64 ones. */
static kiln_tensor *long_row(const void *p) {
  const int64_t *n = p;
  kiln_tensor *i = tu_data(KILN_I8, 2, (int64_t[]){2, *n}, 3, TU_SMALL);
  return kiln_cumsum(kiln_cast(i, KILN_F32), -1);
}

static kiln_tensor *long_col(const void *p) {
  const int64_t *n = p;
  kiln_tensor *i = tu_data(KILN_I16, 2, (int64_t[]){*n, 3}, 4, TU_SMALL);
  kiln_tensor *v;
  kiln_cummax(i, 0, NULL, &v);
  return v;
}

START_TEST(long_rows) {
  char why[512];
  int64_t n = 200003;
  ck_assert_msg(tu_check_fused_eager(long_row, &n, KILN_F32, (ref_tol){0, 0}, why, sizeof why), "%s", why);
  ck_assert_msg(tu_check_fused_eager(long_col, &n, KILN_I64, (ref_tol){0, 0}, why, sizeof why), "%s", why);
}
END_TEST

/* ---- fusion counts ----------------------------------------------------------- */
START_TEST(fusion_counts) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(64, 33), 1, TU_SMALL);
  /* producer, scan and consumer: one kernel, along either dim */
  ck_assert_int_eq(tu_kernels_of(kiln_adds(kiln_cumsum(kiln_muls(x, 2), 1), 1)), 1);
  ck_assert_int_eq(tu_kernels_of(kiln_adds(kiln_cumsum(kiln_muls(x, 2), 0), 1)), 1);
  ck_assert_int_eq(tu_kernels_of(kiln_exp(kiln_logcumsumexp(kiln_neg(x), -1))), 1);
  /* a scan read by a view, a reduction or another scan is stored first */
  ck_assert_int_eq(tu_kernels_of(kiln_cumsum(kiln_cumsum(x, 0), 1)), 2);
  ck_assert_int_eq(tu_kernels_of(kiln_sum(kiln_cumsum(x, 1))), 2);
  ck_assert_int_eq(tu_kernels_of(kiln_flip(kiln_cumsum(x, 1), KILN_DIMS(1))), 2);
  /* two scans of one input: one kernel each */
  ck_assert_int_eq(tu_kernels_of(kiln_add(kiln_cumsum(x, 1), kiln_cumprod(x, 1))), 2);
  kiln_scope_end();
}
END_TEST

/* ---- errors ------------------------------------------------------------------ */
static void expect_error(kiln_tensor *t, kiln_status st, int line, const char *text) {
  tu_expect_error(t, st, __FILE__, line, text);
}
#define EXPECT_ERROR(expr, st, text) expect_error(expr, st, __LINE__, text)

START_TEST(errors) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_ones(KILN_SHAPE(2, 3), KILN_F32);
  EXPECT_ERROR(kiln_cumsum(x, 2), KILN_ERR_ARG, "cumsum: Dimension out of range (expected to be in range of [-2, 1], but got 2) (input: float32 (2,3))");
  EXPECT_ERROR(kiln_cumprod(x, -3), KILN_ERR_ARG, "cumprod: Dimension out of range (expected to be in range of [-2, 1], but got -3) (input: float32 (2,3))");
  EXPECT_ERROR(kiln_cumsum(kiln_scalar(1, KILN_F32), 1), KILN_ERR_ARG,
               "cumsum: Dimension out of range (expected to be in range of [-1, 0], but got 1) (input: float32 ())");
  EXPECT_ERROR(kiln_logcumsumexp(kiln_arange(0, 4, 1), 0), KILN_ERR_DTYPE,
               "logcumsumexp: not implemented for int64 (input: int64 (4,))");
  EXPECT_ERROR(kiln_cumsum(NULL, 0), KILN_ERR_ARG, "cumsum: argument 1 is NULL");
  kiln_tensor *v = NULL, *i = NULL;
  int line = __LINE__ + 1;
  kiln_cummax(x, 5, &v, &i);
  expect_error(v, KILN_ERR_ARG, line, "cummax: Dimension out of range (expected to be in range of [-2, 1], but got 5) (input: float32 (2,3))");
  expect_error(i, KILN_ERR_ARG, line, "cummax: Dimension out of range");
  line = __LINE__ + 1;
  kiln_cummin(NULL, 0, &v, &i);
  expect_error(i, KILN_ERR_ARG, line, "cummin: argument 1 is NULL");
  /* errors are sticky: a scan of an error node is that error, from its line */
  line = __LINE__ + 1;
  kiln_tensor *bad = kiln_cumsum(x, 9);
  expect_error(kiln_cumsum(bad, 0), KILN_ERR_ARG, line, "cumsum: Dimension out of range");
  kiln_scope_end();
}
END_TEST

/* ---- sorting ----------------------------------------------------------------- */
typedef enum { O_SORT, O_SORT_I, O_SORT_DESC, O_ARGSORT_DESC, O_TOPK, O_TOPK_I, O_TOPK_SMALL, O_TOPK_SMALL_I,
               O_NOPS } sort_op;
static const char *const sort_names[O_NOPS] = {"sort", "sort.indices", "sort descending", "argsort descending",
                                               "topk", "topk.indices", "topk smallest", "topk smallest.indices"};

typedef struct {
  sort_op op;
  kiln_dtype dt;
  int ndim;
  int64_t shape[KILN_MAX_DIMS];
  int64_t dim, k;
  input_kind in;
  tu_range range;
} sort_ctx;

static kiln_tensor *sort_build(const void *p) {
  const sort_ctx *c = p;
  ctx_t in = {S_CUMSUM, c->dt, c->ndim, {0}, 0, c->in, c->range, false};
  memcpy(in.shape, c->shape, sizeof in.shape);
  kiln_tensor *x = input(&in), *r = NULL;
  switch (c->op) {
  case O_SORT: kiln_sort(x, c->dim, 0, 1, &r, NULL); return r;
  case O_SORT_I: kiln_sort(x, c->dim, 0, 0, NULL, &r); return r;
  case O_SORT_DESC: kiln_sort(x, c->dim, 1, 1, &r, NULL); return r;
  case O_ARGSORT_DESC: return kiln_argsort(x, c->dim, 1, 1);
  case O_TOPK: kiln_topk(x, c->k, c->dim, 1, 1, &r, NULL); return r;
  case O_TOPK_I: kiln_topk(x, c->k, c->dim, 1, 1, NULL, &r); return r;
  case O_TOPK_SMALL: kiln_topk(x, c->k, c->dim, 0, 1, &r, NULL); return r;
  default: kiln_topk(x, c->k, c->dim, 0, 1, NULL, &r); return r;
  }
}

static void sort_check_case(const sort_ctx *c) {
  if (c->op >= O_TOPK && c->dt == KILN_BOOL) return;
  char why[512];
  bool ok = tu_check_fused_eager(sort_build, c, KILN_NUM_DTYPES, (ref_tol){0, 0}, why, sizeof why);
  ck_assert_msg(ok, "%s %s dim %lld k %lld input %d: %s", sort_names[c->op], kiln_dtype_name(c->dt), (long long)c->dim,
                (long long)c->k, c->in, why);
}

/* every dtype along every dim; TU_SMALL data has many ties: the order of
 * equal elements (stable) shows in the positions */
START_TEST(sort_every_dtype_every_dim) {
  for (int d = 0; d < NDTYPES; d++)
    for (int64_t dim = -3; dim < 3; dim++) {
      sort_ctx c = {(sort_op)_i, dtypes[d], 3, {4, 6, 5}, dim, 3, IN_PLAIN, TU_SMALL};
      sort_check_case(&c);
    }
}
END_TEST

/* strided inputs, specials (nan, inf, -0), 0-size and size-1 dims, a 0-dim
 * tensor, long lines (radix sort; top-k's heap), k = 0 and k = n */
START_TEST(sort_shapes_and_specials) {
  const struct { int ndim; int64_t s[3]; int64_t dim, k; input_kind in; tu_range r; } cases[] = {
    {2, {6, 9}, 1, 4, IN_TRANSPOSED, TU_SMALL}, {2, {6, 9}, 0, 2, IN_SLICED, TU_SMALL},
    {2, {6, 9}, -1, 9, IN_COMPUTED, TU_SMALL},  {2, {4, 40}, -1, 5, IN_PLAIN, TU_FULL},
    {2, {5, 40}, 1, 40, IN_FLIPPED, TU_SMALL},  {2, {5, 300}, -1, 6, IN_FLIPPED, TU_SMALL},
    {2, {40, 3}, 0, 40, IN_PLAIN, TU_FULL},     {2, {0, 5}, 1, 2, IN_PLAIN, TU_SMALL},
    {2, {3, 0}, 1, 0, IN_PLAIN, TU_SMALL},      {3, {3, 1, 4}, 1, 1, IN_PLAIN, TU_SMALL},
    {0, {0}, 0, 1, IN_PLAIN, TU_SMALL},         {0, {0}, -1, 0, IN_PLAIN, TU_SMALL},
    {2, {3, 5000}, 1, 8, IN_PLAIN, TU_MODERATE}, {1, {70001}, 0, 70001, IN_PLAIN, TU_MODERATE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    sort_ctx c = {(sort_op)_i, KILN_F32, cases[i].ndim, {0}, cases[i].dim, cases[i].k, cases[i].in, cases[i].r};
    memcpy(c.shape, cases[i].s, sizeof cases[i].s);
    if (c.ndim == 1 && c.op >= O_TOPK) c.k = 100;   /* a long line's top-k: the heap */
    sort_check_case(&c);
    c.dt = KILN_I16;
    sort_check_case(&c);
  }
}
END_TEST

START_TEST(sort_hand_worked) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data((float[]){3, 1, NAN, 1, -0.0f, 0.0f, 7}, KILN_F32, KILN_SHAPE(7));
  kiln_tensor *v, *i;
  kiln_sort(x, 0, 0, 1, &v, &i);
  expect_f32(v, (float[]){-0.0f, 0, 1, 1, 3, 7, NAN}, 7);
  expect_i64(i, (int64_t[]){4, 5, 1, 3, 0, 6, 2}, 7);   /* equal elements in input order, nan last */
  kiln_sort(x, -1, 1, 1, &v, &i);
  expect_i64(i, (int64_t[]){2, 6, 0, 1, 3, 4, 5}, 7);   /* descending: nan first, ties still in order */
  kiln_topk(x, 3, 0, 1, 1, &v, &i);
  expect_f32(v, (float[]){NAN, 7, 3}, 3);
  expect_i64(i, (int64_t[]){2, 6, 0}, 3);
  kiln_topk(x, 2, 0, 0, 1, &v, &i);
  expect_i64(i, (int64_t[]){4, 5}, 2);
  /* the values and positions of one call are one kernel */
  kiln_tensor *m = tu_data(KILN_F32, KILN_SHAPE(16, 33), 3, TU_SMALL);
  kiln_sort(m, 1, 0, 1, &v, &i);
  kiln_tensor *both[2] = {v, i};
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize_n(2, both), KILN_OK);
  ck_assert_int_eq(kiln_stats().kernels_launched, 1);
  kiln_scope_end();
}
END_TEST

START_TEST(sort_errors) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_ones(KILN_SHAPE(2, 3), KILN_F32), *v = NULL, *i = NULL;
  int line = __LINE__ + 1;
  kiln_topk(x, 4, 1, 1, 1, &v, &i);
  expect_error(v, KILN_ERR_ARG, line, "topk: k (4) is out of range for dim 1 of size 3");
  expect_error(i, KILN_ERR_ARG, line, "topk: k (4) is out of range");
  line = __LINE__ + 1;
  kiln_topk(x, -1, 0, 1, 1, &v, NULL);
  expect_error(v, KILN_ERR_ARG, line, "topk: k (-1) is out of range for dim 0 of size 2");
  line = __LINE__ + 1;
  kiln_topk(kiln_gts(x, 0), 1, 0, 1, 1, &v, NULL);
  expect_error(v, KILN_ERR_DTYPE, line, "topk: not implemented for bool");
  line = __LINE__ + 1;
  kiln_sort(x, 2, 0, 0, &v, &i);
  expect_error(i, KILN_ERR_ARG, line, "sort: Dimension out of range (expected to be in range of [-2, 1], but got 2) (input: float32 (2,3))");
  EXPECT_ERROR(kiln_argsort(x, -3, 0, 0), KILN_ERR_ARG, "argsort: Dimension out of range");
  EXPECT_ERROR(kiln_argsort(NULL, 0, 0, 0), KILN_ERR_ARG, "argsort: argument 1 is NULL");
  kiln_scope_end();
}
END_TEST

/* A compiled function with a dynamic batch: scans and a top-k along the
 * static dim follow each size; sorting along the dynamic dim is refused. */
START_TEST(compiled_dynamic) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(-1, 6)), *v = NULL;
  kiln_topk(x, 2, 1, 1, 1, &v, NULL);
  kiln_tensor *outs[2] = {kiln_adds(kiln_cumsum(x, 1), 1), v};
  kiln_fn *f = kiln_compile(1, &x, 2, outs);
  ck_assert_msg(f != NULL, "%s", kiln_last_error());
  for (int64_t rows = 2; rows <= 5; rows += 3) {
    kiln_tensor *in = tu_data(KILN_F32, KILN_SHAPE(rows, 6), (uint64_t)rows, TU_SMALL), *got[2] = {NULL, NULL}, *tv;
    ck_assert_int_eq(kiln_fn_run(f, &in, got), KILN_OK);
    kiln_topk(in, 2, 1, 1, 1, &tv, NULL);
    kiln_tensor *want[2] = {kiln_adds(kiln_cumsum(in, 1), 1), tv};
    for (int o = 0; o < 2; o++) {
      ck_assert_int_eq(kiln_realize(want[o]), KILN_OK);
      ck_assert_int_eq(kiln_shape(got[o])[0], rows);
      const float *a = kiln_data(got[o]), *b = kiln_data(want[o]);
      for (int64_t i = 0; i < kiln_numel(want[o]); i++) ck_assert_msg(a[i] == b[i], "output %d element %lld", o, (long long)i);
    }
  }
  kiln_fn_free(f);
  kiln_tensor *s = NULL;
  int line = __LINE__ + 1;
  kiln_sort(x, 0, 0, 1, &s, NULL);
  ck_assert_ptr_null(kiln_compile(1, &x, 1, &s));
  char want[160];
  snprintf(want, sizeof want, "%s:%d: compile: sort: sorting along a dynamic dim is not supported", __FILE__, line);
  ck_assert_str_eq(kiln_last_error(), want);
  kiln_scope_end();
}
END_TEST

/* ---- scans along a dim that is not innermost (lane accumulators) -------------
 * The CPU carries a row of accumulators along the innermost dim, whole, in
 * blocks the threads split (no dim outside), in blocks run in turn (a row
 * above 4096), or, a long row without a block size, as lines. */
START_TEST(lane_shapes) {
  const struct { int ndim; int64_t s[3]; int64_t dim; } shapes[] = {
    {3, {2, 7, 3}, 0}, {3, {2, 7, 3}, 1}, {3, {1, 5, 1}, 1}, {3, {5, 4, 1}, 0}, {3, {2, 0, 3}, 0},
    {3, {3, 1, 2}, 1}, {2, {7, 2048}, 0}, {3, {2, 3, 4100}, 1}, {3, {2, 2, 4099}, 0},
  };
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int cons = 0; cons < 2; cons++) {
      ctx_t c = {(scan_op)_i, KILN_F32, shapes[s].ndim, {0}, shapes[s].dim, cons ? IN_TRANSPOSED : IN_PLAIN,
                 TU_SMALL, cons};
      memcpy(c.shape, shapes[s].s, sizeof shapes[s].s);
      check(&c);
    }
}
END_TEST

/* The planned kernel's text, for target (KILN_CPU or KILN_CUDA). */
static void plan_text(kiln_device_type target, kiln_tensor *t, ir_str *text) {
  rt_planned *plan;
  ck_assert_int_eq(rt_plan_for(target, 1, &t, &plan), 1);
  k_print(text, plan[0].k);
  rt_plan_free(plan, 1);
}

/* Whether cumsum(x * 2, dim) + 1 of x f32[shape] is one kernel for target
 * whose accumulator is a row of `lanes` lanes (0: one accumulator). */
static void expect_lanes(kiln_device_type target, int ndim, const int64_t *shape, int64_t dim, int64_t lanes) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, ndim, shape, 1, TU_SMALL);
  ir_str text = {0};
  plan_text(target, kiln_adds(kiln_cumsum(kiln_muls(x, 2), dim), 1), &text);
  char want[64];
  snprintf(want, sizeof want, " of %lld] = ", (long long)lanes);
  ck_assert_msg((strstr(text.s, want) != NULL) == (lanes > 0) && (strstr(text.s, " of ") != NULL) == (lanes > 0),
                "target %d dim %lld, want %lld lanes:\n%s", target, (long long)dim, (long long)lanes, text.s);
  ck_assert_msg(strstr(text.s, "carry 1 (cumsum): a0") != NULL, "%s", text.s);
  ir_str_free(&text);
  kiln_scope_end();
}

START_TEST(lane_structure) {
  expect_lanes(KILN_CPU, KILN_SHAPE(64, 512, 64), 1, 64);     /* the whole last dim */
  expect_lanes(KILN_CPU, KILN_SHAPE(64, 512, 64), 0, 64);
  expect_lanes(KILN_CPU, KILN_SHAPE(4096, 4096), 0, 1024);    /* blocks for the threads */
  expect_lanes(KILN_CPU, KILN_SHAPE(3, 4, 5000), 1, 1000);    /* blocks in turn */
  expect_lanes(KILN_CPU, KILN_SHAPE(64, 512, 64), 2, 0);      /* innermost: lines */
  expect_lanes(KILN_CPU, KILN_SHAPE(5, 4099), 0, 0);          /* no block size */
  expect_lanes(KILN_CPU, KILN_SHAPE(8, 1), 0, 0);
  /* a GPU thread per line, side by side along the kept dims */
  expect_lanes(KILN_CUDA, KILN_SHAPE(64, 512, 64), 1, 0);
}
END_TEST

/* cumsum, cummax's positions and logcumsumexp along dim 0 of f32[600, 2048]
 * (two blocks of lanes, one per thread) on 1 and on 2 threads: the same
 * bits; and cumsum's values against the oracle. */
static void set_threads(int threads) {
  rt_opts()->num_threads = threads;
  rt_pool_shutdown();   /* restarted with threads - 1 workers */
}

static kiln_tensor *lane_run(scan_op op, int threads) {
  set_threads(threads);
  kiln_tensor *r = kiln_adds(apply(op, tu_data(KILN_F32, KILN_SHAPE(600, 2048), 9, TU_SMALL), 0), 1);
  ck_assert_int_eq(kiln_realize(r), KILN_OK);
  return r;
}

START_TEST(lane_threads) {
  kiln_scope_begin();
  int saved = rt_opts()->num_threads;
  const scan_op ops[] = {S_CUMSUM, S_CUMMAX_I, S_LOGCUMSUMEXP};
  for (int o = 0; o < 3; o++) {
    kiln_tensor *one = lane_run(ops[o], 1), *two = lane_run(ops[o], 2);
    size_t bytes = (size_t)kiln_numel(one) * (ops[o] == S_CUMMAX_I ? 8 : 4);
    ck_assert_msg(memcmp(kiln_data(one), kiln_data(two), bytes) == 0, "%s", scan_names[ops[o]]);
  }
  set_threads(saved);
  ctx_t c = {S_CUMSUM, KILN_F32, 2, {600, 2048}, 0, IN_PLAIN, TU_SMALL, true};
  check(&c);
  kiln_scope_end();
}
END_TEST

/* ---- long scans in two passes (passes/split_scan.c) ---------------------------
 * A line of 2^20 or more (few lines) runs as block totals, their scan and a
 * rescan of each block from its offset; just below, as one serial line.
 * Every scan splits: logcumsumexp from each block's logsumexp, cummax's and
 * cummin's positions from each block's best and its latest position.
 * cumprod scans 1 + x/1000, which neither overflows nor reaches 0. Inputs:
 * smooth values, small integers (the best ties at every repeat, in every
 * block), those with two nans in different blocks (the latest nan's
 * position wins), int32's small integers and int64's extremes (the
 * identity of cummin's first block is INT64_MAX). */
typedef enum { L_SMOOTH, L_TIES, L_NAN, L_INT_TIES, L_INT_EXTREMES } long_input;

typedef struct {
  scan_op op;
  int64_t lines, len;
  long_input in;
} long_t;

/* small integers as f32: floor of [-4, 4]; nans at len/2 + 3 and len - len/8 of each line */
static kiln_tensor *tie_data(int64_t lines, int64_t len, bool nan) {
  float *v = malloc(sizeof *v * (size_t)(lines * len));
  ck_assert_ptr_nonnull(v);
  tu_fill(KILN_F32, lines * len, 7, TU_SMALL, v);
  for (int64_t k = 0; k < lines * len; k++) v[k] = floorf(v[k]);
  for (int64_t l = 0; nan && l < lines; l++) v[l * len + len / 2 + 3] = v[l * len + len - len / 8] = NAN;
  kiln_tensor *t = kiln_from_data(v, KILN_F32, KILN_SHAPE(lines, len));
  free(v);
  return t;
}

static kiln_tensor *long_input_of(const long_t *c) {
  const int64_t shape[2] = {c->lines, c->len};
  switch (c->in) {
  case L_TIES: return tie_data(c->lines, c->len, false);
  case L_NAN: return tie_data(c->lines, c->len, true);
  case L_INT_TIES: return kiln_cast(tie_data(c->lines, c->len, false), KILN_I32);
  case L_INT_EXTREMES: return tu_data(KILN_I64, 2, shape, 11, TU_FULL);
  default: {
    kiln_tensor *x = tu_data(KILN_F32, 2, shape, 3 + (uint64_t)c->op, TU_SMALL);
    return c->op == S_CUMPROD ? kiln_adds(kiln_muls(x, 1e-3), 1) : x;
  }
  }
}

static kiln_tensor *long_scan(const void *p) {
  const long_t *c = p;
  kiln_tensor *s = apply(c->op, long_input_of(c), -1);
  return c->op == S_CUMMAX_I || c->op == S_CUMMIN_I ? s : kiln_adds(s, 1);
}

/* every scan on smooth values (cumsum and cummax's positions on two lines),
 * split and just below the length */
START_TEST(long_scans) {
  const int64_t lens[] = {1 << 20, (1 << 20) - 16};
  for (int l = 0; l < 2; l++) {
    long_t c = {(scan_op)_i, _i == S_CUMSUM || _i == S_CUMMAX_I ? 2 : 1, lens[l], L_SMOOTH};
    char why[512];
    ck_assert_msg(tu_check_fused_eager(long_scan, &c, KILN_NUM_DTYPES, tolerance(c.op, KILN_F32), why, sizeof why),
                  "%s length %lld: %s", scan_names[c.op], (long long)c.len, why);
  }
}
END_TEST

/* ties, nans and integers: cummax and cummin (values and positions), logcumsumexp of the nans */
START_TEST(long_ties) {
  const scan_op ops[] = {S_CUMMAX, S_CUMMAX_I, S_CUMMIN, S_CUMMIN_I};
  const long_input ins[] = {L_TIES, L_NAN, L_INT_TIES, L_INT_EXTREMES};
  for (int o = 0; o < 5; o++) {
    long_t c = {o < 4 ? ops[o] : S_LOGCUMSUMEXP, o == 1 ? 2 : 1, 1 << 20, o < 4 ? ins[_i] : L_NAN};
    if (o == 4 && _i) continue;
    char why[512];
    ck_assert_msg(tu_check_fused_eager(long_scan, &c, KILN_NUM_DTYPES, tolerance(c.op, KILN_F32), why, sizeof why),
                  "%s input %d: %s", scan_names[c.op], c.in, why);
  }
}
END_TEST

static kiln_tensor *long_run(scan_op op, long_input in, int threads) {
  set_threads(threads);
  long_t c = {op, 1, 1 << 21, in};
  kiln_tensor *r = long_scan(&c);
  ck_assert_int_eq(kiln_realize(r), KILN_OK);
  return r;
}

/* the blocks follow the shape: 1 and 2 threads give the same bits */
START_TEST(long_threads) {
  kiln_scope_begin();
  int saved = rt_opts()->num_threads;
  const scan_op ops[] = {S_CUMSUM, S_CUMPROD, S_CUMMIN, S_LOGCUMSUMEXP, S_CUMMAX_I, S_CUMMIN_I};
  const long_input ins[] = {L_SMOOTH, L_SMOOTH, L_SMOOTH, L_SMOOTH, L_NAN, L_INT_TIES};
  for (int o = 0; o < 6; o++) {
    kiln_tensor *one = long_run(ops[o], ins[o], 1), *two = long_run(ops[o], ins[o], 2);
    size_t bytes = (size_t)kiln_numel(one) * kiln_dtype_size(kiln_dtype_of(one));
    ck_assert_msg(memcmp(kiln_data(one), kiln_data(two), bytes) == 0, "%s", scan_names[ops[o]]);
  }
  set_threads(saved);
  kiln_scope_end();
}
END_TEST

/* cumsum(x * 2) + 1: three kernels split (block totals, their scan, the
 * rescan fused with the producer and the consumer), planned for a GPU too
 * (which splits from 2^14, up to 256 lines), one below the length or with the
 * pass off; logcumsumexp three too (the
 * block's max and sum of exp share a row kernel), and cummax's positions
 * (each block's best and its latest position share one) */
START_TEST(long_kernels) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(1 << 20), 1, TU_SMALL);
  kiln_tensor *y = kiln_adds(kiln_cumsum(kiln_muls(x, 2), 0), 1);
  rt_planned *plan;
  ck_assert_int_eq(rt_plan_for(KILN_CUDA, 1, &y, &plan), 3);
  rt_plan_free(plan, 3);
  kiln_tensor *wide = kiln_cumsum(tu_data(KILN_F32, KILN_SHAPE(257, 1 << 14), 1, TU_SMALL), 1);
  ck_assert_int_eq(rt_plan_for(KILN_CUDA, 1, &wide, &plan), 1);
  rt_plan_free(plan, 1);
  kiln_tensor *gpu_long = kiln_cumsum(kiln_slice(x, 0, 0, 1 << 14, 1), 0);
  ck_assert_int_eq(rt_plan_for(KILN_CUDA, 1, &gpu_long, &plan), 3);
  rt_plan_free(plan, 3);
  ck_assert_int_eq(tu_kernels_of(y), 3);
  /* planned twice (split for the GPU, then for the CPU), y keeps its value */
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  const float *xv = kiln_data(x), *yv = kiln_data(y);
  double sum = 0;
  for (int64_t i = 0; i < 1 << 20; i++) {
    sum += 2.0 * xv[i];
    ck_assert_msg(fabs(yv[i] - (sum + 1)) <= 1e-4 * (1 + fabs(sum)), "element %lld: %g, want %g", (long long)i, yv[i], sum + 1);
  }
  ck_assert_int_eq(tu_kernels_of(kiln_adds(kiln_cumsum(kiln_muls(kiln_slice(x, 0, 16, 1 << 20, 1), 2), 0), 1)), 1);
  ck_assert_int_eq(tu_kernels_of(kiln_adds(kiln_logcumsumexp(kiln_muls(x, 2), 0), 1)), 3);
  kiln_tensor *at = NULL;
  kiln_cummax(kiln_muls(x, 2), 0, NULL, &at);
  ck_assert_int_eq(tu_kernels_of(at), 3);
  kiln_cummin(kiln_slice(x, 0, 16, 1 << 20, 1), 0, NULL, &at);
  ck_assert_int_eq(tu_kernels_of(at), 1);
  rt_opts()->passes = "-split_scan";
  ck_assert_int_eq(tu_kernels_of(kiln_adds(kiln_cumsum(kiln_muls(x, 2), 0), 1)), 1);
  rt_opts()->passes = NULL;
  kiln_scope_end();
}
END_TEST

static Suite *scan_suite(void) {
  Suite *s = suite_create("scan_ops");
  tcase_add_loop_test(tu_tcase(s, "dtypes"), every_dtype_every_dim, 0, S_NOPS);
  tcase_add_loop_test(tu_tcase(s, "views"), views_and_fusion, 0, S_NOPS);
  tcase_add_loop_test(tu_tcase(s, "shapes"), odd_shapes, 0, S_NOPS);
  tcase_add_loop_test(tu_tcase(s, "specials"), specials, 0, S_NOPS);
  TCase *tc = tu_tcase(s, "values");
  tcase_add_test(tc, hand_worked);
  tcase_add_test(tc, long_rows);
  tcase_add_test(tu_tcase(s, "fusion"), fusion_counts);
  tcase_add_test(tu_tcase(s, "errors"), errors);
  tcase_add_loop_test(tu_tcase(s, "sort_dtypes"), sort_every_dtype_every_dim, 0, O_NOPS);
  tcase_add_loop_test(tu_tcase(s, "sort_shapes"), sort_shapes_and_specials, 0, O_NOPS);
  TCase *st = tu_tcase(s, "sort_values");
  tcase_add_test(st, sort_hand_worked);
  tcase_add_test(st, sort_errors);
  tcase_add_test(tu_tcase(s, "compiled"), compiled_dynamic);
  tcase_add_loop_test(tu_tcase(s, "lane_shapes"), lane_shapes, 0, S_NOPS);
  TCase *lt = tu_tcase(s, "lanes");
  tcase_add_test(lt, lane_structure);
  tcase_add_test(lt, lane_threads);
  tcase_add_loop_test(tu_tcase(s, "long_scans"), long_scans, 0, S_NOPS);
  tcase_add_loop_test(tu_tcase(s, "long_ties"), long_ties, 0, 4);
  TCase *lk = tu_tcase(s, "long");
  tcase_add_test(lk, long_threads);
  tcase_add_test(lk, long_kernels);
  return s;
}

KILN_TEST_MAIN(scan_suite)
