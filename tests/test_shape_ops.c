/* test_shape_ops.c: the shape ops (tril/triu, pad modes, split/chunk/unbind,
 * repeat/tile/repeat_interleave, roll, diagonal/diag, one_hot) and the
 * products (outer, cross, einsum): hand-worked values and a naive einsum of
 * the test's own, every dtype fused and eager against the reference
 * evaluator, non-contiguous, 0-size and size-1 inputs, no copy kernels, the
 * GEMM einsum shares with matmul, and error paths with message and line. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

#define SCALAR 0, (const int64_t *)NULL   /* the shape of a 0-dim result */

/* x[i][j] = 4i + j, float64 (3, 4). */
static kiln_tensor *x34(void) { return kiln_reshape(kiln_cast(kiln_arange(0, 12, 1), KILN_F64), KILN_SHAPE(3, 4)); }
static kiln_tensor *vec(int n, const double *v) { return kiln_from_data(v, KILN_F64, KILN_SHAPE(n)); }

/* ---- values ------------------------------------------------------------------ */
START_TEST(triangles) {
  kiln_scope_begin();
  kiln_tensor *x = x34();
  TU_EXPECT(kiln_tril(x, 0), KILN_SHAPE(3, 4), 0, 0, 0, 0, 0, 4, 5, 0, 0, 8, 9, 10, 0);
  TU_EXPECT(kiln_tril(x, -1), KILN_SHAPE(3, 4), 0, 0, 0, 0, 0, 4, 0, 0, 0, 8, 9, 0, 0);
  TU_EXPECT(kiln_triu(x, 1), KILN_SHAPE(3, 4), 0, 0, 1, 2, 3, 0, 0, 6, 7, 0, 0, 0, 11);
  TU_EXPECT(kiln_triu(x, -5), KILN_SHAPE(3, 4), 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
  /* NaN outside the triangle becomes 0; batches; a transposed input */
  kiln_tensor *n = kiln_from_data((float[]){1, NAN, 2, 3}, KILN_F32, KILN_SHAPE(2, 2));
  TU_EXPECT(kiln_tril(n, 0), KILN_SHAPE(2, 2), 0, 1, 0, 2, 3);
  kiln_tensor *b = kiln_reshape(kiln_arange(0, 8, 1), KILN_SHAPE(2, 2, 2));
  TU_EXPECT(kiln_triu(b, 0), KILN_SHAPE(2, 2, 2), 0, 0, 1, 0, 3, 4, 5, 0, 7);
  TU_EXPECT(kiln_tril(kiln_T(x), 0), KILN_SHAPE(4, 3), 0, 0, 0, 0, 1, 5, 0, 2, 6, 10, 3, 7, 11);
  ck_assert_int_eq(kiln_dtype_of(kiln_tril(b, 0)), KILN_I64);
  TU_EXPECT(kiln_tril(kiln_zeros(KILN_SHAPE(0, 3), KILN_F32), 0), KILN_SHAPE(0, 3), 0, 0);
  kiln_scope_end();
}
END_TEST

START_TEST(pads) {
  kiln_scope_begin();
  kiln_tensor *v = vec(4, (double[]){1, 2, 3, 4});
  TU_EXPECT(kiln_pad_reflect(v, KILN_SHAPE(2, 1)), KILN_SHAPE(7), 0, 3, 2, 1, 2, 3, 4, 3);
  TU_EXPECT(kiln_pad_replicate(v, KILN_SHAPE(2, 1)), KILN_SHAPE(7), 0, 1, 1, 1, 2, 3, 4, 4);
  TU_EXPECT(kiln_pad_circular(v, KILN_SHAPE(2, 1)), KILN_SHAPE(7), 0, 3, 4, 1, 2, 3, 4, 1);
  TU_EXPECT(kiln_pad_circular(v, KILN_SHAPE(4, 0)), KILN_SHAPE(8), 0, 1, 2, 3, 4, 1, 2, 3, 4);
  /* negative amounts crop first */
  TU_EXPECT(kiln_pad_replicate(v, KILN_SHAPE(-1, 2)), KILN_SHAPE(5), 0, 2, 3, 4, 4, 4);
  TU_EXPECT(kiln_pad_reflect(v, KILN_SHAPE(1, -2)), KILN_SHAPE(3), 0, 2, 1, 2);
  /* two dims: the corners are the reflection of the reflection */
  TU_EXPECT(kiln_pad_reflect(x34(), KILN_SHAPE(1, 1, 1, 0)), KILN_SHAPE(4, 6), 0,
            5, 4, 5, 6, 7, 6, 1, 0, 1, 2, 3, 2, 5, 4, 5, 6, 7, 6, 9, 8, 9, 10, 11, 10);
  TU_EXPECT(kiln_pad_replicate(kiln_T(x34()), KILN_SHAPE(0, 1, 1, 0)), KILN_SHAPE(5, 4), 0,
            0, 4, 8, 8, 0, 4, 8, 8, 1, 5, 9, 9, 2, 6, 10, 10, 3, 7, 11, 11);
  TU_EXPECT(kiln_pad_circular(v, KILN_SHAPE(0, 0)), KILN_SHAPE(4), 0, 1, 2, 3, 4);
  kiln_scope_end();
}
END_TEST

START_TEST(pieces) {
  kiln_scope_begin();
  kiln_tensor *v = kiln_arange(0, 5, 1), *out[8];
  ck_assert_int_eq(kiln_split(v, 2, 0, 8, out), 3);
  TU_EXPECT(out[0], KILN_SHAPE(2), 0, 0, 1);
  TU_EXPECT(out[2], KILN_SHAPE(1), 0, 4);
  ck_assert_int_eq(kiln_split(v, 2, -1, 1, out), 3);   /* the count may exceed max_out */
  ck_assert_int_eq(kiln_split(v, 9, 0, 8, out), 1);
  TU_EXPECT(out[0], KILN_SHAPE(5), 0, 0, 1, 2, 3, 4);
  ck_assert_int_eq(kiln_split_sizes(v, KILN_SHAPE(1, 0, 4), 0, 8, out), 3);
  TU_EXPECT(out[1], KILN_SHAPE(0), 0, 0);
  TU_EXPECT(out[2], KILN_SHAPE(4), 0, 1, 2, 3, 4);
  ck_assert_int_eq(kiln_chunk(v, 3, 0, 8, out), 3);
  TU_EXPECT(out[2], KILN_SHAPE(1), 0, 4);
  ck_assert_int_eq(kiln_chunk(kiln_arange(0, 6, 1), 4, 0, 8, out), 3);   /* torch: pieces of 2 */
  TU_EXPECT(out[2], KILN_SHAPE(2), 0, 4, 5);
  ck_assert_int_eq(kiln_chunk(kiln_zeros(KILN_SHAPE(0, 2), KILN_F32), 3, 0, 8, out), 3);
  TU_EXPECT(out[2], KILN_SHAPE(0, 2), 0, 0);
  ck_assert_int_eq(kiln_split(kiln_zeros(KILN_SHAPE(2, 0), KILN_F32), 0, 1, 8, out), 1);
  ck_assert_int_eq(kiln_unbind(x34(), 1, 8, out), 4);
  TU_EXPECT(out[3], KILN_SHAPE(3), 0, 3, 7, 11);
  ck_assert_int_eq(kiln_unbind(kiln_T(x34()), -1, 8, out), 3);
  TU_EXPECT(out[1], KILN_SHAPE(4), 0, 4, 5, 6, 7);
  ck_assert_int_eq(kiln_split(kiln_T(x34()), 3, 0, 8, out), 2);
  TU_EXPECT(out[1], KILN_SHAPE(1, 3), 0, 3, 7, 11);
  kiln_scope_end();
}
END_TEST

START_TEST(repeats) {
  kiln_scope_begin();
  kiln_tensor *v = vec(2, (double[]){1, 2});
  kiln_tensor *m = kiln_from_data((double[]){1, 2, 3, 4}, KILN_F64, KILN_SHAPE(2, 2));
  TU_EXPECT(kiln_repeat(v, KILN_SHAPE(2, 2)), KILN_SHAPE(2, 4), 0, 1, 2, 1, 2, 1, 2, 1, 2);
  TU_EXPECT(kiln_repeat(m, KILN_SHAPE(2, 1)), KILN_SHAPE(4, 2), 0, 1, 2, 3, 4, 1, 2, 3, 4);
  TU_EXPECT(kiln_repeat(m, KILN_SHAPE(1, 0)), KILN_SHAPE(2, 0), 0, 0);
  TU_EXPECT(kiln_tile(v, KILN_SHAPE(2)), KILN_SHAPE(4), 0, 1, 2, 1, 2);
  TU_EXPECT(kiln_tile(m, KILN_SHAPE(2)), KILN_SHAPE(2, 4), 0, 1, 2, 1, 2, 3, 4, 3, 4);
  TU_EXPECT(kiln_tile(v, KILN_SHAPE(2, 1)), KILN_SHAPE(2, 2), 0, 1, 2, 1, 2);
  TU_EXPECT(kiln_repeat_interleave(m, 2), KILN_SHAPE(8), 0, 1, 1, 2, 2, 3, 3, 4, 4);
  TU_EXPECT(kiln_repeat_interleave_dim(m, 2, 0), KILN_SHAPE(4, 2), 0, 1, 2, 1, 2, 3, 4, 3, 4);
  TU_EXPECT(kiln_repeat_interleave_dim(kiln_T(m), 2, -1), KILN_SHAPE(2, 4), 0, 1, 1, 3, 3, 2, 2, 4, 4);
  TU_EXPECT(kiln_repeat_interleave(kiln_scalar(7, KILN_I32), 3), KILN_SHAPE(3), 0, 7, 7, 7);
  /* every one of KILN_MAX_DIMS dims repeated: one dim at a time */
  kiln_tensor *w = kiln_reshape(kiln_arange(0, 2, 1), KILN_SHAPE(1, 1, 1, 1, 1, 1, 1, 2));
  TU_EXPECT(kiln_repeat(w, KILN_SHAPE(1, 1, 1, 1, 1, 1, 2, 2)), KILN_SHAPE(1, 1, 1, 1, 1, 1, 2, 4), 0, 0, 1, 0, 1, 0, 1, 0, 1);
  TU_EXPECT(kiln_sum(kiln_repeat(w, KILN_SHAPE(2, 2, 2, 2, 2, 2, 2, 2))), SCALAR, 0, 128 * 2);
  kiln_scope_end();
}
END_TEST

START_TEST(rolls) {
  kiln_scope_begin();
  kiln_tensor *x = x34();
  TU_EXPECT(kiln_roll(kiln_arange(0, 5, 1), KILN_SHAPE(2), 0, NULL), KILN_SHAPE(5), 0, 3, 4, 0, 1, 2);
  TU_EXPECT(kiln_roll(x, KILN_SHAPE(1, -1), KILN_DIMS(0, 1)), KILN_SHAPE(3, 4), 0, 9, 10, 11, 8, 1, 2, 3, 0, 5, 6, 7, 4);
  TU_EXPECT(kiln_roll(x, KILN_SHAPE(1), 0, NULL), KILN_SHAPE(3, 4), 0, 11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10);
  TU_EXPECT(kiln_roll(x, KILN_SHAPE(-9), KILN_DIMS(-1)), KILN_SHAPE(3, 4), 0, 1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8);
  TU_EXPECT(kiln_roll(kiln_T(x), KILN_SHAPE(3), KILN_DIMS(0)), KILN_SHAPE(4, 3), 0, 1, 5, 9, 2, 6, 10, 3, 7, 11, 0, 4, 8);
  TU_EXPECT(kiln_roll(kiln_zeros(KILN_SHAPE(0), KILN_F32), KILN_SHAPE(3), KILN_DIMS(0)), KILN_SHAPE(0), 0, 0);
  kiln_scope_end();
}
END_TEST

START_TEST(diagonals) {
  kiln_scope_begin();
  kiln_tensor *x = x34();
  TU_EXPECT(kiln_diagonal(x, 0, 0, 1), KILN_SHAPE(3), 0, 0, 5, 10);
  TU_EXPECT(kiln_diagonal(x, 1, 0, 1), KILN_SHAPE(3), 0, 1, 6, 11);
  TU_EXPECT(kiln_diagonal(x, 2, 0, 1), KILN_SHAPE(2), 0, 2, 7);
  TU_EXPECT(kiln_diagonal(x, -1, 0, 1), KILN_SHAPE(2), 0, 4, 9);
  TU_EXPECT(kiln_diagonal(x, 5, 0, 1), KILN_SHAPE(0), 0, 0);
  TU_EXPECT(kiln_diagonal(x, 0, 1, 0), KILN_SHAPE(3), 0, 0, 5, 10);
  TU_EXPECT(kiln_diagonal(kiln_T(x), -1, 0, 1), KILN_SHAPE(3), 0, 1, 6, 11);
  /* (2,3,4): A[d][j][d] along the last dim, j kept */
  kiln_tensor *a = kiln_reshape(kiln_arange(0, 24, 1), KILN_SHAPE(2, 3, 4));
  TU_EXPECT(kiln_diagonal(a, 0, 0, -1), KILN_SHAPE(3, 2), 0, 0, 13, 4, 17, 8, 21);
  TU_EXPECT(kiln_diag(vec(3, (double[]){1, 2, 3}), 0), KILN_SHAPE(3, 3), 0, 1, 0, 0, 0, 2, 0, 0, 0, 3);
  TU_EXPECT(kiln_diag(vec(2, (double[]){1, 2}), 1), KILN_SHAPE(3, 3), 0, 0, 1, 0, 0, 0, 2, 0, 0, 0);
  TU_EXPECT(kiln_diag(vec(2, (double[]){1, NAN}), -1), KILN_SHAPE(3, 3), 0, 0, 0, 0, 1, 0, 0, 0, NAN, 0);
  TU_EXPECT(kiln_diag(x, -2), KILN_SHAPE(1), 0, 8);
  TU_EXPECT(kiln_diag(kiln_zeros(KILN_SHAPE(0), KILN_F32), 0), KILN_SHAPE(0, 0), 0, 0);
  TU_EXPECT(kiln_trace(x), SCALAR, 0, 15);
  ck_assert_int_eq(kiln_dtype_of(kiln_trace(kiln_ones(KILN_SHAPE(2, 2), KILN_I32))), KILN_I64);
  TU_EXPECT(kiln_trace(kiln_zeros(KILN_SHAPE(0, 3), KILN_F32)), SCALAR, 0, 0);
  kiln_scope_end();
}
END_TEST

START_TEST(one_hots) {
  kiln_scope_begin();
  kiln_tensor *i = kiln_from_data((int64_t[]){0, 2, 1}, KILN_I64, KILN_SHAPE(3));
  kiln_tensor *h = kiln_one_hot(i, 4);
  ck_assert_int_eq(kiln_dtype_of(h), KILN_I64);
  TU_EXPECT(h, KILN_SHAPE(3, 4), 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0);
  TU_EXPECT(kiln_one_hot(i, -1), KILN_SHAPE(3, 3), 0, 1, 0, 0, 0, 0, 1, 0, 1, 0);
  TU_EXPECT(kiln_one_hot(kiln_reshape(i, KILN_SHAPE(3, 1)), 0), KILN_SHAPE(3, 1, 0), 0, 0);
  TU_EXPECT(kiln_one_hot(kiln_T(kiln_reshape(i, KILN_SHAPE(1, 3))), 3), KILN_SHAPE(3, 1, 3), 0, 1, 0, 0, 0, 0, 1, 0, 1, 0);
  kiln_scope_end();
}
END_TEST

START_TEST(outer_cross) {
  kiln_scope_begin();
  TU_EXPECT(kiln_outer(vec(2, (double[]){1, 2}), vec(3, (double[]){3, 4, 5})), KILN_SHAPE(2, 3), 0, 3, 4, 5, 6, 8, 10);
  kiln_tensor *o = kiln_outer(kiln_arange(1, 3, 1), kiln_from_data((float[]){0.5f}, KILN_F32, KILN_SHAPE(1)));
  ck_assert_int_eq(kiln_dtype_of(o), KILN_F32);
  TU_EXPECT(o, KILN_SHAPE(2, 1), 0, 0.5, 1);
  TU_EXPECT(kiln_cross(vec(3, (double[]){1, 0, 0}), vec(3, (double[]){0, 1, 0}), -1), KILN_SHAPE(3), 0, 0, 0, 1);
  kiln_tensor *a = kiln_from_data((double[]){1, 2, 3}, KILN_F64, KILN_SHAPE(1, 3));
  kiln_tensor *b = kiln_from_data((double[]){4, 5, 6, 7, 8, 9}, KILN_F64, KILN_SHAPE(2, 3));
  TU_EXPECT(kiln_cross(a, b, 1), KILN_SHAPE(2, 3), 0, -3, 6, -3, -6, 12, -6);
  TU_EXPECT(kiln_cross(kiln_T(b), kiln_T(a), 0), KILN_SHAPE(3, 2), 0, 3, 6, -6, -12, 3, 6);
  kiln_scope_end();
}
END_TEST

/* ---- einsum against a naive evaluator of the test's own ----------------------- */
/* Explicit letter-only equations: every assignment of the subscripts, the
 * product of the operands' elements added into the output's. */
typedef struct {
  int n;
  const char *sub[4];
  const double *data[4];
  const char *out;
} naive_eq;

static int64_t naive_offset(const char *s, const int64_t *val, const int64_t *size) {
  int64_t off = 0;
  for (; *s; s++) off = off * size[(int)*s] + val[(int)*s];
  return off;
}

static void naive_einsum(const naive_eq *q, const int64_t *size, double *out, int64_t nout) {
  char letters[64] = {0};
  int nl = 0;
  for (int i = 0; i < q->n; i++)
    for (const char *s = q->sub[i]; *s; s++)
      if (!strchr(letters, *s)) letters[nl++] = *s;
  memset(out, 0, (size_t)nout * sizeof *out);
  int64_t val[128] = {0};
  for (;;) {
    double p = 1;
    for (int i = 0; i < q->n; i++) p *= q->data[i][naive_offset(q->sub[i], val, size)];
    out[naive_offset(q->out, val, size)] += p;
    int k = nl - 1;
    while (k >= 0 && ++val[(int)letters[k]] == size[(int)letters[k]]) val[(int)letters[k--]] = 0;
    if (k < 0) return;
  }
}

static double data_a[64], data_b[64], data_c[64];

static void check_einsum(const char *eq, const naive_eq *q, int n, const int64_t *const *shapes, const int *ndims,
                         const int64_t *size, int nout, const int64_t *out_shape, int line) {
  kiln_tensor *ops[4];
  const double *data[3] = {data_a, data_b, data_c};
  for (int i = 0; i < n; i++) ops[i] = kiln_from_data(data[i], KILN_F64, ndims[i], shapes[i]);
  double want[64];
  int64_t total = 1;
  for (int d = 0; d < nout; d++) total *= out_shape[d];
  naive_einsum(q, size, want, total);
  tu_expect_values(kiln_einsum(eq, n, ops), nout, out_shape, want, 1e-12, __FILE__, line);
}

START_TEST(einsum_values) {
  for (int i = 0; i < 64; i++) data_a[i] = i % 7 - 3, data_b[i] = (i * 5) % 11 - 5, data_c[i] = i % 3 + 1;
  int64_t size[128] = {0};
  size['b'] = 2, size['i'] = 3, size['j'] = 4, size['k'] = 2;
  kiln_scope_begin();
  naive_eq mm = {2, {"ij", "jk"}, {data_a, data_b}, "ik"};
  check_einsum("ij,jk->ik", &mm, 2, (const int64_t *[]){(int64_t[]){3, 4}, (int64_t[]){4, 2}}, (int[]){2, 2}, size, 2,
               (int64_t[]){3, 2}, __LINE__);
  check_einsum(" i j , j k ", &mm, 2, (const int64_t *[]){(int64_t[]){3, 4}, (int64_t[]){4, 2}}, (int[]){2, 2}, size, 2,
               (int64_t[]){3, 2}, __LINE__);   /* implicit output: i, k */
  naive_eq bmm = {2, {"bij", "bjk"}, {data_a, data_b}, "bik"};
  check_einsum("bij,bjk->bik", &bmm, 2, (const int64_t *[]){(int64_t[]){2, 3, 4}, (int64_t[]){2, 4, 2}}, (int[]){3, 3},
               size, 3, (int64_t[]){2, 3, 2}, __LINE__);
  check_einsum("...ij,...jk", &bmm, 2, (const int64_t *[]){(int64_t[]){2, 3, 4}, (int64_t[]){2, 4, 2}}, (int[]){3, 3},
               size, 3, (int64_t[]){2, 3, 2}, __LINE__);
  naive_eq perm = {1, {"bij"}, {data_a}, "jbi"};
  check_einsum("bij->jbi", &perm, 1, (const int64_t *[]){(int64_t[]){2, 3, 4}}, (int[]){3}, size, 3,
               (int64_t[]){4, 2, 3}, __LINE__);
  naive_eq red = {1, {"bij"}, {data_a}, "j"};
  check_einsum("bij->j", &red, 1, (const int64_t *[]){(int64_t[]){2, 3, 4}}, (int[]){3}, size, 1, (int64_t[]){4}, __LINE__);
  naive_eq dot = {2, {"ij", "ij"}, {data_a, data_b}, ""};
  check_einsum("ij,ij->", &dot, 2, (const int64_t *[]){(int64_t[]){3, 4}, (int64_t[]){3, 4}}, (int[]){2, 2}, size, 0,
               NULL, __LINE__);
  naive_eq outer = {2, {"i", "j"}, {data_a, data_b}, "ij"};
  check_einsum("i,j", &outer, 2, (const int64_t *[]){(int64_t[]){3}, (int64_t[]){4}}, (int[]){1, 1}, size, 2,
               (int64_t[]){3, 4}, __LINE__);
  naive_eq three = {3, {"bi", "kij", "bj"}, {data_a, data_b, data_c}, "bk"};
  check_einsum("bi,kij,bj->bk", &three, 3,
               (const int64_t *[]){(int64_t[]){2, 3}, (int64_t[]){2, 3, 4}, (int64_t[]){2, 4}}, (int[]){2, 3, 2}, size, 2,
               (int64_t[]){2, 2}, __LINE__);
  naive_eq mv = {2, {"ij", "j"}, {data_a, data_b}, "i"};
  check_einsum("ij,j->i", &mv, 2, (const int64_t *[]){(int64_t[]){3, 4}, (int64_t[]){4}}, (int[]){2, 1}, size, 1,
               (int64_t[]){3}, __LINE__);
  /* repeated subscripts: diagonals */
  size['i'] = 3;
  naive_eq tr = {1, {"ii"}, {data_a}, ""};
  check_einsum("ii", &tr, 1, (const int64_t *[]){(int64_t[]){3, 3}}, (int[]){2}, size, 0, NULL, __LINE__);
  naive_eq dg = {1, {"ii"}, {data_a}, "i"};
  check_einsum("ii->i", &dg, 1, (const int64_t *[]){(int64_t[]){3, 3}}, (int[]){2}, size, 1, (int64_t[]){3}, __LINE__);
  naive_eq bd = {2, {"bii", "bi"}, {data_a, data_b}, "b"};
  check_einsum("bii,bi->b", &bd, 2, (const int64_t *[]){(int64_t[]){2, 3, 3}, (int64_t[]){2, 3}}, (int[]){3, 2}, size, 1,
               (int64_t[]){2}, __LINE__);
  kiln_scope_end();
}
END_TEST

/* Broadcasting, integers, mixed dtypes, 0-size, "..." in the middle. */
START_TEST(einsum_kinds) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_reshape(kiln_arange(0, 6, 1), KILN_SHAPE(2, 3));   /* int64 */
  kiln_tensor *b = kiln_reshape(kiln_arange(0, 12, 1), KILN_SHAPE(3, 4));
  kiln_tensor *p = kiln_einsum("ij,jk->ik", 2, (kiln_tensor *[]){a, b});
  ck_assert_int_eq(kiln_dtype_of(p), KILN_I64);
  TU_EXPECT(p, KILN_SHAPE(2, 4), 0, 20, 23, 26, 29, 56, 68, 80, 92);
  kiln_tensor *bf = kiln_cast(b, KILN_F32);
  TU_EXPECT(kiln_einsum("ij,jk", 2, (kiln_tensor *[]){a, bf}), KILN_SHAPE(2, 4), 0, 20, 23, 26, 29, 56, 68, 80, 92);
  /* a size-1 dim broadcasts */
  kiln_tensor *r = kiln_reshape(kiln_cast(kiln_arange(1, 4, 1), KILN_F64), KILN_SHAPE(1, 3));
  TU_EXPECT(kiln_einsum("ij,ij->ij", 2, (kiln_tensor *[]){r, kiln_cast(a, KILN_F64)}), KILN_SHAPE(2, 3), 0,
            0, 2, 6, 3, 8, 15);
  kiln_tensor *c = kiln_reshape(kiln_cast(kiln_arange(0, 24, 1), KILN_F32), KILN_SHAPE(2, 3, 4));
  TU_EXPECT(kiln_einsum("i...j->...", 1, &c), KILN_SHAPE(3), 0, 60, 92, 124);
  TU_EXPECT(kiln_einsum("ij,jk->ik", 2, (kiln_tensor *[]){kiln_zeros(KILN_SHAPE(2, 0), KILN_F32), kiln_zeros(KILN_SHAPE(0, 3), KILN_F32)}),
            KILN_SHAPE(2, 3), 0, 0, 0, 0, 0, 0, 0);
  TU_EXPECT(kiln_einsum("ij->j", 1, (kiln_tensor *[]){kiln_ones(KILN_SHAPE(0, 2), KILN_F32)}), KILN_SHAPE(2), 0, 0, 0);
  /* implicit outputs sort their subscripts, capitals first (torch's order) */
  TU_EXPECT(kiln_einsum("ba", 1, &a), KILN_SHAPE(3, 2), 0, 0, 3, 1, 4, 2, 5);
  TU_EXPECT(kiln_einsum("Ba", 1, &a), KILN_SHAPE(2, 3), 0, 0, 1, 2, 3, 4, 5);
  TU_EXPECT(kiln_einsum("Ab,bA", 2, (kiln_tensor *[]){a, kiln_T(a)}), SCALAR, 0, 55);
  kiln_scope_end();
}
END_TEST

/* "bij,bjk->bik" is matmul's GEMM (compiled once, found again), "ii" one
 * kernel over a strided view. */
START_TEST(einsum_kernels) {
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(4, 8, 16), 1, TU_SMALL), *b = tu_data(KILN_F32, KILN_SHAPE(4, 16, 8), 2, TU_SMALL);
  ck_assert_int_eq(kiln_realize(a), KILN_OK);
  ck_assert_int_eq(kiln_realize(b), KILN_OK);
  kiln_tensor *m = kiln_matmul(a, b);
  ck_assert_int_eq(tu_kernels_of(m), 1);
  kiln_tensor *e = kiln_einsum("bij,bjk->bik", 2, (kiln_tensor *[]){a, b});
  ck_assert_int_eq(tu_kernels_of(e), 1);
  ck_assert_int_eq(kiln_stats().compiles, 0);
  ck_assert_int_eq(kiln_stats().cache_hits, 1);
  kiln_tensor *d = kiln_sub(m, e);
  ck_assert(kiln_item(kiln_max(kiln_abs(d))) == 0);
  kiln_tensor *sq = tu_data(KILN_F32, KILN_SHAPE(64, 64), 3, TU_SMALL);
  ck_assert_int_eq(kiln_realize(sq), KILN_OK);
  ck_assert_int_eq(tu_kernels_of(kiln_einsum("ii", 1, &sq)), 1);
  ck_assert_int_eq(tu_kernels_of(kiln_trace(sq)), 1);
  kiln_scope_end();
}
END_TEST

/* ---- every view feeds an elementwise op without a copy ------------------------- */
START_TEST(no_copies) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(6, 5), 4, TU_SMALL), *out[4];
  kiln_tensor *idx = kiln_from_data((int64_t[]){1, 0, 3}, KILN_I64, KILN_SHAPE(3));
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  kiln_tensor *views[] = {
    kiln_tril(x, 1), kiln_triu(x, -1), kiln_pad_reflect(x, KILN_SHAPE(2, 1, 1, 2)),
    kiln_pad_replicate(x, KILN_SHAPE(2, 1, 1, 2)), kiln_pad_circular(x, KILN_SHAPE(2, 1, 1, 2)),
    kiln_repeat(x, KILN_SHAPE(2, 1, 3)), kiln_tile(x, KILN_SHAPE(2)), kiln_repeat_interleave(x, 2),
    kiln_repeat_interleave_dim(x, 3, 1), kiln_roll(x, KILN_SHAPE(1, 2), KILN_DIMS(0, 1)), kiln_roll(x, KILN_SHAPE(7), 0, NULL),
    kiln_diagonal(x, 1, 0, 1), kiln_diag(x, 0), kiln_diag(kiln_select(x, 0, 2), 1), kiln_one_hot(idx, 5),
    kiln_cross(kiln_slice(x, 1, 0, 3, 1), kiln_slice(x, 1, 2, 5, 1), 1), kiln_outer(kiln_select(x, 0, 1), kiln_select(x, 1, 2)),
  };
  for (size_t i = 0; i < sizeof views / sizeof *views; i++)
    ck_assert_msg(tu_kernels_of(kiln_neg(views[i])) == 1, "view %zu launched a copy", i);
  ck_assert_int_eq(kiln_split(x, 4, 0, 4, out), 2);
  ck_assert_int_eq(tu_kernels_of(kiln_neg(out[1])), 1);
  ck_assert_int_eq(kiln_chunk(x, 2, 1, 4, out), 2);
  ck_assert_int_eq(tu_kernels_of(kiln_neg(out[1])), 1);
  ck_assert_int_eq(kiln_unbind(x, 1, 4, out), 5);
  ck_assert_int_eq(tu_kernels_of(kiln_neg(out[3])), 1);
  kiln_scope_end();
}
END_TEST

/* ---- every dtype, fused and eager, against the reference evaluator ------------ */
typedef kiln_tensor *(*view_fn)(kiln_tensor *x);
static kiln_tensor *v_tril(kiln_tensor *x) { return kiln_tril(x, 1); }
static kiln_tensor *v_triu(kiln_tensor *x) { return kiln_triu(x, -1); }
static kiln_tensor *v_reflect(kiln_tensor *x) { return kiln_pad_reflect(x, KILN_SHAPE(1, 2)); }
static kiln_tensor *v_replicate(kiln_tensor *x) { return kiln_pad_replicate(x, KILN_SHAPE(2, 1, 0, 1)); }
static kiln_tensor *v_circular(kiln_tensor *x) { return kiln_pad_circular(x, KILN_SHAPE(1, 1, 1, 0)); }
static kiln_tensor *v_repeat(kiln_tensor *x) { return kiln_repeat(x, KILN_SHAPE(2, 3, 1)); }
static kiln_tensor *v_tile(kiln_tensor *x) { return kiln_tile(x, KILN_SHAPE(2)); }
static kiln_tensor *v_interleave(kiln_tensor *x) { return kiln_repeat_interleave_dim(x, 2, -2); }
static kiln_tensor *v_roll(kiln_tensor *x) { return kiln_roll(x, KILN_SHAPE(1, -1), KILN_DIMS(0, 1)); }
static kiln_tensor *v_diagonal(kiln_tensor *x) { return kiln_diagonal(x, -1, 1, 0); }
static kiln_tensor *v_trace(kiln_tensor *x) { return kiln_trace(x); }
static kiln_tensor *v_outer(kiln_tensor *x) { return kiln_outer(kiln_select(x, 0, 1), kiln_select(x, 1, 0)); }
static kiln_tensor *v_einsum(kiln_tensor *x) { return kiln_einsum("ij,kj->ik", 2, (kiln_tensor *[]){x, x}); }
static kiln_tensor *v_split(kiln_tensor *x) {
  kiln_tensor *p[3];
  ck_assert_int_eq(kiln_split(x, 2, 1, 3, p), 3);
  return kiln_add(p[0], p[1]);
}
static kiln_tensor *v_unbind(kiln_tensor *x) {
  kiln_tensor *p[1];
  ck_assert_int_eq(kiln_unbind(x, 0, 1, p), 4);
  return p[0];
}

static const struct { const char *name; view_fn fn; bool no_bool; } views[] = {
  {"tril", v_tril, false}, {"triu", v_triu, false}, {"reflect", v_reflect, false}, {"replicate", v_replicate, false},
  {"circular", v_circular, false}, {"repeat", v_repeat, false}, {"tile", v_tile, false},
  {"interleave", v_interleave, false}, {"roll", v_roll, false}, {"diagonal", v_diagonal, false},
  {"trace", v_trace, false}, {"outer", v_outer, false}, {"einsum", v_einsum, false}, {"split", v_split, false},
  {"unbind", v_unbind, false},
};
#define NVIEWS ((int)(sizeof views / sizeof *views))

static const kiln_dtype dtypes[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I32, KILN_I64, KILN_U8, KILN_I8, KILN_BOOL};

typedef struct { int view; kiln_dtype dt; bool transposed; } view_ctx;

static kiln_tensor *build_view(const void *p) {
  const view_ctx *c = p;
  kiln_tensor *x = tu_data(c->dt, KILN_SHAPE(4, 5), 7, TU_SMALL);
  if (c->transposed) x = kiln_T(tu_data(c->dt, KILN_SHAPE(5, 4), 8, TU_SMALL));
  return views[c->view].fn(x);
}

START_TEST(views_every_dtype) {
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
    for (int tr = 0; tr < 1 + (dtypes[d] == KILN_F32 || dtypes[d] == KILN_I32); tr++) {   /* transposed: two dtypes */
      view_ctx c = {_i, dtypes[d], tr};
      char why[512];
      ref_tol tol = ir_is_float(dtypes[d]) ? ref_tol_dtype(dtypes[d]) : (ref_tol){0, 0};
      if (views[_i].fn == v_einsum && ir_is_float(dtypes[d])) tol = (ref_tol){1e-2, 1e-2};
      bool ok = tu_check_fused_eager(build_view, &c, KILN_NUM_DTYPES, tol, why, sizeof why);
      ck_assert_msg(ok, "%s %s%s: %s", views[_i].name, kiln_dtype_name(dtypes[d]), tr ? " transposed" : "", why);
    }
}
END_TEST

/* ---- errors ------------------------------------------------------------------- */
START_TEST(errors) {
  kiln_scope_begin();
  kiln_tensor *x = x34(), *v = kiln_arange(0, 3, 1), *out[2] = {NULL, NULL};
  TU_EXPECT_ERROR(kiln_tril(v, 0), KILN_ERR_ARG, "tril: input tensor must have at least 2 dimensions (input: int64 (3,))");
  TU_EXPECT_ERROR(kiln_triu(NULL, 0), KILN_ERR_ARG, "triu: argument 1 is NULL");
  TU_EXPECT_ERROR(kiln_pad_reflect(v, KILN_SHAPE(3, 0)), KILN_ERR_ARG,
                  "pad_reflect: padding size 3 should be less than the corresponding input dimension 0 of size 3");
  TU_EXPECT_ERROR(kiln_pad_circular(v, KILN_SHAPE(0, 4)), KILN_ERR_ARG, "pad_circular: padding size 4 should be at most");
  TU_EXPECT_ERROR(kiln_pad_replicate(kiln_zeros(KILN_SHAPE(0), KILN_F32), KILN_SHAPE(1, 0)), KILN_ERR_ARG,
                  "pad_replicate: cannot replicate dimension 0 of size 0");
  TU_EXPECT_ERROR(kiln_pad_replicate(v, KILN_SHAPE(1)), KILN_ERR_ARG, "pad_replicate: padding length must be divisible by 2");
  TU_EXPECT_ERROR(kiln_pad_reflect(v, KILN_SHAPE(1, 1, 1, 1)), KILN_ERR_ARG, "pad_reflect: padding length too large");
  TU_EXPECT_ERROR(kiln_pad_circular(v, KILN_SHAPE(-2, -2)), KILN_ERR_SHAPE, "pad_circular: the input size 3, plus padding -2 and -2");
  ck_assert_int_eq(kiln_split(v, 0, 0, 2, out), -1);
  TU_EXPECT_ERROR_ABOVE(out[0], 1, KILN_ERR_ARG, "split: split_size can only be 0 if dimension size is 0");
  ck_assert_int_eq(kiln_status_of(out[1]), KILN_ERR_ARG);
  ck_assert_int_eq(kiln_split_sizes(v, KILN_SHAPE(1, 1), 0, 2, out), -1);
  TU_EXPECT_ERROR_ABOVE(out[0], 1, KILN_ERR_ARG, "split_with_sizes: expects split_sizes to be non-negative and to sum exactly to 3 "
                  "(input tensor's size at dimension 0), but got split_sizes=[1, 1]");
  ck_assert_int_eq(kiln_chunk(v, 0, 0, 2, out), -1);
  TU_EXPECT_ERROR_ABOVE(out[0], 1, KILN_ERR_ARG, "chunk: expects `chunks` to be greater than 0");
  ck_assert_int_eq(kiln_unbind(v, 1, 2, out), -1);
  TU_EXPECT_ERROR_ABOVE(out[0], 1, KILN_ERR_ARG, "unbind: Dimension out of range (expected to be in range of [-1, 0], but got 1)");
  ck_assert_int_eq(kiln_unbind(kiln_scalar(1, KILN_F32), 0, 0, NULL), -1);
  ck_assert_int_eq(kiln_unbind(v, 0, 2, NULL), -1);
  TU_EXPECT_ERROR(kiln_repeat(x, KILN_SHAPE(2)), KILN_ERR_ARG,
                  "repeat: Number of dimensions of repeat dims (1) can not be smaller than number of dimensions of tensor (2)");
  TU_EXPECT_ERROR(kiln_tile(x, KILN_SHAPE(-1)), KILN_ERR_ARG, "tile: repeats can not be negative, got -1");
  TU_EXPECT_ERROR(kiln_repeat_interleave_dim(x, 2, 2), KILN_ERR_ARG, "repeat_interleave: Dimension out of range");
  TU_EXPECT_ERROR(kiln_roll(x, KILN_SHAPE(1, 2), KILN_DIMS(0)), KILN_ERR_ARG, "roll: shifts and dimensions must align. shifts: 2, dims: 1");
  TU_EXPECT_ERROR(kiln_roll(x, KILN_SHAPE(1), KILN_DIMS(3)), KILN_ERR_ARG, "roll: Dimension out of range");
  TU_EXPECT_ERROR(kiln_diagonal(x, 0, 1, -1), KILN_ERR_ARG, "diagonal: diagonal dimensions cannot be identical 1, -1");
  TU_EXPECT_ERROR(kiln_diag(kiln_reshape(x, KILN_SHAPE(3, 2, 2)), 0), KILN_ERR_ARG, "diag: Supports 1D or 2D tensors. Got 3D");
  TU_EXPECT_ERROR(kiln_trace(v), KILN_ERR_ARG, "trace: expected a matrix, but got tensor with dim 1");
  TU_EXPECT_ERROR(kiln_one_hot(x, 3), KILN_ERR_DTYPE, "one_hot: is only applicable to index tensor of type int64");
  TU_EXPECT_ERROR(kiln_one_hot(kiln_arange(-1, 2, 1), -1), KILN_ERR_ARG, "one_hot: Class values must be non-negative.");
  TU_EXPECT_ERROR(kiln_one_hot(kiln_zeros(KILN_SHAPE(0), KILN_I64), -1), KILN_ERR_ARG,
                  "one_hot: Can not infer total number of classes from empty tensor.");
  TU_EXPECT_ERROR(kiln_one_hot(v, -2), KILN_ERR_ARG, "one_hot: num_classes should be -1 or non-negative, got -2");
  TU_EXPECT_ERROR(kiln_outer(x, v), KILN_ERR_SHAPE, "outer: expected 1-D tensors, got 2D and 1D");
  TU_EXPECT_ERROR(kiln_cross(x, x, 1), KILN_ERR_SHAPE, "cross: inputs dimension 1 must have length 3. Got 4 and 4");
  TU_EXPECT_ERROR(kiln_cross(x, v, 0), KILN_ERR_SHAPE, "cross: shapes (3,4) and (3,) cannot be broadcast");
  kiln_scope_end();
}
END_TEST

START_TEST(einsum_errors) {
  kiln_scope_begin();
  kiln_tensor *m = kiln_ones(KILN_SHAPE(2, 3), KILN_F32), *n = kiln_ones(KILN_SHAPE(4, 5), KILN_F32);
  kiln_tensor *mm[] = {m, m}, *mn[] = {m, n};
  TU_EXPECT_ERROR(kiln_einsum("ij,j1", 2, mm), KILN_ERR_ARG,
                  "einsum: invalid subscript '1' (0x31); subscripts are letters (a-z, A-Z) and '...' at position 4 of \"ij,j1\"");
  TU_EXPECT_ERROR(kiln_einsum("ij", 2, mm), KILN_ERR_ARG, "einsum: 1 operands in the equation but 2 given in \"ij\"");
  TU_EXPECT_ERROR(kiln_einsum("ij,jk,k", 2, mm), KILN_ERR_ARG, "einsum: more operands in the equation than the 2 given at position 6");
  TU_EXPECT_ERROR(kiln_einsum("ijk", 1, &m), KILN_ERR_ARG, "einsum: operand 0 has 3 subscripts but the tensor has 2 dims at position 0 of \"ijk\"");
  TU_EXPECT_ERROR(kiln_einsum("ij->iz", 1, &m), KILN_ERR_ARG, "einsum: output subscript 'z' does not appear in any operand at position 5 of \"ij->iz\"");
  TU_EXPECT_ERROR(kiln_einsum("ij->ii", 1, &m), KILN_ERR_ARG, "einsum: output subscript 'i' appears more than once at position 5");
  TU_EXPECT_ERROR(kiln_einsum("i..j", 1, &m), KILN_ERR_ARG, "einsum: '.' that is not part of an ellipsis ('...') at position 1");
  TU_EXPECT_ERROR(kiln_einsum("...i...", 1, &m), KILN_ERR_ARG, "einsum: a second ellipsis in one operand at position 4");
  TU_EXPECT_ERROR(kiln_einsum("ij->i->j", 1, &m), KILN_ERR_ARG, "einsum: '-' after the output at position 5");
  TU_EXPECT_ERROR(kiln_einsum("ij,jk", 2, mn), KILN_ERR_SHAPE, "einsum: subscript 'j' has size 4 in operand 1 but 3 before (in \"ij,jk\")");
  TU_EXPECT_ERROR(kiln_einsum("ii", 1, &m), KILN_ERR_SHAPE, "einsum: subscript 'i' has size 3 in operand 0 but 2 before");
  TU_EXPECT_ERROR(kiln_einsum(NULL, 1, &m), KILN_ERR_ARG, "einsum: the equation is NULL");
  TU_EXPECT_ERROR(kiln_einsum("", 0, NULL), KILN_ERR_ARG, "einsum: 0 operands given");
  TU_EXPECT_ERROR(kiln_einsum("i,i", 2, (kiln_tensor *[]){kiln_ones(KILN_SHAPE(2), KILN_F32), NULL}), KILN_ERR_ARG,
                  "einsum: argument 2 is NULL");
  kiln_scope_end();
}
END_TEST

static Suite *shape_ops_suite(void) {
  Suite *s = suite_create("shape_ops");
  TCase *tc = tu_tcase(s, "values");
  tcase_add_test(tc, triangles);
  tcase_add_test(tc, pads);
  tcase_add_test(tc, pieces);
  tcase_add_test(tc, repeats);
  tcase_add_test(tc, rolls);
  tcase_add_test(tc, diagonals);
  tcase_add_test(tc, one_hots);
  tcase_add_test(tc, outer_cross);
  tc = tu_tcase(s, "einsum");
  tcase_add_test(tc, einsum_values);
  tcase_add_test(tc, einsum_kinds);
  tcase_add_test(tc, einsum_kernels);
  tcase_add_test(tc, einsum_errors);
  tcase_add_test(tu_tcase(s, "no_copies"), no_copies);
  tcase_add_loop_test(tu_tcase(s, "dtypes"), views_every_dtype, 0, NVIEWS);
  tcase_add_test(tu_tcase(s, "errors"), errors);
  return s;
}

KILN_TEST_MAIN(shape_ops_suite)
