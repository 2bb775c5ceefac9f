/* test_assign.c: kiln_assign (frontend/assign.c): values written in place,
 * broadcast and cast; what sees the new value (views, borrowed memory, what
 * is built afterwards) and what keeps the old one (pending tensors and
 * histories built before the assignment); memory that does not grow over a
 * loop of updates; the errors. */
#include "check_main.h"
#include "util/testutil.h"

#include <math.h>
#include <string.h>

static kiln_tensor *f32s(int n, const float *v) { return kiln_from_data(v, KILN_F32, KILN_SHAPE(n)); }

START_TEST(writes_broadcast_and_cast) {
  kiln_scope_begin();
  kiln_tensor *p = f32s(3, (const float[]){1, 2, 3});
  ck_assert_int_eq(kiln_assign(p, kiln_from_data(((const double[]){4.25, 5, 6}), KILN_F64, KILN_SHAPE(3))), KILN_OK);
  TU_EXPECT(p, KILN_SHAPE(3), 0, 4.25, 5, 6);
  ck_assert_int_eq(kiln_assign(p, kiln_scalar(7, KILN_I64)), KILN_OK);   /* broadcast, cast */
  TU_EXPECT(p, KILN_SHAPE(3), 0, 7, 7, 7);
  ck_assert_int_eq(kiln_assign(p, kiln_mul(p, kiln_arange(1, 4, 1))), KILN_OK);   /* reads itself */
  TU_EXPECT(p, KILN_SHAPE(3), 0, 7, 14, 21);
  kiln_tensor *q = kiln_add(p, p);   /* pending: realized first, then written */
  ck_assert_int_eq(kiln_assign(q, kiln_zeros(KILN_SHAPE(3), KILN_F32)), KILN_OK);
  TU_EXPECT(q, KILN_SHAPE(3), 0, 0, 0, 0);
  TU_EXPECT(p, KILN_SHAPE(3), 0, 7, 14, 21);
  kiln_scope_end();
}
END_TEST

/* Pending tensors built before the assignment keep the old value; those
 * built after it see the new one; a realized view and borrowed memory see
 * the new one. */
START_TEST(value_semantics) {
  kiln_scope_begin();
  float mem[4] = {1, 2, 3, 4};
  kiln_tensor *p = kiln_from_buffer(mem, KILN_F32, KILN_SHAPE(4));
  ck_assert_int_eq(kiln_assign(p, p), KILN_OK);   /* marks p: later readers are protected */
  kiln_tensor *view = kiln_slice(p, 0, 1, 3, 1);
  ck_assert_int_eq(kiln_realize(view), KILN_OK);
  kiln_tensor *before = kiln_muls(p, 10);   /* pending over the old p */
  ck_assert_int_eq(kiln_assign(p, kiln_adds(p, 1)), KILN_OK);
  kiln_tensor *after = kiln_muls(p, 10);
  TU_EXPECT(before, KILN_SHAPE(4), 0, 10, 20, 30, 40);
  TU_EXPECT(after, KILN_SHAPE(4), 0, 20, 30, 40, 50);
  TU_EXPECT(view, KILN_SHAPE(2), 0, 3, 4);
  ck_assert(mem[0] == 2 && mem[3] == 5);
  /* an assignment into a view writes its base's storage (p[1:3] = 0) */
  ck_assert_int_eq(kiln_assign(kiln_slice(p, 0, 1, 3, 1), kiln_scalar(0, KILN_F32)), KILN_OK);
  ck_assert(mem[0] == 2 && mem[1] == 0 && mem[2] == 0 && mem[3] == 5);
  kiln_scope_end();
}
END_TEST

/* A realized tensor's history keeps what it read: its gradient after p
 * changed is the gradient at the old p. */
START_TEST(histories_keep_the_old_value) {
  kiln_scope_begin();
  kiln_tensor *p = kiln_from_data(((const double[]){0, 1}), KILN_F64, KILN_SHAPE(2)), *g;
  ck_assert_int_eq(kiln_assign(p, p), KILN_OK);
  kiln_tensor *y = kiln_sum(kiln_exp(p));
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_int_eq(kiln_assign(p, kiln_scalar(5, KILN_F64)), KILN_OK);
  ck_assert_int_eq(kiln_grad(y, NULL, 1, &p, &g), KILN_OK);
  TU_EXPECT(g, KILN_SHAPE(2), 1e-12, 1, exp(1.0));
  kiln_scope_end();
}
END_TEST

/* p = p * 0.5 + 1, 200 times, intermediates released: no copy is made
 * and nothing accumulates. */
START_TEST(loop_of_updates_holds_nothing) {
  kiln_tensor *p = kiln_zeros(KILN_SHAPE(1 << 16), KILN_F32);
  ck_assert_int_eq(kiln_realize(p), KILN_OK);
  kiln_memory_stats_t before, after;
  for (int i = 0; i < 200; i++) {
    kiln_scope_begin();
    ck_assert_int_eq(kiln_assign(p, kiln_adds(kiln_muls(p, 0.5), 1)), KILN_OK);
    kiln_scope_end();
    if (i == 9) kiln_memory_stats(kiln_default_device(), &before);
  }
  kiln_memory_stats(kiln_default_device(), &after);
  ck_assert_uint_eq(after.allocated_bytes, before.allocated_bytes);
  kiln_tensor *first = kiln_select(p, 0, 0);
  ck_assert_double_eq_tol(kiln_item(first), 2, 1e-6);
  kiln_release(first);
  kiln_release(p);
}
END_TEST

START_TEST(errors) {
  kiln_scope_begin();
  kiln_tensor *p = f32s(3, (const float[]){1, 2, 3});
  ck_assert_int_eq(kiln_assign(NULL, p), KILN_ERR_ARG);
  ck_assert_msg(strstr(kiln_last_error(), "test_assign.c:") && strstr(kiln_last_error(), "assign: argument is NULL"), "%s", kiln_last_error());
  ck_assert_int_eq(kiln_assign(p, kiln_zeros(KILN_SHAPE(2), KILN_F32)), KILN_ERR_SHAPE);
  ck_assert_msg(strstr(kiln_last_error(), "assign") && strstr(kiln_last_error(), "(2,)"), "%s", kiln_last_error());
  ck_assert_int_eq(kiln_assign(p, kiln_add(p, kiln_zeros(KILN_SHAPE(4), KILN_F32))), KILN_ERR_SHAPE);   /* sticky */
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(3));
  ck_assert_int_eq(kiln_assign(x, p), KILN_ERR_ARG);
  ck_assert_msg(strstr(kiln_last_error(), "a placeholder has no storage"), "%s", kiln_last_error());
  TU_EXPECT(p, KILN_SHAPE(3), 0, 1, 2, 3);   /* a failed assignment writes nothing */
  kiln_scope_end();
}
END_TEST

static Suite *assign_suite(void) {
  Suite *s = suite_create("assign");
  tcase_add_test(tu_tcase(s, "writes_broadcast_and_cast"), writes_broadcast_and_cast);
  tcase_add_test(tu_tcase(s, "value_semantics"), value_semantics);
  tcase_add_test(tu_tcase(s, "histories_keep_the_old_value"), histories_keep_the_old_value);
  tcase_add_test(tu_tcase(s, "loop_of_updates_holds_nothing"), loop_of_updates_holds_nothing);
  tcase_add_test(tu_tcase(s, "errors"), errors);
  return s;
}

KILN_TEST_MAIN(assign_suite)
