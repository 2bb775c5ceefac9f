/* test_kernel_checks.c: the CPU's branch-free kernel checks (a loop ORs
 * its failures into a flag and re-scans its range only when one is set)
 * still report the first failure of a long, vectorized loop exactly; and
 * the integer division that vectorizes (an f64 quotient up to 32 bits) is
 * exact at the extremes of every dtype, fused and eager. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

/* Below the runtime's smallest parallel chunk, so one thread runs the loop
 * and the first failure in loop order is the one reported. */
enum { N = 5003 };

/* a // b for b of ones with zeros at the given positions (-1 ends). */
static kiln_tensor *divide_by_zeros_at(const int *zeros, int *line) {
  int32_t *a = malloc(sizeof *a * N), *b = malloc(sizeof *b * N);
  ck_assert(a && b);
  for (int i = 0; i < N; i++) a[i] = i - 2000, b[i] = i % 2 ? -3 : 7;
  for (; *zeros >= 0; zeros++) b[*zeros] = 0;
  kiln_tensor *ta = kiln_from_data(a, KILN_I32, KILN_SHAPE(N)), *tb = kiln_from_data(b, KILN_I32, KILN_SHAPE(N));
  free(a);
  free(b);
  *line = __LINE__ + 1;
  return kiln_cast(kiln_bitwise_and(kiln_floor_divide(ta, tb), kiln_remainder(ta, tb)), KILN_F32);
}

/* Realizing t fails at line's floor_divide at element where. */
static void expect_zero_division(kiln_tensor *t, int line, const char *where) {
  ck_assert_int_eq(kiln_realize(t), KILN_ERR_VALUE);
  char want[256];
  snprintf(want, sizeof want, "test_kernel_checks.c:%d: floor_divide: integer division by zero (ZeroDivisionError) at element %s",
           line, where);
  ck_assert_msg(strstr(kiln_last_error(), want), "message: %s\nwanted: %s", kiln_last_error(), want);
}

static void expect_first_zero(const int *zeros, const char *where) {
  kiln_scope_begin();
  int line;
  kiln_tensor *y = divide_by_zeros_at(zeros, &line);
  expect_zero_division(y, line, where);
  kiln_scope_end();
}

/* the first of several zeros, in the vector body and in the loop's tail;
 * eager too (each op its own kernel) */
START_TEST(first_failure_of_a_long_loop) {
  expect_first_zero((const int[]){611, 612, 4000, -1}, "611 of int32 (5003,)");
  expect_first_zero((const int[]){N - 1, -1}, "5002 of int32 (5003,)");
  expect_first_zero((const int[]){0, N - 1, -1}, "0 of int32 (5003,)");
  kiln_set_eager(1);
  expect_first_zero((const int[]){3333, 4444, -1}, "3333 of int32 (5003,)");
  kiln_set_eager(0);
}
END_TEST

/* A divisor that is a row's sum read in the loop of the division: a check
 * reading an accumulator keeps the branching form. */
START_TEST(divisor_from_a_reduction) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(((int32_t[]){5, 6, 7, 8, 9, 10}), KILN_I32, KILN_SHAPE(2, 3));
  kiln_tensor *b = kiln_from_data(((int32_t[]){1, 1, 1, 2, -1, -1}), KILN_I32, KILN_SHAPE(2, 3));
  kiln_tensor *s = kiln_cast(kiln_sum_dims(b, KILN_DIMS(1), 1), KILN_I32);   /* int64 sums */
  TU_EXPECT(kiln_floor_divide(a, kiln_adds(s, 1)), KILN_SHAPE(2, 3), 0, 1, 1, 1, 8, 9, 10);
  expect_zero_division(kiln_floor_divide(a, s), __LINE__, "3 of int32 (2,3)");
  kiln_scope_end();
}
END_TEST

/* ---- exact quotients at the extremes ------------------------------------ */
typedef struct {
  ir_op op;
  kiln_dtype dt;
} div_case;

/* Every pair of extremes of dt (both signs, 0 left out of the divisors),
 * long enough for the vector loop. */
static kiln_tensor *extremes(kiln_dtype dt, bool divisor) {
  const ir_dtype_info *d = &ir_dtypes[dt];
  int64_t hi = (int64_t)((UINT64_C(1) << (8 * d->size - (d->is_signed ? 1 : 0))) - 1);   /* u8: 255 */
  int64_t lo = d->is_signed ? -hi - 1 : 0;
  const int64_t v[] = {lo, lo + 1, hi, hi - 1, hi / 2, lo / 3, 1, -1, 2, -2, 3, -7, 46341, 65537, 0, 99991};
  enum { NV = sizeof v / sizeof *v };
  unsigned char *x = malloc(8 * NV * NV);
  ck_assert(x);
  for (int i = 0; i < NV * NV; i++) {
    int64_t e = v[divisor ? i % NV : i / NV];
    if (e < lo || e > hi || (divisor && e == 0)) e = divisor ? 5 : hi - 3;   /* out of dt: a value in it */
    memcpy(x + (size_t)i * d->size, &e, d->size);   /* the low bytes (little-endian) */
  }
  kiln_tensor *t = kiln_from_data(x, dt, KILN_SHAPE(NV * NV));
  free(x);
  return t;
}

static kiln_tensor *build_division(const void *ctx) {
  const div_case *c = ctx;
  return tu_binary(c->op)(__FILE__, __LINE__, extremes(c->dt, false), extremes(c->dt, true));
}

START_TEST(quotients_at_the_extremes) {
  static const ir_op ops[] = {IR_FLOOR_DIVIDE, IR_TRUNC_DIVIDE, IR_REMAINDER, IR_FMOD};
  static const kiln_dtype dts[] = {KILN_U8, KILN_I8, KILN_I16, KILN_I32, KILN_I64};
  for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
      div_case c = {ops[o], dts[d]};
      char why[512];
      bool ok = tu_check_fused_eager(build_division, &c, dts[d], (ref_tol){0, 0}, why, sizeof why);
      ck_assert_msg(ok, "%s %s: %s", ir_ops[ops[o]].name, kiln_dtype_name(dts[d]), why);
    }
}
END_TEST

/* hand-worked: INT32_MIN // -1 wraps, floor rounds toward -inf, the
 * remainder takes the divisor's sign */
START_TEST(quotients_hand_worked) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(((int32_t[]){INT32_MIN, INT32_MIN, INT32_MAX, -7, 7, INT32_MAX}), KILN_I32,
                                  KILN_SHAPE(6));
  kiln_tensor *b = kiln_from_data(((int32_t[]){-1, 3, -2, 2, -2, INT32_MAX}), KILN_I32, KILN_SHAPE(6));
  TU_EXPECT(kiln_floor_divide(a, b), KILN_SHAPE(6), 0, INT32_MIN, -715827883, -1073741824, -4, -4, 1);
  TU_EXPECT(kiln_remainder(a, b), KILN_SHAPE(6), 0, 0, 1, -1, 1, -1, 0);
  TU_EXPECT(kiln_trunc_divide(a, b), KILN_SHAPE(6), 0, INT32_MIN, -715827882, -1073741823, -3, -3, 1);
  TU_EXPECT(kiln_fmod(a, b), KILN_SHAPE(6), 0, 0, -2, 1, -1, 1, 0);
  kiln_scope_end();
}
END_TEST

static Suite *checks_suite(void) {
  Suite *s = suite_create("kernel_checks");
  TCase *tc = tu_tcase(s, "first_failure");
  tcase_add_test(tc, first_failure_of_a_long_loop);
  tcase_add_test(tc, divisor_from_a_reduction);
  tc = tu_tcase(s, "division");
  tcase_add_test(tc, quotients_at_the_extremes);
  tcase_add_test(tc, quotients_hand_worked);
  return s;
}

KILN_TEST_MAIN(checks_suite)
