/* test_reduce_ops.c: the statistics and norms of issue 13 (var/std with a
 * correction, var_mean/std_mean, logsumexp, aminmax, vector_norm,
 * matrix_norm, normalize, cosine_similarity) and the kiln_var/kiln_std flag
 * check: hand-worked values, every dtype fused and eager against the
 * reference evaluator, NaN/inf, empty and size-1 dims, kernel counts of the
 * one-pass forms, and error paths with message and line. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

#define SCALAR 0, (const int64_t *)NULL   /* the shape of a 0-dim result */

/* x[i][j] = 4i + j, float64 (3, 4). */
static kiln_tensor *x34(void) { return kiln_reshape(kiln_cast(kiln_arange(0, 12, 1), KILN_F64), KILN_SHAPE(3, 4)); }

START_TEST(corrections) {
  kiln_scope_begin();
  kiln_tensor *v = kiln_from_data((double[]){1, 2, 3, 4}, KILN_F64, KILN_SHAPE(4)), *x = x34();
  TU_EXPECT(kiln_var_correction(v, 0, NULL, 0, 0), SCALAR, 1e-15, 1.25);
  TU_EXPECT(kiln_var_correction(v, 0, NULL, 1, 0), SCALAR, 1e-15, 5.0 / 3);
  TU_EXPECT(kiln_var_correction(v, 0, NULL, 2, 0), SCALAR, 1e-15, 2.5);
  TU_EXPECT(kiln_var_correction(v, 0, NULL, 0.5, 0), SCALAR, 1e-15, 5 / 3.5);
  TU_EXPECT(kiln_var_correction(v, 0, NULL, 4, 0), SCALAR, 0, INFINITY);   /* max(0, N - correction) = 0 */
  TU_EXPECT(kiln_var_correction(v, 0, NULL, 7, 0), SCALAR, 0, INFINITY);
  TU_EXPECT(kiln_var_correction(x, KILN_DIMS(1), 0, 0), KILN_SHAPE(3), 1e-15, 1.25, 1.25, 1.25);
  TU_EXPECT(kiln_var_correction(x, KILN_DIMS(-2), 1, 1), KILN_SHAPE(1, 4), 1e-15, 16, 16, 16, 16);
  TU_EXPECT(kiln_std_correction(x, KILN_DIMS(0), 1, 0), KILN_SHAPE(4), 1e-15, 4, 4, 4, 4);
  TU_EXPECT(kiln_std_correction(kiln_T(x), KILN_DIMS(1), 1, 0), KILN_SHAPE(4), 1e-15, 4, 4, 4, 4);
  TU_EXPECT(kiln_var_correction(kiln_ones(KILN_SHAPE(1), KILN_F32), 0, NULL, 1, 0), SCALAR, 0, NAN);   /* 0 / 0 */
  TU_EXPECT(kiln_var_correction(kiln_from_data((float[]){1, NAN}, KILN_F32, KILN_SHAPE(2)), 0, NULL, 1, 0), SCALAR, 0, NAN);
  /* kiln_var / kiln_std take a flag */
  TU_EXPECT(kiln_var(v, 1), SCALAR, 1e-15, 5.0 / 3);
  TU_EXPECT(kiln_std_dims(x, KILN_DIMS(0), 0, 0), KILN_SHAPE(4), 1e-15, sqrt(32.0 / 3), sqrt(32.0 / 3), sqrt(32.0 / 3), sqrt(32.0 / 3));
  kiln_scope_end();
}
END_TEST

START_TEST(var_mean_pairs) {
  kiln_scope_begin();
  kiln_tensor *x = x34(), *var, *mean, *std;
  kiln_var_mean(x, KILN_DIMS(1), 1, 0, &var, &mean);
  TU_EXPECT(var, KILN_SHAPE(3), 1e-15, 5.0 / 3, 5.0 / 3, 5.0 / 3);
  TU_EXPECT(mean, KILN_SHAPE(3), 1e-15, 1.5, 5.5, 9.5);
  kiln_std_mean(kiln_cast(x, KILN_F32), KILN_DIMS(0), 1, 1, &std, &mean);
  TU_EXPECT(std, KILN_SHAPE(1, 4), 1e-7, 4, 4, 4, 4);
  TU_EXPECT(mean, KILN_SHAPE(1, 4), 1e-7, 4, 5, 6, 7);
  kiln_std_mean(x, 0, NULL, 0, 0, NULL, &mean);   /* a result not wanted */
  TU_EXPECT(mean, SCALAR, 1e-15, 5.5);
  /* one pass: the mean's sum is var's, one kernel reads x for both */
  kiln_tensor *y = tu_data(KILN_F32, KILN_SHAPE(64, 33), 1, TU_SMALL);
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  kiln_var_mean(y, KILN_DIMS(-1), 1, 0, &var, &mean);
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize_n(2, ((kiln_tensor *[]){var, mean})), KILN_OK);
  ck_assert_int_eq(kiln_stats().kernels_launched, 1);
  kiln_var_mean(kiln_arange(0, 3, 1), 0, NULL, 1, 0, &var, &mean);
  TU_EXPECT_ERROR_ABOVE(var, 1, KILN_ERR_DTYPE, "var_mean(): could not infer output dtype");
  TU_EXPECT_ERROR_ABOVE(mean, 2, KILN_ERR_DTYPE, "var_mean(): could not infer output dtype");
  kiln_scope_end();
}
END_TEST

START_TEST(logsumexps) {
  kiln_scope_begin();
  kiln_tensor *x = x34();
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = log(exp(4 * i) + exp(4 * i + 1) + exp(4 * i + 2) + exp(4 * i + 3));
  TU_EXPECT(kiln_logsumexp(x, KILN_DIMS(1), 0), KILN_SHAPE(3), 1e-14, want[0], want[1], want[2]);
  TU_EXPECT(kiln_logsumexp(kiln_T(x), KILN_DIMS(0), 1), KILN_SHAPE(1, 3), 1e-14, want[0], want[1], want[2]);
  double all = 0;
  for (int k = 0; k < 12; k++) all += exp(k - 11.0);
  TU_EXPECT(kiln_logsumexp(x, 0, NULL, 0), SCALAR, 1e-14, 11 + log(all));
  /* large values do not overflow; infinite rows; NaN */
  kiln_tensor *s = kiln_from_data((float[]){1000, 1000, -INFINITY, -INFINITY, INFINITY, 1, NAN, 1}, KILN_F32, KILN_SHAPE(4, 2));
  TU_EXPECT(kiln_logsumexp(s, KILN_DIMS(-1), 0), KILN_SHAPE(4), 1e-6, 1000 + log(2.0), -INFINITY, INFINITY, NAN);
  kiln_tensor *i = kiln_logsumexp(kiln_arange(0, 3, 1), KILN_DIMS(0), 0);
  ck_assert_int_eq(kiln_dtype_of(i), KILN_F32);
  TU_EXPECT(i, SCALAR, 1e-6, log(1 + exp(1) + exp(2)));
  TU_EXPECT(kiln_logsumexp(kiln_zeros(KILN_SHAPE(2, 0), KILN_F32), KILN_DIMS(1), 0), KILN_SHAPE(2), 0, -INFINITY, -INFINITY);
  TU_EXPECT(kiln_logsumexp(kiln_zeros(KILN_SHAPE(0, 2), KILN_F32), KILN_DIMS(1), 1), KILN_SHAPE(0, 1), 0, 0);
  ck_assert_int_eq(tu_kernels_of(kiln_logsumexp(tu_data(KILN_F32, KILN_SHAPE(64, 33), 2, TU_SMALL), KILN_DIMS(-1), 0)), 1);
  TU_EXPECT_ERROR(kiln_logsumexp(x, KILN_DIMS(2), 0), KILN_ERR_ARG, "logsumexp: Dimension out of range");
  kiln_scope_end();
}
END_TEST

START_TEST(aminmaxes) {
  kiln_scope_begin();
  kiln_tensor *x = x34(), *lo, *hi;
  kiln_aminmax(x, &lo, &hi);
  TU_EXPECT(lo, SCALAR, 0, 0);
  TU_EXPECT(hi, SCALAR, 0, 11);
  kiln_aminmax_dim(kiln_T(x), 0, 1, &lo, &hi);
  TU_EXPECT(lo, KILN_SHAPE(1, 3), 0, 0, 4, 8);
  TU_EXPECT(hi, KILN_SHAPE(1, 3), 0, 3, 7, 11);
  kiln_aminmax_dim(kiln_from_data((float[]){1, NAN, 2, 3}, KILN_F32, KILN_SHAPE(2, 2)), -1, 0, &lo, NULL);
  TU_EXPECT(lo, KILN_SHAPE(2), 0, NAN, 2);
  kiln_aminmax(kiln_gts(x, 5), NULL, &hi);
  ck_assert_int_eq(kiln_dtype_of(hi), KILN_BOOL);
  TU_EXPECT(hi, SCALAR, 0, 1);
  kiln_aminmax(kiln_zeros(KILN_SHAPE(0), KILN_I32), &lo, &hi);
  TU_EXPECT_ERROR_ABOVE(lo, 1, KILN_ERR_SHAPE, "aminmax: cannot reduce over an empty dimension");
  TU_EXPECT_ERROR_ABOVE(hi, 2, KILN_ERR_SHAPE, "aminmax: cannot reduce over an empty dimension");
  kiln_aminmax_dim(x, 2, 0, &lo, &hi);
  TU_EXPECT_ERROR_ABOVE(hi, 1, KILN_ERR_ARG, "aminmax: Dimension out of range");
  kiln_scope_end();
}
END_TEST

START_TEST(vector_norms) {
  kiln_scope_begin();
  kiln_tensor *v = kiln_from_data((double[]){3, -4, 0}, KILN_F64, KILN_SHAPE(3)), *x = x34();
  TU_EXPECT(kiln_vector_norm(v, 2, 0, NULL, 0), SCALAR, 1e-15, 5);
  TU_EXPECT(kiln_vector_norm(v, 1, 0, NULL, 0), SCALAR, 1e-15, 7);
  TU_EXPECT(kiln_vector_norm(v, INFINITY, 0, NULL, 0), SCALAR, 0, 4);
  TU_EXPECT(kiln_vector_norm(v, -INFINITY, 0, NULL, 0), SCALAR, 0, 0);
  TU_EXPECT(kiln_vector_norm(v, 0, 0, NULL, 0), SCALAR, 0, 2);
  TU_EXPECT(kiln_vector_norm(v, 3, 0, NULL, 0), SCALAR, 1e-15, cbrt(91));
  TU_EXPECT(kiln_vector_norm(v, 0.5, 0, NULL, 0), SCALAR, 1e-15, (sqrt(3) + 2) * (sqrt(3) + 2));
  TU_EXPECT(kiln_vector_norm(v, -1, 0, NULL, 0), SCALAR, 0, 0);   /* 1 / (1/3 + 1/4 + inf) */
  TU_EXPECT(kiln_vector_norm(x, 1, KILN_DIMS(-1), 1), KILN_SHAPE(3, 1), 1e-15, 6, 22, 38);
  TU_EXPECT(kiln_vector_norm(kiln_T(x), 2, KILN_DIMS(0), 0), KILN_SHAPE(3), 1e-15, sqrt(14), sqrt(126), sqrt(366));
  TU_EXPECT(kiln_vector_norm(kiln_from_data((float[]){NAN, 1}, KILN_F32, KILN_SHAPE(2)), INFINITY, 0, NULL, 0), SCALAR, 0, NAN);
  TU_EXPECT(kiln_vector_norm(kiln_zeros(KILN_SHAPE(0), KILN_F32), 2, 0, NULL, 0), SCALAR, 0, 0);
  TU_EXPECT_ERROR(kiln_vector_norm(kiln_arange(0, 3, 1), 2, 0, NULL, 0), KILN_ERR_DTYPE,
                  "vector_norm: Expected a floating point tensor as input. Got int64");
  TU_EXPECT_ERROR(kiln_vector_norm(v, NAN, 0, NULL, 0), KILN_ERR_ARG, "vector_norm: ord must not be nan");
  TU_EXPECT_ERROR(kiln_vector_norm(kiln_zeros(KILN_SHAPE(0), KILN_F32), INFINITY, 0, NULL, 0), KILN_ERR_SHAPE, "vector_norm: cannot reduce over an empty dimension");
  kiln_scope_end();
}
END_TEST

START_TEST(matrix_norms) {
  kiln_scope_begin();
  kiln_tensor *x = x34();
  TU_EXPECT(kiln_matrix_norm(x, "fro", -2, -1, 0), SCALAR, 1e-15, sqrt(506));
  TU_EXPECT(kiln_matrix_norm(x, NULL, 0, 1, 1), KILN_SHAPE(1, 1), 1e-15, sqrt(506));
  TU_EXPECT(kiln_matrix_norm(x, "1", 0, 1, 0), SCALAR, 0, 21);
  TU_EXPECT(kiln_matrix_norm(x, "-1", 0, 1, 0), SCALAR, 0, 12);
  TU_EXPECT(kiln_matrix_norm(x, "inf", 0, 1, 0), SCALAR, 0, 38);
  TU_EXPECT(kiln_matrix_norm(x, "-inf", 0, 1, 0), SCALAR, 0, 6);
  TU_EXPECT(kiln_matrix_norm(x, "inf", 1, 0, 0), SCALAR, 0, 21);   /* swapped dims: the transpose's norm */
  kiln_tensor *b = kiln_reshape(kiln_cast(kiln_arange(0, 8, 1), KILN_F32), KILN_SHAPE(2, 2, 2));
  TU_EXPECT(kiln_matrix_norm(b, "1", -2, -1, 0), KILN_SHAPE(2), 0, 4, 12);
  TU_EXPECT(kiln_matrix_norm(b, "fro", 0, 2, 1), KILN_SHAPE(1, 2, 1), 1e-6, sqrt(0 + 1 + 16 + 25), sqrt(4 + 9 + 36 + 49));
  TU_EXPECT_ERROR(kiln_matrix_norm(x, "nuc", 0, 1, 0), KILN_ERR_ARG,
                  "matrix_norm: ord 'nuc' needs singular values (an SVD), which kiln does not support; supported: 'fro', "
                  "'1', '-1', 'inf', '-inf'");
  TU_EXPECT_ERROR(kiln_matrix_norm(x, "2", 0, 1, 0), KILN_ERR_ARG, "matrix_norm: ord '2' needs singular values");
  TU_EXPECT_ERROR(kiln_matrix_norm(x, "max", 0, 1, 0), KILN_ERR_ARG,
                  "matrix_norm: invalid ord 'max'; expected one of 'fro', '1', '-1', 'inf', '-inf', 'nuc', '2', '-2'");
  TU_EXPECT_ERROR(kiln_matrix_norm(x, "fro", 1, -1, 0), KILN_ERR_ARG, "matrix_norm: dims must be different. Got (1, -1)");
  TU_EXPECT_ERROR(kiln_matrix_norm(kiln_ones(KILN_SHAPE(3), KILN_F32), "fro", 0, 1, 0), KILN_ERR_ARG,
                  "matrix_norm: The input tensor A must have at least 2 dimensions.");
  TU_EXPECT_ERROR(kiln_matrix_norm(kiln_ones(KILN_SHAPE(2, 2), KILN_I32), "fro", 0, 1, 0), KILN_ERR_DTYPE,
                  "matrix_norm: Expected a floating point tensor as input. Got int32");
  kiln_scope_end();
}
END_TEST

START_TEST(normalize_cosine) {
  kiln_scope_begin();
  kiln_tensor *m = kiln_from_data((double[]){3, 4, 0, 0}, KILN_F64, KILN_SHAPE(2, 2));
  TU_EXPECT(kiln_normalize(m, 2, 1, 1e-12), KILN_SHAPE(2, 2), 1e-15, 0.6, 0.8, 0, 0);
  TU_EXPECT(kiln_normalize(m, 1, 0, 1e-12), KILN_SHAPE(2, 2), 1e-15, 1, 1, 0, 0);
  TU_EXPECT(kiln_normalize(kiln_T(m), 2, 0, 1e-12), KILN_SHAPE(2, 2), 1e-15, 0.6, 0, 0.8, 0);
  kiln_tensor *a = kiln_from_data((double[]){1, 0, 1, 1, 0, 0}, KILN_F64, KILN_SHAPE(3, 2));
  kiln_tensor *b = kiln_from_data((double[]){1, 1}, KILN_F64, KILN_SHAPE(1, 2));
  TU_EXPECT(kiln_cosine_similarity(a, b, 1, 1e-8), KILN_SHAPE(3), 1e-15, 1 / sqrt(2), 1, 0);
  TU_EXPECT(kiln_cosine_similarity(kiln_T(a), kiln_T(b), 0, 1e-8), KILN_SHAPE(3), 1e-15, 1 / sqrt(2), 1, 0);
  TU_EXPECT_ERROR(kiln_cosine_similarity(a, kiln_ones(KILN_SHAPE(3), KILN_F64), 1, 1e-8), KILN_ERR_SHAPE,
                  "cosine_similarity: shapes (3,2) and (3,) cannot be broadcast");
  TU_EXPECT_ERROR(kiln_normalize(kiln_arange(0, 3, 1), 2, 0, 1e-12), KILN_ERR_DTYPE, "normalize: Expected a floating point tensor");
  kiln_scope_end();
}
END_TEST

/* ---- every dtype, fused and eager, against the reference evaluator ------------ */
typedef kiln_tensor *(*red_fn)(kiln_tensor *x);
static kiln_tensor *r_var(kiln_tensor *x) { return kiln_var_correction(x, KILN_DIMS(0), 2, 1); }
static kiln_tensor *r_std(kiln_tensor *x) { return kiln_std_correction(x, KILN_DIMS(-1), 0.5, 0); }
static kiln_tensor *r_lse(kiln_tensor *x) { return kiln_logsumexp(x, KILN_DIMS(1), 0); }
static kiln_tensor *r_lse_all(kiln_tensor *x) { return kiln_logsumexp(x, 0, NULL, 1); }
static kiln_tensor *r_min(kiln_tensor *x) {
  kiln_tensor *lo, *hi;
  kiln_aminmax_dim(x, 0, 0, &lo, &hi);
  return kiln_add(lo, hi);
}
static kiln_tensor *r_norm3(kiln_tensor *x) { return kiln_vector_norm(x, 3, KILN_DIMS(1), 0); }
static kiln_tensor *r_norm_inf(kiln_tensor *x) { return kiln_vector_norm(x, -INFINITY, KILN_DIMS(0), 1); }
static kiln_tensor *r_norm0(kiln_tensor *x) { return kiln_vector_norm(x, 0, 0, NULL, 0); }
static kiln_tensor *r_fro(kiln_tensor *x) { return kiln_matrix_norm(x, "fro", 0, 1, 0); }
static kiln_tensor *r_mat1(kiln_tensor *x) { return kiln_matrix_norm(x, "-inf", 0, 1, 1); }
static kiln_tensor *r_normalize(kiln_tensor *x) { return kiln_normalize(x, 2, -1, 1e-12); }
static kiln_tensor *r_cos(kiln_tensor *x) { return kiln_cosine_similarity(x, kiln_select(x, 0, 0), 1, 1e-8); }

static const struct { const char *name; red_fn fn; bool any_dtype; } cases[] = {
  {"var", r_var, false}, {"std", r_std, false}, {"logsumexp", r_lse, true}, {"logsumexp_all", r_lse_all, true},
  {"aminmax", r_min, true}, {"norm3", r_norm3, false}, {"norm_-inf", r_norm_inf, false}, {"norm0", r_norm0, false},
  {"fro", r_fro, false}, {"-inf", r_mat1, false}, {"normalize", r_normalize, false}, {"cosine", r_cos, false},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

static const kiln_dtype dtypes[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I32, KILN_U8};

typedef struct { int c; kiln_dtype dt; int64_t rows, cols; bool transposed; } red_ctx;

static kiln_tensor *build(const void *p) {
  const red_ctx *c = p;
  if (c->transposed) return cases[c->c].fn(kiln_T(tu_data(c->dt, KILN_SHAPE(c->cols, c->rows), 5, TU_SMALL)));
  return cases[c->c].fn(tu_data(c->dt, KILN_SHAPE(c->rows, c->cols), 5, TU_SMALL));
}

static void check(int c, kiln_dtype dt, int64_t rows, int64_t cols, bool transposed) {
  if (!cases[c].any_dtype && !ir_is_float(dt)) return;
  red_ctx ctx = {c, dt, rows, cols, transposed};
  char why[512];
  ref_tol tol = dt == KILN_F16 ? (ref_tol){1e-2, 1e-2} : dt == KILN_BF16 ? (ref_tol){6e-2, 6e-2} : (ref_tol){2e-5, 2e-5};
  bool ok = tu_check_fused_eager(build, &ctx, KILN_NUM_DTYPES, tol, why, sizeof why);
  ck_assert_msg(ok, "%s %s (%lld,%lld)%s: %s", cases[c].name, kiln_dtype_name(dt), (long long)rows, (long long)cols,
                transposed ? " transposed" : "", why);
}

START_TEST(every_dtype) {
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) check(_i, dtypes[d], 5, 7, false);
  check(_i, KILN_F32, 6, 3, true);
  check(_i, KILN_F32, 1, 1, false);
  check(_i, KILN_F64, 3, 1, false);
}
END_TEST

START_TEST(flag_errors) {
  kiln_scope_begin();
  kiln_tensor *x = x34();
  TU_EXPECT_ERROR(kiln_var(x, 2), KILN_ERR_ARG, "var: unbiased must be 0 or 1, got 2; for another correction use kiln_var_correction");
  TU_EXPECT_ERROR(kiln_std_dims(x, KILN_DIMS(0), -1, 0), KILN_ERR_ARG,
                  "std: unbiased must be 0 or 1, got -1; for another correction use kiln_std_correction");
  TU_EXPECT_ERROR(kiln_var_correction(kiln_arange(0, 3, 1), 0, NULL, 1, 0), KILN_ERR_DTYPE, "var(): could not infer output dtype");
  TU_EXPECT_ERROR(kiln_std_correction(x, KILN_DIMS(0, 0), 1, 0), KILN_ERR_ARG, "std: dim 0 appears multiple times");
  kiln_scope_end();
}
END_TEST

static Suite *reduce_ops_suite(void) {
  Suite *s = suite_create("reduce_ops");
  TCase *tc = tu_tcase(s, "values");
  tcase_add_test(tc, corrections);
  tcase_add_test(tc, var_mean_pairs);
  tcase_add_test(tc, logsumexps);
  tcase_add_test(tc, aminmaxes);
  tcase_add_test(tc, vector_norms);
  tcase_add_test(tc, matrix_norms);
  tcase_add_test(tc, normalize_cosine);
  tcase_add_loop_test(tu_tcase(s, "dtypes"), every_dtype, 0, NCASES);
  tcase_add_test(tu_tcase(s, "errors"), flag_errors);
  return s;
}

KILN_TEST_MAIN(reduce_ops_suite)
