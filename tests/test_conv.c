/* test_conv.c: conv2d and conv_transpose2d as implicit GEMMs against the
 * direct loops of tests/util/ref_conv.c, fused and eager, f32 and f64,
 * contiguous and strided inputs (stride, padding, dilation, groups,
 * depthwise, 1x1, a kernel larger than the input, stride past the kernel,
 * unbatched, depth past one GEMM depth block); the kernels a convolution and
 * its epilogue take; conv_transpose2d's error paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "util/ref.h"
#include "util/testutil.h"

/* n = 0: an unbatched (C, H, W) input (the oracle runs it as a batch of 1). */
static const ref_conv convs[] = {
  {2, 4, 7, 6, 6, 3, 3, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
  {1, 3, 9, 8, 4, 3, 2, {2, 2}, {0, 0}, {0, 0}, {1, 1}, 1},    /* stride 2, no padding */
  {1, 2, 8, 8, 3, 3, 3, {1, 1}, {2, 2}, {0, 0}, {2, 2}, 1},    /* dilation */
  {2, 4, 6, 6, 6, 3, 3, {1, 2}, {1, 0}, {0, 0}, {1, 1}, 2},    /* groups, per-dim stride and padding */
  {1, 5, 6, 7, 5, 3, 3, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 5},    /* depthwise */
  {1, 3, 5, 5, 6, 3, 3, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 3},    /* depthwise, 2 outputs per channel */
  {2, 6, 4, 5, 3, 1, 1, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 1},    /* 1x1 */
  {1, 2, 2, 3, 3, 5, 5, {1, 1}, {2, 2}, {0, 0}, {1, 1}, 1},    /* kernel larger than the input */
  {1, 2, 9, 9, 3, 2, 2, {3, 3}, {0, 1}, {0, 0}, {1, 1}, 1},    /* stride past the kernel */
  {0, 3, 6, 5, 4, 3, 3, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},    /* unbatched */
  {2, 16, 20, 19, 40, 3, 3, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}, /* several panels and row blocks */
  {1, 240, 4, 4, 2, 3, 3, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},  /* depth 2160: several depth blocks */
};

static const ref_conv transposed[] = {
  {2, 4, 5, 4, 3, 3, 3, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1},
  {1, 4, 4, 5, 6, 3, 2, {1, 2}, {0, 1}, {0, 1}, {2, 1}, 2},    /* groups, dilation, per-dim arguments */
  {0, 3, 3, 3, 2, 4, 4, {3, 3}, {0, 0}, {2, 0}, {1, 1}, 1},    /* unbatched, stride past the kernel */
  {1, 2, 6, 6, 2, 2, 2, {2, 2}, {2, 2}, {0, 0}, {1, 1}, 1},    /* padding past the kernel: it crops */
  {1, 4, 5, 5, 4, 3, 3, {2, 2}, {1, 1}, {0, 0}, {1, 1}, 4},    /* depthwise */
  {1, 3, 1, 1, 2, 3, 3, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 1},    /* a 1x1 input */
};

static const double *values(kiln_tensor *t) {
  const double *v = kiln_data(kiln_cast(t, KILN_F64));
  ck_assert_msg(v, "%s", kiln_last_error());
  return v;
}

/* The input of q in dtype dt; strided: a transposed view of (N, H, C, W). */
static kiln_tensor *conv_input(const ref_conv *q, kiln_dtype dt, bool strided) {
  int64_t n = q->n ? q->n : 1;
  kiln_tensor *x = strided ? kiln_transpose(tu_data(dt, KILN_SHAPE(n, q->h, q->c, q->w), 60, TU_SMALL), 1, 2)
                           : tu_data(dt, KILN_SHAPE(n, q->c, q->h, q->w), 60, TU_SMALL);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  return q->n ? x : kiln_squeeze_dim(x, 0);
}

/* Realizes kiln's convolution of q (mode: 0 fused, 1 eager) and compares
 * it with the oracle's; strided inputs every other run. */
static void check_conv(const ref_conv *q, bool is_transposed, kiln_dtype dt, int eager, bool strided) {
  kiln_set_eager(eager);
  kiln_scope_begin();
  int64_t n = q->n ? q->n : 1, out[2], cw = is_transposed ? q->c : q->o, ow = is_transposed ? q->o / q->g : q->c / q->g;
  ref_conv_out(q, is_transposed, out);
  kiln_tensor *x = conv_input(q, dt, strided);
  kiln_tensor *w = tu_data(dt, KILN_SHAPE(cw, ow, q->kh, q->kw), 61, TU_SMALL), *b = tu_data(dt, KILN_SHAPE(q->o), 62, TU_SMALL);
  kiln_tensor *y = is_transposed ? kiln_conv_transpose2d(x, w, b, 2, q->s, 2, q->p, 2, q->op, q->g, 2, q->d)
                                 : kiln_conv2d(x, w, b, 2, q->s, 2, q->p, 2, q->d, q->g);
  ck_assert_msg(kiln_status_of(y) == KILN_OK, "%s", kiln_last_error());
  ck_assert_int_eq(kiln_ndim(y), q->n ? 4 : 3);
  ck_assert_int_eq(kiln_shape(y)[kiln_ndim(y) - 1], out[1]);
  const double *got = values(y);
  int64_t total = n * q->o * out[0] * out[1];
  double *want = malloc(sizeof *want * (size_t)total);
  ref_conv batch = *q;
  batch.n = n;
  (is_transposed ? ref_conv_transpose2d : ref_conv2d)(&batch, values(x), values(w), values(b), want);
  double tol = dt == KILN_F64 ? 1e-12 : 1e-4;
  for (int64_t k = 0; k < total; k++)
    ck_assert_msg(fabs(got[k] - want[k]) <= tol * (1 + fabs(want[k])), "%s %s%s element %lld: got %.9g want %.9g",
                  eager ? "eager" : "fused", strided ? "strided " : "", kiln_dtype_name(dt), (long long)k, got[k], want[k]);
  free(want);
  kiln_scope_end();
  kiln_set_eager(0);
}

/* Case i fused in one dtype and eager in the other, the input strided in
 * every other case: each is compiled for its shapes, and compiles are what
 * a test pays for, so the cases share out f32 and f64, fused and eager. */
static void check_all(const ref_conv *q, bool is_transposed, int i) {
  static const kiln_dtype dts[] = {KILN_F32, KILN_F64};
  for (int eager = 0; eager < 2; eager++) check_conv(q, is_transposed, dts[(i + eager) % 2], eager, i % 2 == 1);
}

START_TEST(conv2d_values) { check_all(&convs[_i], false, _i); }
END_TEST

START_TEST(conv_transpose2d_values) { check_all(&transposed[_i], true, _i); }
END_TEST

/* ---- the graph oracle: ref_eval's UNFOLD, fused and eager --------------------- */
static kiln_tensor *build_conv_relu(const void *ctx) {
  (void)ctx;
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(2, 3, 7, 6), 63, TU_SMALL);
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(4, 3, 3, 3), 64, TU_SMALL), *b = tu_data(KILN_F32, KILN_SHAPE(4), 65, TU_SMALL);
  return kiln_relu(kiln_conv2d(x, w, b, 1, (int64_t[]){2}, 1, (int64_t[]){1}, 0, NULL, 1));
}

static kiln_tensor *build_transposed(const void *ctx) {
  (void)ctx;
  kiln_tensor *x = tu_data(KILN_F64, KILN_SHAPE(1, 4, 4, 3), 66, TU_SMALL);
  kiln_tensor *w = tu_data(KILN_F64, KILN_SHAPE(4, 3, 3, 2), 67, TU_SMALL);
  return kiln_conv_transpose2d(x, w, NULL, 1, (int64_t[]){2}, 1, (int64_t[]){1}, 1, (int64_t[]){1}, 2, 0, NULL);
}

/* An input that is no strided view (a cat): stored, then read through the window. */
static kiln_tensor *build_cat_input(const void *ctx) {
  (void)ctx;
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(2, 2, 5, 6), 80, TU_SMALL), *b = tu_data(KILN_F32, KILN_SHAPE(2, 1, 5, 6), 81, TU_SMALL);
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(4, 3, 2, 3), 82, TU_SMALL);
  kiln_tensor *parts[] = {a, b};
  return kiln_conv2d(kiln_cat(2, parts, 1), w, NULL, 1, (int64_t[]){1}, 1, (int64_t[]){1}, 1, (int64_t[]){2}, 1);
}

START_TEST(graph_oracle) {
  char why[512];
  kiln_scope_begin();
  ck_assert_msg(tu_check_fused_eager(build_conv_relu, NULL, KILN_F32, (ref_tol){1e-5, 1e-6}, why, sizeof why), "%s", why);
  ck_assert_msg(tu_check_fused_eager(build_transposed, NULL, KILN_F64, (ref_tol){1e-12, 1e-12}, why, sizeof why), "%s", why);
  ck_assert_msg(tu_check_fused_eager(build_cat_input, NULL, KILN_F32, (ref_tol){1e-5, 1e-6}, why, sizeof why), "%s", why);
  kiln_scope_end();
}
END_TEST

/* ---- kernels ------------------------------------------------------------------ */
/* Kernels launched for the epilogue e (0: bias + relu, 1: + gelu, 2: a
 * residual add then relu, 3: batch norm then relu, 4: relu of a transposed
 * convolution, 5: relu of a depthwise one, 2 outputs per channel) of a
 * convolution of realized inputs. */
static uint64_t conv_kernels(int e) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(2, 8, 10, 10), 68, TU_SMALL), *r = tu_data(KILN_F32, KILN_SHAPE(2, 16, 10, 10), 69, TU_SMALL);
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(16, 8, 3, 3), 70, TU_SMALL), *b = tu_data(KILN_F32, KILN_SHAPE(16), 71, TU_SMALL);
  kiln_tensor *wt = tu_data(KILN_F32, KILN_SHAPE(8, 16, 3, 3), 72, TU_SMALL), *wd = tu_data(KILN_F32, KILN_SHAPE(16, 1, 3, 3), 75, TU_SMALL);
  kiln_tensor *mean = tu_data(KILN_F32, KILN_SHAPE(16), 73, TU_SMALL), *var = kiln_abs(tu_data(KILN_F32, KILN_SHAPE(16), 74, TU_SMALL));
  kiln_tensor *in[] = {x, r, w, b, wt, wd, mean, var};
  ck_assert_int_eq(kiln_realize_n(8, in), KILN_OK);
  static const int64_t one[] = {1};
  kiln_tensor *y = e == 4 ? kiln_conv_transpose2d(x, wt, b, 1, (int64_t[]){2}, 1, one, 1, one, 1, 0, NULL)
                          : kiln_conv2d(x, e == 5 ? wd : w, e == 3 ? NULL : b, 1, one, 1, one, 0, NULL, e == 5 ? 8 : 1);
  y = e == 1 ? kiln_gelu(y) : e == 2 ? kiln_add(y, r) : e == 3 ? kiln_batch_norm(y, mean, var, b, b, 1e-5) : y;
  y = kiln_relu(y);
  uint64_t k = tu_kernels_of(y);
  ck_assert_msg(kiln_status_of(y) == KILN_OK, "%s", kiln_last_error());
  kiln_scope_end();
  return k;
}

/* conv + bias + relu, + gelu, + a residual, a batch norm's scale and shift:
 * one kernel, the implicit GEMM with its epilogue (no im2col is stored); a
 * depthwise one too (its windowed reduction). A transposed convolution adds
 * one small kernel: its flipped weight. */
START_TEST(epilogue_kernels) {
  for (int e = 0; e < 6; e++) {
    if (e == 4) continue;
    uint64_t k = conv_kernels(e);
    ck_assert_msg(k == 1, "epilogue %d: %llu kernels", e, (unsigned long long)k);
  }
  ck_assert_uint_eq(conv_kernels(4), 2);
}
END_TEST

/* ---- the reshaped epilogue (fuse.c's reshaped_epilogue) ------------------------ */
/* relu(reshape(a @ b) + reshape(exp(z)) + reshape(exp(v))): z has the
 * product's shape, v another; case 1 reshapes the product twice. */
static kiln_tensor *build_reshaped(const void *ctx) {
  int twice = *(const int *)ctx;
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(6, 8), 76, TU_SMALL), *b = tu_data(KILN_F32, KILN_SHAPE(8, 10), 77, TU_SMALL);
  kiln_tensor *z = tu_data(KILN_F32, KILN_SHAPE(6, 10), 78, TU_SMALL), *v = tu_data(KILN_F32, KILN_SHAPE(60), 79, TU_SMALL);
  kiln_tensor *p = kiln_reshape(kiln_matmul(a, b), KILN_SHAPE(3, 20));
  if (twice) p = kiln_reshape(kiln_reshape(p, KILN_SHAPE(60)), KILN_SHAPE(3, 20));
  kiln_tensor *e = kiln_add(kiln_reshape(kiln_exp(z), KILN_SHAPE(3, 20)), kiln_reshape(kiln_exp(v), KILN_SHAPE(3, 20)));
  return kiln_relu(kiln_add(p, e));
}

/* One reshape on the way to the outputs keeps the epilogue (one kernel),
 * two end it (the product is stored); both against the graph oracle. */
START_TEST(reshaped_epilogue) {
  char why[512];
  for (int twice = 0; twice < 2; twice++) {
    kiln_scope_begin();
    ck_assert_msg(tu_check_fused_eager(build_reshaped, &twice, KILN_F32, (ref_tol){1e-5, 1e-6}, why, sizeof why), "%s", why);
    ck_assert_uint_eq(tu_kernels_of(build_reshaped(&twice)), twice ? 2 : 1);
    kiln_scope_end();
  }
}
END_TEST

/* ---- errors --------------------------------------------------------------------- */
START_TEST(transpose_errors) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_SHAPE(1, 4, 5, 5), KILN_F32), *w = kiln_zeros(KILN_SHAPE(4, 2, 3, 3), KILN_F32);
  const int64_t one[] = {1}, two[] = {2}, three[] = {1, 2, 3}, neg[] = {-1};
  TU_EXPECT_ERROR(kiln_conv_transpose2d(x, w, NULL, 0, NULL, 0, NULL, 0, NULL, 3, 0, NULL), KILN_ERR_SHAPE,
                  "conv_transpose2d: groups=3, weight of size (4,2,3,3), input of size (1,4,5,5): groups must be "
                  "positive and divide the input channels");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(kiln_zeros(KILN_SHAPE(1, 3, 5, 5), KILN_F32), w, NULL, 0, NULL, 0, NULL, 0, NULL, 1, 0, NULL),
                  KILN_ERR_SHAPE, "conv_transpose2d: groups=1, weight of size (4,2,3,3), input of size (1,3,5,5): the "
                  "input's channels must be the weight's dim 0");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(x, w, kiln_zeros(KILN_SHAPE(4), KILN_F32), 0, NULL, 0, NULL, 0, NULL, 1, 0, NULL),
                  KILN_ERR_SHAPE, "conv_transpose2d: groups=1, weight of size (4,2,3,3), input of size (1,4,5,5): the "
                  "bias must have one value per output channel");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(kiln_zeros(KILN_SHAPE(4, 5), KILN_F32), w, NULL, 0, NULL, 0, NULL, 0, NULL, 1, 0, NULL),
                  KILN_ERR_SHAPE, "conv_transpose2d: groups=1, weight of size (4,2,3,3), input of size (4,5): expected "
                  "a 3-D (C, H, W) or 4-D (N, C, H, W) input");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(x, w, NULL, 1, one, 0, NULL, 1, one, 1, 0, NULL), KILN_ERR_ARG,
                  "conv_transpose2d: output padding must be smaller than either stride or dilation, but got "
                  "output_padding=1, stride=1 and dilation=1");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(x, w, NULL, 3, three, 0, NULL, 0, NULL, 1, 0, NULL), KILN_ERR_ARG,
                  "conv_transpose2d: stride, padding, output_padding and dilation take 1 or 2 values");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(x, w, NULL, 1, two, 1, neg, 0, NULL, 1, 0, NULL), KILN_ERR_ARG,
                  "conv_transpose2d: stride and dilation must be positive and padding and output_padding "
                  "non-negative, got stride (2, 2), padding (-1, -1), output_padding (0, 0), dilation (1, 1)");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(kiln_zeros(KILN_SHAPE(1, 4, 1, 1), KILN_F32), w, NULL, 0, NULL, 1, two, 0, NULL, 1, 0, NULL),
                  KILN_ERR_SHAPE, "conv_transpose2d: input of shape (1,4,1,1): the output size is too small");
  TU_EXPECT_ERROR(kiln_conv_transpose2d(kiln_zeros(KILN_SHAPE(1, 4, 5, 5), KILN_I64), w, NULL, 0, NULL, 0, NULL, 0, NULL, 1, 0, NULL),
                  KILN_ERR_DTYPE, "conv_transpose2d: expected input, weight and bias of one floating dtype, got int64 "
                  "and float32");
  kiln_scope_end();
}
END_TEST

static Suite *conv_suite(void) {
  Suite *s = suite_create("conv");
  tcase_add_loop_test(tu_tcase(s, "conv2d"), conv2d_values, 0, (int)(sizeof convs / sizeof *convs));
  tcase_add_loop_test(tu_tcase(s, "transposed"), conv_transpose2d_values, 0, (int)(sizeof transposed / sizeof *transposed));
  tcase_add_test(tu_tcase(s, "oracle"), graph_oracle);
  tcase_add_test(tu_tcase(s, "kernels"), epilogue_kernels);
  tcase_add_test(tu_tcase(s, "kernels"), reshaped_epilogue);
  tcase_add_test(tu_tcase(s, "errors"), transpose_errors);
  return s;
}

KILN_TEST_MAIN(conv_suite)
