/* test_ew_ops.c: issue 13's elementwise binary ops, parameterised ops and
 * simple activations against the reference evaluator (fused and eager, every
 * dtype each accepts, broadcasting, strided inputs, empty and size-1 dims,
 * NaN/inf), PyTorch's values worked by hand, and the kernel error channel:
 * an integer division by zero fails the realize naming the op and its line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

static const kiln_dtype all_dtypes[] = {KILN_BOOL, KILN_U8, KILN_I8, KILN_I16, KILN_I32,
                                        KILN_I64, KILN_F16, KILN_BF16, KILN_F32, KILN_F64};
enum { NDT = sizeof all_dtypes / sizeof *all_dtypes };

static const ir_op binary_ops[] = {IR_FLOOR_DIVIDE, IR_TRUNC_DIVIDE, IR_REMAINDER, IR_FMOD, IR_COPYSIGN,
                                   IR_BITWISE_AND, IR_BITWISE_OR, IR_BITWISE_XOR, IR_LSHIFT, IR_RSHIFT};
enum { NBIN = sizeof binary_ops / sizeof *binary_ops };

/* Whether PyTorch computes op on operands of dtype dt. */
static bool accepts(ir_op op, kiln_dtype dt) {
  if (ir_op_has(op, IR_NOBOOL) && dt == KILN_BOOL) return false;
  return !(ir_op_has(op, IR_NOFLOAT) && ir_is_float(dt));
}

static bool is_division(ir_op op) {
  return op == IR_FLOOR_DIVIDE || op == IR_TRUNC_DIVIDE || op == IR_REMAINDER || op == IR_FMOD;
}

/* tu_data's values, with integer zeros made 1 when they are divisors (the
 * error channel has tests of its own below); float zeros stay (x / 0). */
static kiln_tensor *operand(kiln_dtype dt, int ndim, const int64_t *shape, uint64_t seed, bool divisor) {
  int64_t n = ir_numel(ndim, shape);
  size_t es = ir_dtypes[dt].size;
  unsigned char *buf = malloc((size_t)n * es + 1), zero[8] = {0}, one[8] = {1};
  ck_assert(buf);
  tu_fill(dt, n, seed, TU_FULL, buf);
  for (int64_t i = 0; divisor && !ir_is_float(dt) && i < n; i++)
    if (!memcmp(buf + (size_t)i * es, zero, es)) memcpy(buf + (size_t)i * es, one, es);
  kiln_tensor *t = kiln_from_data(buf, dt, ndim, shape);
  free(buf);
  return t;
}

/* ---- binary ops against the oracle --------------------------------------- */
typedef struct {
  ir_op op;
  kiln_dtype a, b;
  int na, nb;
  int64_t sa[3], sb[3];
  bool transpose;       /* a is read through a transposed view */
  bool small_shift;     /* b & 15: shift amounts mostly in range */
  int scalar;           /* 1: b is the number s */
  double s;
} bin_case;

static kiln_tensor *build_bin(const void *ctx) {
  const bin_case *c = ctx;
  kiln_tensor *a;
  if (c->transpose) {
    int64_t t[3] = {c->sa[1], c->sa[0]};
    a = kiln_transpose(operand(c->a, 2, t, 1, false), 0, 1);
  } else {
    a = operand(c->a, c->na, c->sa, 1, false);
  }
  if (c->scalar) return tu_scalar(c->op)(__FILE__, __LINE__, a, c->s);
  kiln_tensor *b = operand(c->b, c->nb, c->sb, 2, is_division(c->op));
  if (c->small_shift) b = kiln_bitwise_ands(b, 15);
  return tu_binary(c->op)(__FILE__, __LINE__, a, b);
}

static void check_bin(const bin_case *c) {
  kiln_dtype dt[2] = {c->a, c->scalar ? tu_number_dtype(c->s) : c->b};
  tu_rank rank[2] = {TU_TENSOR, c->scalar ? TU_NUMBER : c->nb ? TU_TENSOR : TU_ZERO_DIM};
  kiln_dtype want = tu_op_dtype(c->op, tu_result_type(2, dt, rank));
  char why[1200];
  bool ok = tu_check_fused_eager(build_bin, c, want, ref_tol_op(c->op, want), why, sizeof why);
  ck_assert_msg(ok, "%s(%s, %s)%s: %s", ir_ops[c->op].name, ir_dtypes[c->a].short_name,
                c->scalar ? "number" : ir_dtypes[c->b].short_name, c->transpose ? " transposed" : "", why);
}

/* Every op on every dtype pair of equal dtypes it accepts, b broadcast
 * along the rows. */
START_TEST(binary_dtypes) {
  ir_op op = binary_ops[_i / NDT];
  kiln_dtype dt = all_dtypes[_i % NDT];
  if (!accepts(op, dt)) return;
  bin_case c = {op, dt, dt, 2, 1, {11, 97}, {97}, .scalar = 0};
  check_bin(&c);
  c.transpose = dt == KILN_I32 || dt == KILN_F32 || dt == KILN_BOOL;   /* strided reads: a few dtypes (test time) */
  if (c.transpose) check_bin(&c);
  if (op == IR_LSHIFT || op == IR_RSHIFT) {
    c.small_shift = true;
    check_bin(&c);
  }
}
END_TEST

/* Mixed dtypes promote (int8 with int32, uint8 with int16, int with
 * float), a 0-dim divisor, empty and size-1 dims. */
START_TEST(binary_promotion_shapes) {
  ir_op op = binary_ops[_i];
  static const kiln_dtype pairs[][2] = {{KILN_I8, KILN_I32}, {KILN_U8, KILN_I16}, {KILN_I32, KILN_F32},
                                        {KILN_F16, KILN_F64}, {KILN_BOOL, KILN_I64}};
  for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++) {
    kiln_dtype both[2] = {pairs[p][0], pairs[p][1]};
    kiln_dtype promoted = tu_promote(both[0], both[1]);
    if (!accepts(op, promoted) || !accepts(op, both[0]) || !accepts(op, both[1])) continue;
    bin_case c = {op, both[0], both[1], 2, 2, {4, 1}, {1, 33}, .scalar = 0};
    check_bin(&c);
    c = (bin_case){op, both[0], both[1], 2, 0, {3, 5}, {0}, .scalar = 0};
    check_bin(&c);
    c = (bin_case){op, both[0], both[1], 2, 1, {0, 7}, {7}, .scalar = 0};
    check_bin(&c);
  }
}
END_TEST

/* The scalar forms: integral numbers keep an integer tensor integer, a
 * fractional one makes it float32. */
START_TEST(binary_scalars) {
  ir_op op = binary_ops[_i];
  static const double numbers[] = {3, -3, 2.5, -0.5, 1, -1};
  static const kiln_dtype dts[] = {KILN_U8, KILN_I16, KILN_I32, KILN_I64, KILN_F32, KILN_BF16, KILN_BOOL};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
    for (size_t v = 0; v < sizeof numbers / sizeof *numbers; v++) {
      bin_case c = {op, dts[d], KILN_F64, 2, 0, {9, 13}, {0}, .scalar = 1, .s = numbers[v]};
      kiln_dtype number = tu_number_dtype(numbers[v]);
      kiln_dtype promoted = tu_result_type(2, (kiln_dtype[]){dts[d], number}, (tu_rank[]){TU_TENSOR, TU_NUMBER});
      if (!accepts(op, promoted) || !accepts(op, dts[d])) continue;
      if (dts[d] == KILN_U8 && numbers[v] < 0 && !ir_is_float(promoted)) continue;  /* out of uint8's range */
      check_bin(&c);
    }
}
END_TEST

/* ---- unary ops ------------------------------------------------------------ */
typedef struct { ir_op op; kiln_dtype dt; bool transpose; } un_case;

static kiln_tensor *build_un(const void *ctx) {
  const un_case *c = ctx;
  if (c->transpose) return tu_unary(c->op)(__FILE__, __LINE__, kiln_transpose(operand(c->dt, KILN_SHAPE(13, 7), 3, false), 0, 1));
  return tu_unary(c->op)(__FILE__, __LINE__, operand(c->dt, KILN_SHAPE(7, 13), 3, false));
}

START_TEST(unary_dtypes) {
  ir_op op = _i / NDT ? IR_BITWISE_NOT : IR_TRUNC;
  kiln_dtype dt = all_dtypes[_i % NDT];
  if (!accepts(op, dt)) return;
  for (int tr = 0; tr < 1 + (dt == KILN_F32 || dt == KILN_I32); tr++) {
    un_case c = {op, dt, tr};
    char why[1200];
    ck_assert_msg(tu_check_fused_eager(build_un, &c, dt, ref_tol_op(op, dt), why, sizeof why), "%s(%s): %s",
                  ir_ops[op].name, ir_dtypes[dt].short_name, why);
  }
}
END_TEST

/* ---- PyTorch's values, worked by hand ------------------------------------- */
static void expect_values(kiln_tensor *t, kiln_dtype dt, int n, const double *want) {
  ck_assert_int_eq(kiln_realize(t), KILN_OK);
  ck_assert_int_eq(kiln_dtype_of(t), dt);
  ck_assert_int_eq(kiln_numel(t), n);
  kiln_tensor *d = kiln_cast(t, KILN_F64);
  ck_assert_int_eq(kiln_realize(d), KILN_OK);
  const double *got = kiln_data(d);
  for (int i = 0; i < n; i++) {
    bool same = isnan(want[i]) ? isnan(got[i]) : got[i] == want[i] && signbit(got[i]) == signbit(want[i]);
    ck_assert_msg(same, "element %d: got %.17g, want %.17g", i, got[i], want[i]);
  }
}

#define VALUES(...) (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), (const double[]){__VA_ARGS__}

START_TEST(integer_division_values) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(((int32_t[]){-7, 7, -7, 7, 0, -1}), KILN_I32, KILN_SHAPE(6));
  kiln_tensor *b = kiln_from_data(((int32_t[]){2, -2, -2, 2, 3, 5}), KILN_I32, KILN_SHAPE(6));
  expect_values(kiln_floor_divide(a, b), KILN_I32, VALUES(-4, -4, 3, 3, 0, -1));
  expect_values(kiln_trunc_divide(a, b), KILN_I32, VALUES(-3, -3, 3, 3, 0, 0));
  expect_values(kiln_remainder(a, b), KILN_I32, VALUES(1, -1, -1, 1, 0, 4));
  expect_values(kiln_fmod(a, b), KILN_I32, VALUES(-1, 1, -1, 1, 0, -1));
  expect_values(kiln_floor_divides(a, 2.5), KILN_F32, VALUES(-3, 2, -3, 2, 0, -1));
  kiln_scope_end();
}
END_TEST

/* INT_MIN / -1 does not trap: it wraps, as PyTorch, and its remainder is 0. */
START_TEST(int_min_by_minus_one) {
  kiln_scope_begin();
  kiln_tensor *a32 = kiln_from_data(((int32_t[]){INT32_MIN, INT32_MIN, 5}), KILN_I32, KILN_SHAPE(3));
  kiln_tensor *m32 = kiln_from_data(((int32_t[]){-1, 1, -1}), KILN_I32, KILN_SHAPE(3));
  expect_values(kiln_floor_divide(a32, m32), KILN_I32, VALUES(INT32_MIN, INT32_MIN, -5));
  expect_values(kiln_trunc_divide(a32, m32), KILN_I32, VALUES(INT32_MIN, INT32_MIN, -5));
  expect_values(kiln_remainder(a32, m32), KILN_I32, VALUES(0, 0, 0));
  expect_values(kiln_fmod(a32, m32), KILN_I32, VALUES(0, 0, 0));
  expect_values(kiln_floor_divides(a32, -1), KILN_I32, VALUES(INT32_MIN, INT32_MIN, -5));
  kiln_tensor *a64 = kiln_from_data(((int64_t[]){INT64_MIN, -9}), KILN_I64, KILN_SHAPE(2));
  kiln_tensor *m64 = kiln_from_data(((int64_t[]){-1, -1}), KILN_I64, KILN_SHAPE(2));
  expect_values(kiln_floor_divide(a64, m64), KILN_I64, VALUES((double)INT64_MIN, 9));
  expect_values(kiln_remainder(a64, m64), KILN_I64, VALUES(0, 0));
  kiln_tensor *a8 = kiln_from_data(((int8_t[]){-128}), KILN_I8, KILN_SHAPE(1));
  expect_values(kiln_floor_divides(a8, -1), KILN_I8, VALUES(-128));
  kiln_scope_end();
}
END_TEST

START_TEST(float_division_values) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(((float[]){5.5f, -5.5f, 1, -1, 0, 1, -0.0f, INFINITY, 3}), KILN_F32, KILN_SHAPE(9));
  kiln_tensor *b = kiln_from_data(((float[]){-2, 2, 0, 0, 0, INFINITY, 3, 2, -INFINITY}), KILN_F32, KILN_SHAPE(9));
  expect_values(kiln_floor_divide(a, b), KILN_F32, VALUES(-3, -3, INFINITY, -INFINITY, NAN, 0, -0.0, NAN, -1));
  expect_values(kiln_remainder(a, b), KILN_F32, VALUES(-0.5, 0.5, NAN, NAN, NAN, 1, -0.0, NAN, -INFINITY));
  expect_values(kiln_fmod(a, b), KILN_F32, VALUES(1.5, -1.5, NAN, NAN, NAN, 1, -0.0, NAN, 3));
  expect_values(kiln_trunc_divide(a, b), KILN_F32, VALUES(-2, -2, INFINITY, -INFINITY, NAN, 0, -0.0, INFINITY, -0.0));
  expect_values(kiln_copysign(a, b), KILN_F32, VALUES(-5.5, 5.5, 1, 1, 0, 1, 0, INFINITY, -3));
  kiln_scope_end();
}
END_TEST

START_TEST(bitwise_values) {
  kiln_scope_begin();
  kiln_tensor *a8 = kiln_from_data(((int8_t[]){1, 1, -128, -128, 64, 5}), KILN_I8, KILN_SHAPE(6));
  kiln_tensor *s8 = kiln_from_data(((int8_t[]){7, 8, 9, -1, 1, 0}), KILN_I8, KILN_SHAPE(6));
  expect_values(kiln_bitwise_left_shift(a8, s8), KILN_I8, VALUES(-128, 0, 0, 0, -128, 5));
  expect_values(kiln_bitwise_right_shift(a8, s8), KILN_I8, VALUES(0, 0, -1, -1, 32, 5));
  kiln_tensor *u8 = kiln_from_data(((uint8_t[]){200, 200, 255}), KILN_U8, KILN_SHAPE(3));
  expect_values(kiln_bitwise_right_shifts(u8, 8), KILN_U8, VALUES(0, 0, 0));
  expect_values(kiln_bitwise_right_shifts(u8, 3), KILN_U8, VALUES(25, 25, 31));
  expect_values(kiln_bitwise_not(u8), KILN_U8, VALUES(55, 55, 0));
  kiln_tensor *i32 = kiln_from_data(((int32_t[]){1, -1, 12}), KILN_I32, KILN_SHAPE(3));
  expect_values(kiln_bitwise_left_shifts(i32, 32), KILN_I32, VALUES(0, 0, 0));
  expect_values(kiln_bitwise_right_shifts(i32, 40), KILN_I32, VALUES(0, -1, 0));
  expect_values(kiln_bitwise_xors(i32, 10), KILN_I32, VALUES(11, -11, 6));
  expect_values(kiln_bitwise_ands(i32, 6), KILN_I32, VALUES(0, 6, 4));
  expect_values(kiln_bitwise_ors(i32, 6), KILN_I32, VALUES(7, -1, 14));
  kiln_tensor *p = kiln_from_data(((bool[]){true, false, true}), KILN_BOOL, KILN_SHAPE(3));
  kiln_tensor *q = kiln_from_data(((bool[]){true, true, false}), KILN_BOOL, KILN_SHAPE(3));
  expect_values(kiln_bitwise_xor(p, q), KILN_BOOL, VALUES(0, 1, 1));
  expect_values(kiln_bitwise_and(p, q), KILN_BOOL, VALUES(1, 0, 0));
  expect_values(kiln_bitwise_not(p), KILN_BOOL, VALUES(0, 1, 0));
  kiln_tensor *f = kiln_from_data(((float[]){-2.5f, 2.5f, -0.5f, NAN}), KILN_F32, KILN_SHAPE(4));
  expect_values(kiln_trunc(f), KILN_F32, VALUES(-2, 2, -0.0, NAN));
  kiln_scope_end();
}
END_TEST

/* ---- the kernel error channel: integer division by zero ------------------- */
static void expect_zero_division(kiln_tensor *t, int line, const char *op, const char *where) {
  ck_assert_int_eq(kiln_realize(t), KILN_ERR_VALUE);
  char want[256];
  snprintf(want, sizeof want, "test_ew_ops.c:%d: %s: integer division by zero (ZeroDivisionError) at element %s",
           line, op, where);
  ck_assert_msg(strstr(kiln_last_error(), want), "message: %s\nwanted: %s", kiln_last_error(), want);
}

START_TEST(division_by_zero_fused) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(((int32_t[]){1, 2, 3, 4, 5, 6, 7, 8}), KILN_I32, KILN_SHAPE(2, 4));
  kiln_tensor *b = kiln_from_data(((int32_t[]){1, 1, 1, 1, 1, 1, 0, 1}), KILN_I32, KILN_SHAPE(2, 4));
  int line = __LINE__ + 1;
  kiln_tensor *q = kiln_floor_divide(a, b);
  kiln_tensor *y = kiln_adds(kiln_muls(q, 3), 1);   /* one kernel with the division inlined */
  expect_zero_division(y, line, "floor_divide", "6 of int32 (2,4)");
  /* the failure is sticky on nothing: the next realize of good data works */
  expect_values(kiln_remainder(a, kiln_adds(b, 1)), KILN_I32, VALUES(1, 0, 1, 0, 1, 0, 0, 0));
  line = __LINE__ + 1;
  kiln_tensor *r = kiln_remainder(kiln_cast(a, KILN_U8), kiln_cast(kiln_expand(kiln_slice(b, 1, 2, 3, 1), KILN_SHAPE(2, 4)), KILN_U8));
  expect_zero_division(r, line, "remainder", "4 of uint8 (2,4)");
  kiln_scope_end();
}
END_TEST

START_TEST(division_by_zero_eager) {
  kiln_scope_begin();
  kiln_set_eager(1);
  kiln_tensor *a = kiln_from_data(((int64_t[]){5, 6, 7}), KILN_I64, KILN_SHAPE(3));
  kiln_tensor *b = kiln_from_data(((int64_t[]){2, 0, 0}), KILN_I64, KILN_SHAPE(3));
  int line = __LINE__ + 1;
  kiln_tensor *r = kiln_fmod(a, b);
  kiln_set_eager(0);
  ck_assert_int_eq(kiln_status_of(r), KILN_ERR_VALUE);
  ck_assert_msg(strstr(kiln_last_error(), "fmod: integer division by zero (ZeroDivisionError) at element 1 of int64 (3,)"),
                "%s", kiln_last_error());
  char where[64];
  snprintf(where, sizeof where, "test_ew_ops.c:%d:", line);
  ck_assert_msg(strstr(kiln_last_error(), where), "%s", kiln_last_error());
  kiln_scope_end();
}
END_TEST

/* A compiled function reports the failure of a run and runs again on good data. */
START_TEST(division_by_zero_fn) {
  kiln_scope_begin();
  kiln_tensor *pa = kiln_placeholder(KILN_I32, KILN_SHAPE(4)), *pb = kiln_placeholder(KILN_I32, KILN_SHAPE(4));
  int line = __LINE__ + 1;
  kiln_tensor *y = kiln_bitwise_xor(kiln_floor_divide(pa, pb), pa);
  kiln_fn *fn = kiln_compile(2, ((kiln_tensor *[]){pa, pb}), 1, &y);
  ck_assert_ptr_nonnull(fn);
  kiln_tensor *a = kiln_from_data(((int32_t[]){-7, 8, 9, 10}), KILN_I32, KILN_SHAPE(4));
  kiln_tensor *bad = kiln_from_data(((int32_t[]){1, 2, 3, 0}), KILN_I32, KILN_SHAPE(4));
  kiln_tensor *good = kiln_from_data(((int32_t[]){2, 2, 3, 5}), KILN_I32, KILN_SHAPE(4));
  kiln_tensor *out = NULL;
  ck_assert_int_eq(kiln_fn_run(fn, ((kiln_tensor *[]){a, bad}), &out), KILN_ERR_VALUE);
  char want[160];
  snprintf(want, sizeof want, "test_ew_ops.c:%d: floor_divide: integer division by zero (ZeroDivisionError) at element 3",
           line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  out = NULL;
  ck_assert_int_eq(kiln_fn_run(fn, ((kiln_tensor *[]){a, good}), &out), KILN_OK);
  expect_values(out, KILN_I32, VALUES(-4 ^ -7, 4 ^ 8, 3 ^ 9, 2 ^ 10));
  kiln_fn_free(fn);
  kiln_scope_end();
}
END_TEST

/* The number 0 is PyTorch's ZeroDivisionError at once; a float divisor of
 * zero is no error (x / 0). */
START_TEST(division_by_number_zero) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(((int16_t[]){5, 6}), KILN_I16, KILN_SHAPE(2));
  int line = __LINE__ + 1;
  kiln_tensor *q = kiln_trunc_divides(a, 0);
  ck_assert_int_eq(kiln_status_of(q), KILN_ERR_VALUE);
  char want[128];
  snprintf(want, sizeof want, "test_ew_ops.c:%d: trunc_divide: integer division by zero", line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  expect_values(kiln_floor_divides(kiln_cast(a, KILN_F32), 0), KILN_F32, VALUES(INFINITY, INFINITY));
  kiln_scope_end();
}
END_TEST

/* An integer tensor to a negative integral number is PyTorch's (and
 * NumPy's) refusal; a fractional one makes the result float, and negative
 * values of an exponent tensor give PyTorch's integer results. */
START_TEST(integer_to_negative_power) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(((int32_t[]){2, 1, -1, 0}), KILN_I32, KILN_SHAPE(4));
  int line = __LINE__ + 1;
  kiln_tensor *p = kiln_pows(a, -1);
  ck_assert_int_eq(kiln_status_of(p), KILN_ERR_VALUE);
  char want[128];
  snprintf(want, sizeof want, "test_ew_ops.c:%d: pow: Integers to negative integer powers are not allowed", line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  expect_values(kiln_pows(a, 2), KILN_I32, VALUES(4, 1, 1, 0));
  kiln_tensor *fr = kiln_pows(a, -0.5);
  ck_assert_int_eq(kiln_realize(fr), KILN_OK);
  ck_assert_int_eq(kiln_dtype_of(fr), KILN_F32);
  kiln_tensor *e = kiln_from_data(((int32_t[]){-1, -2, -3, 2}), KILN_I32, KILN_SHAPE(4));
  expect_values(kiln_pow(a, e), KILN_I32, VALUES(0, 1, -1, 0));
  kiln_scope_end();
}
END_TEST

/* ---- dtype errors ----------------------------------------------------------- */
START_TEST(dtype_errors) {
  kiln_scope_begin();
  kiln_tensor *f = kiln_from_data(((float[]){1, 2}), KILN_F32, KILN_SHAPE(2));
  kiln_tensor *p = kiln_from_data(((bool[]){true, false}), KILN_BOOL, KILN_SHAPE(2));
  int line = __LINE__ + 1;
  kiln_tensor *e = kiln_bitwise_and(f, f);
  ck_assert_int_eq(kiln_status_of(e), KILN_ERR_DTYPE);
  char want[160];
  snprintf(want, sizeof want, "test_ew_ops.c:%d: bitwise_and: only integer and bool tensors are supported, got float32 (2,)", line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  ck_assert_int_eq(kiln_status_of(kiln_bitwise_not(f)), KILN_ERR_DTYPE);
  ck_assert_int_eq(kiln_status_of(kiln_bitwise_left_shift(p, p)), KILN_ERR_DTYPE);
  ck_assert_msg(strstr(kiln_last_error(), "bitwise_left_shift: not supported for bool tensors"), "%s", kiln_last_error());
  ck_assert_int_eq(kiln_status_of(kiln_floor_divide(p, p)), KILN_ERR_DTYPE);
  ck_assert_int_eq(kiln_status_of(kiln_trunc(p)), KILN_ERR_DTYPE);
  ck_assert_int_eq(kiln_status_of(kiln_remainder(f, NULL)), KILN_ERR_ARG);
  ck_assert_int_eq(kiln_status_of(kiln_fmod(f, kiln_from_data(((float[]){1, 2, 3}), KILN_F32, KILN_SHAPE(3)))),
                   KILN_ERR_SHAPE);
  kiln_scope_end();
}
END_TEST

/* ---- compositions against the oracle ---------------------------------------- */
typedef enum {
  C_FRAC, C_ISNAN, C_ISINF, C_ISFINITE, C_NAN_TO_NUM, C_CLAMP_TENSOR, C_CLAMP_MIN, C_MASKED_FILL, C_LERP, C_LERPS,
  C_ISCLOSE, C_ISCLOSE_NAN, C_HARDTANH, C_RELU6, C_LEAKY_RELU, C_HARDSWISH, C_HARDSIGMOID, C_SOFTSIGN, C_NCOMP
} comp;
static const char *const comp_names[C_NCOMP] = {
  "frac", "isnan", "isinf", "isfinite", "nan_to_num", "clamp_tensor", "clamp_tensor(min)", "masked_fill", "lerp",
  "lerps", "isclose", "isclose(equal_nan)", "hardtanh", "relu6", "leaky_relu", "hardswish", "hardsigmoid", "softsign"};

typedef struct { comp op; kiln_dtype dt; bool transpose; } comp_case;

static bool comp_float_only(comp c) {
  return c == C_FRAC || c == C_LERP || c == C_LERPS || c == C_LEAKY_RELU || c == C_HARDSWISH || c == C_HARDSIGMOID;
}

static bool comp_accepts(comp c, kiln_dtype dt) {
  if (comp_float_only(c)) return ir_is_float(dt);
  bool nobool = c == C_HARDTANH || c == C_RELU6 || c == C_SOFTSIGN;
  return !(nobool && dt == KILN_BOOL);
}

static kiln_tensor *build_comp(const void *ctx) {
  const comp_case *c = ctx;
  kiln_tensor *x = c->transpose ? kiln_transpose(operand(c->dt, KILN_SHAPE(31, 6), 4, false), 0, 1)
                                : operand(c->dt, KILN_SHAPE(6, 31), 4, false);
  kiln_tensor *y = operand(c->dt, KILN_SHAPE(31), 5, false);
  kiln_tensor *mask = kiln_gts(operand(KILN_F32, KILN_SHAPE(6, 1), 6, false), 0);
  switch (c->op) {
  case C_FRAC: return kiln_frac(x);
  case C_ISNAN: return kiln_isnan(x);
  case C_ISINF: return kiln_isinf(x);
  case C_ISFINITE: return kiln_isfinite(x);
  case C_NAN_TO_NUM: return kiln_nan_to_num(x, 1.5, 100, -100);
  case C_CLAMP_TENSOR: return kiln_clamp_tensor(x, y, operand(c->dt, KILN_SHAPE(6, 1), 7, false));
  case C_CLAMP_MIN: return kiln_clamp_tensor(x, y, NULL);
  case C_MASKED_FILL: return kiln_masked_fill(x, mask, c->dt == KILN_U8 ? 7 : -7);
  case C_LERP: return kiln_lerp(x, y, kiln_rand_like(x));
  case C_LERPS: return kiln_lerps(x, y, 0.75);
  case C_ISCLOSE: return kiln_isclose(x, kiln_adds(x, 1), 0.01, 0.5, 0);
  case C_ISCLOSE_NAN: return kiln_isclose(x, kiln_expand(y, KILN_SHAPE(6, 31)), 1e-5, 1e-8, 1);
  case C_HARDTANH: return kiln_hardtanh(x, -2, 5);
  case C_RELU6: return kiln_relu6(x);
  case C_LEAKY_RELU: return kiln_leaky_relu(x, 0.01);
  case C_HARDSWISH: return kiln_hardswish(x);
  case C_HARDSIGMOID: return kiln_hardsigmoid(x);
  default: return kiln_softsign(x);
  }
}

START_TEST(compositions) {
  comp op = (comp)(_i / NDT);
  kiln_dtype dt = all_dtypes[_i % NDT];
  if (!comp_accepts(op, dt) || (op == C_ISCLOSE && dt == KILN_BOOL)) return;
  /* the oracle rounds each op of a composition to f16/bf16; kernels keep the
   * f32 values between them (PyTorch's opmath), which lerp's and hardswish's
   * chains show: those are compared in f32 and f64 */
  bool chain = op == C_LERP || op == C_LERPS || op == C_HARDSWISH;
  if (chain && (dt == KILN_F16 || dt == KILN_BF16)) return;
  for (int tr = 0; tr < 1 + (dt == KILN_F32 || dt == KILN_I32); tr++) {   /* strided: two dtypes (test time) */
    comp_case c = {op, dt, tr};
    char why[1200];
    ck_assert_msg(tu_check_fused_eager(build_comp, &c, KILN_NUM_DTYPES, ref_tol_dtype(dt), why, sizeof why),
                  "%s(%s)%s: %s", comp_names[op], ir_dtypes[dt].short_name, tr ? " transposed" : "", why);
  }
}
END_TEST

/* A chain of them is one kernel. */
START_TEST(compositions_fuse) {
  kiln_scope_begin();
  kiln_tensor *x = operand(KILN_F32, KILN_SHAPE(64, 33), 9, false);
  kiln_tensor *y = kiln_hardswish(kiln_leaky_relu(kiln_nan_to_num(x, 0, 1e4, -1e4), 0.2));
  kiln_tensor *z = kiln_masked_fill(kiln_lerps(y, kiln_softsign(x), 0.25), kiln_isinf(x), 9);
  uint64_t before = kiln_stats().kernels_launched;
  ck_assert_int_eq(kiln_realize(z), KILN_OK);
  ck_assert_int_eq(kiln_stats().kernels_launched - before, 1);
  kiln_scope_end();
}
END_TEST

START_TEST(composition_values) {
  kiln_scope_begin();
  kiln_tensor *f = kiln_from_data(((float[]){NAN, INFINITY, -INFINITY, -2.75f, 3, -0.0f}), KILN_F32, KILN_SHAPE(6));
  expect_values(kiln_frac(f), KILN_F32, VALUES(NAN, NAN, NAN, -0.75, 0, 0));
  expect_values(kiln_isnan(f), KILN_BOOL, VALUES(1, 0, 0, 0, 0, 0));
  expect_values(kiln_isinf(f), KILN_BOOL, VALUES(0, 1, 1, 0, 0, 0));
  expect_values(kiln_isfinite(f), KILN_BOOL, VALUES(0, 0, 0, 1, 1, 1));
  expect_values(kiln_nan_to_num(f, 0, 3.4028234663852886e38, -3.4028234663852886e38), KILN_F32,
                VALUES(0, 3.4028234663852886e38, -3.4028234663852886e38, -2.75, 3, -0.0));
  expect_values(kiln_hardtanh(f, -1, 1), KILN_F32, VALUES(NAN, 1, -1, -1, 1, -0.0));
  expect_values(kiln_relu6(f), KILN_F32, VALUES(NAN, 6, 0, 0, 3, 0));   /* maximum(-0, 0) is +0 */
  expect_values(kiln_leaky_relu(f, 0.5), KILN_F32, VALUES(NAN, INFINITY, -INFINITY, -1.375, 3, -0.0));
  expect_values(kiln_hardsigmoid(f), KILN_F32, VALUES(NAN, 1, 0, (double)(0.25f / 6.0f), 1, 0.5));
  expect_values(kiln_softsign(kiln_from_data(((int32_t[]){1, -3, 0}), KILN_I32, KILN_SHAPE(3))), KILN_F32,
                VALUES(0.5, -0.75, 0));
  kiln_tensor *h = kiln_from_data(((float[]){-3, 3, -1, 1}), KILN_F32, KILN_SHAPE(4));
  expect_values(kiln_hardswish(h), KILN_F32, VALUES(-0.0, 3, (double)(-2.0f / 6.0f), (double)(4.0f / 6.0f)));
  kiln_tensor *i = kiln_from_data(((int32_t[]){5, -5, 100, 7}), KILN_I32, KILN_SHAPE(4));
  kiln_tensor *lo = kiln_from_data(((int32_t[]){0, 0, 50, 9}), KILN_I32, KILN_SHAPE(4));
  kiln_tensor *hi = kiln_from_data(((int32_t[]){3, 3, 60, 8}), KILN_I32, KILN_SHAPE(4));
  expect_values(kiln_clamp_tensor(i, lo, hi), KILN_I32, VALUES(3, 0, 60, 8));   /* min > max gives max */
  expect_values(kiln_clamp_tensor(i, NULL, hi), KILN_I32, VALUES(3, -5, 60, 7));
  expect_values(kiln_clamp_tensor(i, kiln_from_data(((float[]){0.5f}), KILN_F32, KILN_SHAPE(1)), NULL), KILN_F32,
                VALUES(5, 0.5, 100, 7));
  kiln_tensor *m = kiln_from_data(((bool[]){true, false, false, true}), KILN_BOOL, KILN_SHAPE(4));
  expect_values(kiln_masked_fill(i, m, 2.9), KILN_I32, VALUES(2, -5, 100, 2));
  expect_values(kiln_masked_fill(m, m, 0), KILN_BOOL, VALUES(0, 0, 0, 0));
  expect_values(kiln_masked_fill(kiln_logical_not(m), m, 5), KILN_BOOL, VALUES(1, 1, 1, 1));
  kiln_tensor *a = kiln_from_data(((float[]){1, 2, 1e30f, -4}), KILN_F32, KILN_SHAPE(4));
  kiln_tensor *b = kiln_from_data(((float[]){3, 2, 1, 4}), KILN_F32, KILN_SHAPE(4));
  kiln_tensor *w = kiln_from_data(((float[]){0, 0.5f, 1, 0.25f}), KILN_F32, KILN_SHAPE(4));
  expect_values(kiln_lerp(a, b, w), KILN_F32, VALUES(1, 2, 1, -2));
  expect_values(kiln_lerps(a, b, 1), KILN_F32, VALUES(3, 2, 1, 4));
  kiln_tensor *p = kiln_from_data(((float[]){INFINITY, NAN, 1, 1, -INFINITY}), KILN_F32, KILN_SHAPE(5));
  kiln_tensor *q = kiln_from_data(((float[]){INFINITY, NAN, 1.000001f, 1.1f, INFINITY}), KILN_F32, KILN_SHAPE(5));
  expect_values(kiln_isclose(p, q, 1e-5, 1e-8, 0), KILN_BOOL, VALUES(1, 0, 1, 0, 0));
  expect_values(kiln_isclose(p, q, 1e-5, 1e-8, 1), KILN_BOOL, VALUES(1, 1, 1, 0, 0));
  expect_values(kiln_isclose(p, q, 0, 0, 0), KILN_BOOL, VALUES(1, 0, 0, 0, 0));
  kiln_tensor *n1 = kiln_from_data(((int64_t[]){100, 5, -7}), KILN_I64, KILN_SHAPE(3));
  kiln_tensor *n2 = kiln_from_data(((int64_t[]){101, 5, 7}), KILN_I64, KILN_SHAPE(3));
  expect_values(kiln_isclose(n1, n2, 0.01, 0, 0), KILN_BOOL, VALUES(1, 1, 0));
  kiln_scope_end();
}
END_TEST

static void expect_error(kiln_tensor *t, kiln_status st, int line, const char *text) {
  kiln_status got = kiln_status_of(t);
  ck_assert_msg(got == st, "line %d: status %d, wanted %d: %s", line, (int)got, (int)st, kiln_last_error());
  char want[256];
  snprintf(want, sizeof want, "test_ew_ops.c:%d: %s", line, text);
  ck_assert_msg(strstr(kiln_last_error(), want), "message: %s\nwanted: %s", kiln_last_error(), want);
}

START_TEST(composition_errors) {
  kiln_scope_begin();
  kiln_tensor *f = kiln_from_data(((float[]){1, 2, 3}), KILN_F32, KILN_SHAPE(3));
  kiln_tensor *i = kiln_from_data(((int32_t[]){1, 2, 3}), KILN_I32, KILN_SHAPE(3));
  expect_error(kiln_masked_fill(f, i, 1), KILN_ERR_DTYPE, __LINE__, "masked_fill: mask must be a bool tensor, got int32 (3,)");
  kiln_tensor *m2 = kiln_from_data(((bool[]){true, false}), KILN_BOOL, KILN_SHAPE(2));
  expect_error(kiln_masked_fill(f, m2, 1), KILN_ERR_SHAPE, __LINE__, "masked_fill");
  kiln_tensor *m23 = kiln_gts(kiln_from_data(((float[]){1, 2, 3, 4, 5, 6}), KILN_F32, KILN_SHAPE(2, 3)), 2);
  expect_error(kiln_masked_fill(f, m23, 1), KILN_ERR_ARG, __LINE__, "masked_fill: the number of sizes");
  expect_error(kiln_masked_fill(kiln_cast(i, KILN_U8), kiln_gts(i, 1), 300), KILN_ERR_ARG, __LINE__, "masked_fill");
  expect_error(kiln_isclose(f, i, 1e-5, 1e-8, 0), KILN_ERR_DTYPE, __LINE__,
               "isclose: a and b must have one dtype, got float32 and int32");
  expect_error(kiln_isclose(f, f, -1, 0, 0), KILN_ERR_ARG, __LINE__, "isclose: rtol and atol must be >= 0");
  expect_error(kiln_clamp_tensor(f, NULL, NULL), KILN_ERR_ARG, __LINE__,
               "clamp_tensor: at least one of min and max must not be NULL");
  kiln_tensor *f2 = kiln_from_data(((float[]){1, 2}), KILN_F32, KILN_SHAPE(2));
  expect_error(kiln_clamp_tensor(f, f2, NULL), KILN_ERR_SHAPE, __LINE__, "clamp_tensor: shapes (3,) and (2,) cannot be broadcast");
  expect_error(kiln_hardtanh(f, 1, -1), KILN_ERR_ARG, __LINE__, "hardtanh: min_val 1 is greater than max_val -1");
  expect_error(kiln_leaky_relu(i, 0.1), KILN_ERR_DTYPE, __LINE__,
               "leaky_relu: only floating-point tensors are supported, got int32 (3,)");
  expect_error(kiln_frac(i), KILN_ERR_DTYPE, __LINE__, "frac: only floating-point tensors are supported");
  expect_error(kiln_hardswish(i), KILN_ERR_DTYPE, __LINE__, "hardswish:");
  expect_error(kiln_lerp(i, i, f), KILN_ERR_DTYPE, __LINE__, "lerp:");
  expect_error(kiln_lerp(f, f, NULL), KILN_ERR_ARG, __LINE__, "lerp:");
  expect_error(kiln_isnan(NULL), KILN_ERR_ARG, __LINE__, "isnan:");
  kiln_scope_end();
}
END_TEST

static Suite *ew_ops_suite(void) {
  Suite *s = suite_create("ew_ops");
  TCase *tc = tu_tcase(s, "binary");
  tcase_add_loop_test(tc, binary_dtypes, 0, NBIN * NDT);
  tcase_add_loop_test(tc, binary_promotion_shapes, 0, NBIN);
  tcase_add_loop_test(tc, binary_scalars, 0, NBIN);
  tcase_add_loop_test(tc, unary_dtypes, 0, 2 * NDT);
  tc = tu_tcase(s, "values");
  tcase_add_test(tc, integer_division_values);
  tcase_add_test(tc, int_min_by_minus_one);
  tcase_add_test(tc, float_division_values);
  tcase_add_test(tc, bitwise_values);
  tc = tu_tcase(s, "errors");
  tcase_add_test(tc, division_by_zero_fused);
  tcase_add_test(tc, division_by_zero_eager);
  tcase_add_test(tc, division_by_zero_fn);
  tcase_add_test(tc, division_by_number_zero);
  tcase_add_test(tc, integer_to_negative_power);
  tcase_add_test(tc, dtype_errors);
  tc = tu_tcase(s, "compositions");
  tcase_add_loop_test(tc, compositions, 0, C_NCOMP * NDT);
  tcase_add_test(tc, compositions_fuse);
  tcase_add_test(tc, composition_values);
  tcase_add_test(tc, composition_errors);
  return s;
}

KILN_TEST_MAIN(ew_ops_suite)
