/* test_reduce.c: reductions (sum mean prod max min argmax argmin any all var
 * std) and the compositions built on them (softmax, log_softmax,
 * layer_norm): each against the reference evaluator, fused and eager, over
 * dims, keepdim, dtypes, non-contiguous and computed inputs, 0-sized and
 * size-1 dims; kernel counts of the fusions the issue names; error paths. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "runtime/inspect.h"
#include "runtime/rt.h"
#include "util/testutil.h"

typedef kiln_tensor *(*red_fn)(kiln_tensor *x);
typedef struct { int ndim; int64_t d[KILN_MAX_DIMS]; } shape_t;
#define SHAPE(...) ((shape_t){KILN_NARGS_(__VA_ARGS__), {__VA_ARGS__}})

static kiln_tensor *r_sum(kiln_tensor *x) { return kiln_sum(x); }
static kiln_tensor *r_sum_last(kiln_tensor *x) { return kiln_sum_dims(x, KILN_DIMS(-1), 0); }
static kiln_tensor *r_sum_first_keep(kiln_tensor *x) { return kiln_sum_dims(x, KILN_DIMS(0), 1); }
static kiln_tensor *r_sum_first(kiln_tensor *x) { return kiln_sum_dims(x, KILN_DIMS(0), 0); }
static kiln_tensor *r_sum_two(kiln_tensor *x) { return kiln_sum_dims(x, KILN_DIMS(0, 2), 0); }
static kiln_tensor *r_prod(kiln_tensor *x) { return kiln_prod_dims(x, KILN_DIMS(1), 0); }
static kiln_tensor *r_max(kiln_tensor *x) { return kiln_max(x); }
static kiln_tensor *r_max_dim(kiln_tensor *x) { return kiln_max_dims(x, KILN_DIMS(1), 1); }
static kiln_tensor *r_min_dim(kiln_tensor *x) { return kiln_min_dims(x, KILN_DIMS(-1), 0); }
static kiln_tensor *r_argmax(kiln_tensor *x) { return kiln_argmax(x); }
static kiln_tensor *r_argmax_dim(kiln_tensor *x) { return kiln_argmax_dim(x, 1, 0); }
static kiln_tensor *r_argmin_dim(kiln_tensor *x) { return kiln_argmin_dim(x, 0, 1); }
static kiln_tensor *r_any(kiln_tensor *x) { return kiln_any_dims(x, KILN_DIMS(1), 0); }
static kiln_tensor *r_all(kiln_tensor *x) { return kiln_all(x); }
static kiln_tensor *r_mean(kiln_tensor *x) { return kiln_mean_dims(x, KILN_DIMS(-1), 1); }
static kiln_tensor *r_var(kiln_tensor *x) { return kiln_var_dims(x, KILN_DIMS(0), 1, 0); }
static kiln_tensor *r_std(kiln_tensor *x) { return kiln_std(x, 0); }
static kiln_tensor *r_softmax(kiln_tensor *x) { return kiln_softmax(x, -1); }
static kiln_tensor *r_softmax0(kiln_tensor *x) { return kiln_softmax(x, 0); }
static kiln_tensor *r_log_softmax(kiln_tensor *x) { return kiln_log_softmax(x, -1); }
static kiln_tensor *r_layer_norm(kiln_tensor *x) { return kiln_layer_norm(x, 1, NULL, NULL, 1e-5); }
/* a computed, non-contiguous input: the reduction fuses with its producer */
static kiln_tensor *r_sum_relu_T(kiln_tensor *x) { return kiln_sum_dims(kiln_relu(kiln_transpose(x, 0, 1)), KILN_DIMS(1), 0); }
static kiln_tensor *r_col_std(kiln_tensor *x) {  /* W6: (x - x.mean(0)) / x.std(0) */
  kiln_tensor *m = kiln_mean_dims(x, KILN_DIMS(0), 1), *s = kiln_std_dims(x, KILN_DIMS(0), 1, 1);
  return kiln_div(kiln_sub(x, m), s);
}
/* sibling column reductions: one kernel computes both */
static kiln_tensor *r_col_sum_max(kiln_tensor *x) {
  return kiln_add(kiln_sum_dims(x, KILN_DIMS(0), 0), kiln_max_dims(x, KILN_DIMS(0), 0));
}
/* a column reduction of data that depends on another: two kernels */
static kiln_tensor *r_col_dependent(kiln_tensor *x) {
  return kiln_sum_dims(kiln_mul(x, kiln_max_dims(x, KILN_DIMS(0), 1)), KILN_DIMS(0), 1);
}

typedef struct {
  const char *name;
  red_fn fn;
  bool float_only;      /* mean var std softmax layer_norm */
  bool no_bool;         /* argmax/argmin, relu */
  bool exact;           /* order-independent: max min arg* any all */
} red_case;

static const red_case cases[] = {
  {"sum", r_sum, false, false, false},
  {"sum_last", r_sum_last, false, false, false},
  {"sum_first_keep", r_sum_first_keep, false, false, false},
  {"sum_first", r_sum_first, false, false, false},
  {"sum_two", r_sum_two, false, false, false},
  {"prod", r_prod, false, false, false},
  {"max", r_max, false, false, true},
  {"max_dim", r_max_dim, false, false, true},
  {"min_dim", r_min_dim, false, false, true},
  {"argmax", r_argmax, false, true, true},
  {"argmax_dim", r_argmax_dim, false, true, true},
  {"argmin_dim", r_argmin_dim, false, true, true},
  {"any", r_any, false, false, true},
  {"all", r_all, false, false, true},
  {"mean", r_mean, true, false, false},
  {"var", r_var, true, false, false},
  {"std", r_std, true, false, false},
  {"softmax", r_softmax, true, false, false},
  {"softmax0", r_softmax0, true, false, false},
  {"log_softmax", r_log_softmax, true, false, false},
  {"layer_norm", r_layer_norm, true, false, false},
  {"sum_relu_T", r_sum_relu_T, false, true, false},
  {"col_std", r_col_std, true, false, false},
  {"col_sum_max", r_col_sum_max, false, false, false},
  {"col_dependent", r_col_dependent, false, false, false},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

static const kiln_dtype dtypes[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I32, KILN_I64,
                                    KILN_U8, KILN_I8, KILN_I16, KILN_BOOL};
#define NDTYPES ((int)(sizeof dtypes / sizeof *dtypes))

typedef struct {
  const red_case *c;
  kiln_dtype dt;
  shape_t shape;
} ctx_t;

static kiln_tensor *build(const void *p) {
  const ctx_t *c = p;
  return c->c->fn(tu_data(c->dt, c->shape.ndim, c->shape.d, 11, TU_SMALL));
}

/* Sums reassociate (vectorized partial sums) and compositions round a few
 * times: a tolerance per dtype; integer and order-free results are exact. */
static ref_tol tolerance(const red_case *c, kiln_dtype dt) {
  if (c->exact || !ir_is_float(dt)) return (ref_tol){0, 0};
  if (dt == KILN_F16) return (ref_tol){1e-2, 1e-2};
  if (dt == KILN_BF16) return (ref_tol){6e-2, 6e-2};
  return (ref_tol){dt == KILN_F32 ? 2e-5 : 1e-12, dt == KILN_F32 ? 2e-5 : 1e-12};
}

static void check_case(const red_case *c, kiln_dtype dt, shape_t shape) {
  if ((c->float_only && !ir_is_float(dt)) || (c->no_bool && dt == KILN_BOOL)) return;
  ctx_t ctx = {c, dt, shape};
  char why[512];
  bool ok = tu_check_fused_eager(build, &ctx, KILN_NUM_DTYPES, tolerance(c, dt), why, sizeof why);
  ck_assert_msg(ok, "%s %s: %s", c->name, kiln_dtype_name(dt), why);
}

START_TEST(every_reduction_every_dtype) {
  for (int d = 0; d < NDTYPES; d++) check_case(&cases[_i], dtypes[d], SHAPE(5, 7, 3));
}
END_TEST

/* odd and degenerate shapes: size-1 dims, a prime row, many rows */
START_TEST(every_reduction_odd_shapes) {
  const shape_t shapes[] = {SHAPE(1, 1, 1), SHAPE(3, 1, 4), SHAPE(2, 1009, 1), SHAPE(257, 3, 2)};
  for (int s = 0; s < 4; s++) {
    /* a product of 1009 values overflows f32 (inf * 0 = nan) but not the
     * oracle's f64: out of scope, like PyTorch's f32 prod */
    if (cases[_i].fn == r_prod && shapes[s].d[1] > 64) continue;
    check_case(&cases[_i], KILN_F32, shapes[s]);
  }
}
END_TEST

/* sums over empty dims are the identity; max over them is an error */
static kiln_tensor *empty_sum(const void *p) {
  (void)p;
  return kiln_sum_dims(kiln_ones(KILN_SHAPE(3, 0), KILN_F32), KILN_DIMS(1), 0);
}

START_TEST(empty_sum_is_zero) {
  char why[512];
  ck_assert_msg(tu_check_fused_eager(empty_sum, NULL, KILN_F32, (ref_tol){0, 0}, why, sizeof why), "%s", why);
}
END_TEST

/* hand-worked values: argmax ties pick the first, NaN wins, integer sums are int64 */
START_TEST(hand_worked) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data((float[]){3, 7, 7, 1, NAN, 2}, KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *am = kiln_argmax_dim(x, 1, 0);
  ck_assert_int_eq(kiln_realize(am), KILN_OK);
  const int64_t *a = kiln_data(am);
  ck_assert_int_eq(a[0], 1);  /* first of the tied 7s */
  ck_assert_int_eq(a[1], 1);  /* NaN counts as the largest */
  kiln_tensor *s = kiln_sum(kiln_from_data((int32_t[]){2000000000, 2000000000}, KILN_I32, KILN_SHAPE(2)));
  ck_assert_int_eq(kiln_dtype_of(s), KILN_I64);
  ck_assert(kiln_item(s) == 4e9);
  kiln_tensor *m = kiln_mean(kiln_from_data((double[]){1, 2, 3, 4}, KILN_F64, KILN_SHAPE(4)));
  ck_assert(kiln_item(m) == 2.5);
  kiln_tensor *v = kiln_var(kiln_from_data((double[]){1, 2, 3, 4}, KILN_F64, KILN_SHAPE(4)), 1);
  ck_assert(fabs(kiln_item(v) - 5.0 / 3.0) < 1e-15);
  kiln_scope_end();
}
END_TEST

/* Row max and min over 32 lanes (two vectors, so the reduction is a
 * vector tree): a NaN anywhere in a row wins, each lane's position counts,
 * and a row of signed zeros gives a zero (the codegen leaves its sign
 * open, as PyTorch does). */
START_TEST(max_min_rows) {
  kiln_scope_begin();
  enum { W = 32 };
  float x[4 * W];
  for (int j = 0; j < W; j++) {
    x[j] = (float)((j * 7) % W) - 10;   /* a permutation of -10..21 */
    x[W + j] = j == 17 ? NAN : (float)j;
    x[2 * W + j] = j % 2 ? -0.0f : 0.0f;
    x[3 * W + j] = j == W - 1 ? -100.0f : j == 3 ? 100.0f : (float)j / 4;
  }
  kiln_tensor *t = kiln_from_data(x, KILN_F32, KILN_SHAPE(4, W));
  kiln_tensor *mx = kiln_max_dims(t, KILN_DIMS(1), 0), *mn = kiln_min_dims(t, KILN_DIMS(1), 0);
  ck_assert_int_eq(kiln_realize(mx), KILN_OK);
  ck_assert_int_eq(kiln_realize(mn), KILN_OK);
  const float *a = kiln_data(mx), *b = kiln_data(mn);
  ck_assert(a[0] == 21 && b[0] == -10);
  ck_assert(isnan(a[1]) && isnan(b[1]));
  ck_assert(a[2] == 0 && b[2] == 0);
  ck_assert(a[3] == 100 && b[3] == -100);
  kiln_scope_end();
}
END_TEST

/* ---- fusion counts --------------------------------------------------------- */
START_TEST(fusion_counts) {
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(64, 33), 1, TU_SMALL);
  kiln_tensor *b = tu_data(KILN_F32, KILN_SHAPE(64, 33), 2, TU_SMALL);
  ck_assert_int_eq(tu_kernels_of(kiln_sum_dims(kiln_relu(kiln_mul(a, b)), KILN_DIMS(1), 0)), 1);
  ck_assert_int_eq(tu_kernels_of(kiln_softmax(a, -1)), 1);
  ck_assert_int_eq(tu_kernels_of(kiln_log_softmax(a, -1)), 1);
  ck_assert_int_eq(tu_kernels_of(kiln_layer_norm(a, 1, NULL, NULL, 1e-5)), 1);
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(33), 3, TU_SMALL);
  ck_assert_int_eq(tu_kernels_of(kiln_layer_norm(a, 1, w, w, 1e-5)), 1);
  ck_assert_int_eq(tu_kernels_of(kiln_mean(kiln_exp(a))), 1);
  /* column statistics: one kernel reads a for sum(x) and sum(x^2) (the
   * mean's sum is var's); then the finishing row and the output */
  ck_assert_int_eq(tu_kernels_of(r_col_std(a)), 3);
  ck_assert_int_eq(tu_kernels_of(r_col_sum_max(a)), 2);     /* both reductions, then the add */
  ck_assert_int_eq(tu_kernels_of(r_col_dependent(a)), 2);   /* the sum needs the max first */
  /* without keepdim the column sum's reshape shares its buffer: no copy */
  ck_assert_int_eq(tu_kernels_of(r_sum_first(a)), 1);
  kiln_scope_end();
}
END_TEST

/* Big reductions to few values run as two kernels (split_reduce.c): P
 * partials per kept element, in parallel, then the partials. Values match
 * the reference evaluator whether split or not. */
static const char *const big_cases[] = {"sum", "sum_last", "max", "min_dim", "mean", "std"};

static const red_case *case_named(const char *name) {
  for (int i = 0; i < NCASES; i++)
    if (strcmp(cases[i].name, name) == 0) return &cases[i];
  ck_abort_msg("no case %s", name);
  return NULL;
}

START_TEST(big_reductions_split) {
  const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_I32};
  for (size_t c = 0; c < sizeof big_cases / sizeof *big_cases; c++)
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) check_case(case_named(big_cases[c]), dts[d], SHAPE(3, 1 << 20));
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(1 << 21), 5, TU_SMALL);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  ck_assert_int_eq(tu_kernels_of(kiln_sum(x)), 2);
  ck_assert_int_eq(tu_kernels_of(kiln_max(kiln_relu(x))), 2);
  ck_assert_int_eq(tu_kernels_of(kiln_sum(kiln_slice(x, 0, 0, 1000, 1))), 1);  /* small: one kernel */
  rt_opts()->passes = "-split_reduce";
  ck_assert_int_eq(tu_kernels_of(kiln_sum(x)), 1);
  rt_opts()->passes = NULL;
  /* planned for the CUDA back end, whose full reductions spread over blocks
   * themselves: not split, whatever device the data is on */
  kiln_tensor *s = kiln_sum(x);
  rt_planned *plan;
  ck_assert_int_eq(rt_plan_for(KILN_CUDA, 1, &s, &plan), 1);
  rt_plan_free(plan, 1);
  ck_assert_int_eq(rt_plan_for(KILN_CPU, 1, &s, &plan), 2);
  rt_plan_free(plan, 2);
  kiln_scope_end();
}
END_TEST

/* softmax's exp is computed once per element: the sum loop stores it in the
 * output row and the normalizing loop loads it (stash.c); KILN_PASSES=-stash
 * computes it twice. */
static int exps_in_softmax_kernel(void) {
  kiln_scope_begin();
  kiln_tensor *y = kiln_softmax(tu_data(KILN_F32, KILN_SHAPE(8, 300), 1, TU_SMALL), -1);
  rt_planned *plan;
  ck_assert_int_eq(rt_plan(1, &y, &plan), 1);
  ir_str text = {0};
  k_print(&text, plan[0].k);
  int n = 0;
  for (const char *p = text.s; (p = strstr(p, " exp.f32 ")); p++) n++;
  ck_assert_int_eq(strstr(text.s, "load.f32 p0[") != NULL, n == 1);  /* the output row read back */
  ir_str_free(&text);
  rt_plan_free(plan, 1);
  kiln_scope_end();
  return n;
}

START_TEST(stash_softmax) {
  ck_assert_int_eq(exps_in_softmax_kernel(), 1);
  rt_opts()->passes = "-stash";
  ck_assert_int_eq(exps_in_softmax_kernel(), 2);
  rt_opts()->passes = NULL;
}
END_TEST

/* var is one pass: sums of x and x^2 in f64 for float data (f64 data:
 * of x - x[0]): exact where the two-pass form is, no cancellation from a
 * large common offset or an outlier first element, never negative */
START_TEST(var_one_pass) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data((float[]){10001, 10002, 10003, 10004}, KILN_F32, KILN_SHAPE(4));
  ck_assert(kiln_item(kiln_var(x, 1)) == (float)(5.0 / 3.0));
  ck_assert(kiln_item(kiln_var(x, 0)) == 1.25f);
  kiln_tensor *o = kiln_from_data((double[]){1e8, 1, 2, 3}, KILN_F64, KILN_SHAPE(4));
  double m = (1e8 + 6) / 4, want = ((1e8 - m) * (1e8 - m) + (1 - m) * (1 - m) + (2 - m) * (2 - m) + (3 - m) * (3 - m)) / 3;
  ck_assert(fabs(kiln_item(kiln_var(o, 1)) - want) <= 1e-15 * want);
  kiln_tensor *c = kiln_full(KILN_SHAPE(5), 3.25, KILN_F32);  /* constant: exactly 0, never negative */
  ck_assert(kiln_item(kiln_var(c, 1)) == 0);
  kiln_scope_end();
}
END_TEST

/* ---- errors ----------------------------------------------------------------- */

START_TEST(errors) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_ones(KILN_SHAPE(2, 3), KILN_F32);
  kiln_tensor *i = kiln_arange(0, 6, 1);
  TU_EXPECT_ERROR(kiln_mean(i), KILN_ERR_DTYPE,
               "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: int64");
  TU_EXPECT_ERROR(kiln_std(i, 1), KILN_ERR_DTYPE, "std(): could not infer output dtype");
  TU_EXPECT_ERROR(kiln_softmax(i, 0), KILN_ERR_DTYPE, "softmax(): could not infer output dtype");
  TU_EXPECT_ERROR(kiln_sum_dims(x, KILN_DIMS(2), 0), KILN_ERR_ARG,
               "sum: Dimension out of range (expected to be in range of [-2, 1], but got 2)");
  TU_EXPECT_ERROR(kiln_sum_dims(x, KILN_DIMS(1, -1), 0), KILN_ERR_ARG, "sum: dim 1 appears multiple times in the list of dims");
  TU_EXPECT_ERROR(kiln_max(kiln_ones(KILN_SHAPE(0, 3), KILN_F32)), KILN_ERR_SHAPE, "max: cannot reduce over an empty dimension");
  TU_EXPECT_ERROR(kiln_argmax(kiln_gts(x, 0)), KILN_ERR_DTYPE, "argmax: not implemented for bool");
  TU_EXPECT_ERROR(kiln_sum(NULL), KILN_ERR_ARG, "sum: argument 1 is NULL");
  TU_EXPECT_ERROR(kiln_layer_norm(x, 3, NULL, NULL, 1e-5), KILN_ERR_ARG, "layer_norm: cannot normalize the last 3 dims");
  kiln_scope_end();
}
END_TEST

static Suite *reduce_suite(void) {
  Suite *s = suite_create("reduce");
  tcase_add_loop_test(tu_tcase(s, "dtypes"), every_reduction_every_dtype, 0, NCASES);
  tcase_add_loop_test(tu_tcase(s, "shapes"), every_reduction_odd_shapes, 0, NCASES);
  TCase *tc = tu_tcase(s, "values");
  tcase_add_test(tc, empty_sum_is_zero);
  tcase_add_test(tc, hand_worked);
  tcase_add_test(tc, max_min_rows);
  tcase_add_test(tu_tcase(s, "fusion"), fusion_counts);
  tcase_add_test(tu_tcase(s, "stash"), stash_softmax);
  tcase_add_test(tu_tcase(s, "split"), big_reductions_split);
  tcase_add_test(tu_tcase(s, "var"), var_one_pass);
  tcase_add_test(tu_tcase(s, "errors"), errors);
  return s;
}

KILN_TEST_MAIN(reduce_suite)
