/* test_robust.c: kiln attacked the way SQLite's and PyTorch's suites attack
 * their libraries (issue 12's reproductions): graphs deeper than any C stack,
 * sizes that overflow int64, wrong answers that must become errors or
 * PyTorch's answer, messages that name what the user called, handles used
 * after they were freed. */
#include "check_main.h"
#include "util/testutil.h"

#include <stdio.h>
#include <string.h>

/* x + 1 + 1 + ... (n times) on an int32 tensor of zeros: integer adds, so
 * LLVM folds the chain and the test stays fast; kiln's own walks see all n. */
static kiln_tensor *add_chain(int n) {
  int32_t zero[4] = {0};
  kiln_tensor *x = kiln_from_data(zero, KILN_I32, KILN_SHAPE(4));
  for (int i = 0; i < n; i++) {
    kiln_tensor *y = kiln_adds(x, 1);
    kiln_release(x);
    x = y;
  }
  return x;
}

static void expect_all(kiln_tensor *x, int32_t want) {
  int32_t got[4];
  ck_assert_int_eq(kiln_copy_to_host(x, got, sizeof got), KILN_OK);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(got[i], want);
}

/* ---- deep graphs ---------------------------------------------------------- */
/* 25,000 ops in one kernel: lowering walks the chain on its own stack. */
START_TEST(chain_of_25000_realizes) {
  kiln_tensor *x = add_chain(25000);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  expect_all(x, 25000);
  kiln_release(x);
}
END_TEST

/* 250,000 ops never asked for: the automatic realize at KILN_MAX_PENDING
 * (100,000) runs several times on the way, and the release of the rest is iterative. */
START_TEST(chain_of_250000_auto_realizes) {
  kiln_reset_stats();
  kiln_tensor *x = add_chain(250000);
  ck_assert_uint_ge(kiln_stats().auto_realizes, 2);
  expect_all(x, 250000);
  kiln_release(x);
}
END_TEST

/* A 25,000-op chain never realized is dumped and freed without recursion. */
START_TEST(chain_dumped_and_freed) {
  kiln_tensor *x = add_chain(25000);
  FILE *out = tmpfile();
  ck_assert_int_eq(kiln_dump_graph(x, out, KILN_FMT_TEXT), KILN_OK);
  ck_assert_int_gt(ftell(out), 25000 * 10);
  fclose(out);
  kiln_release(x);
}
END_TEST

static Suite *robust_suite(void) {
  Suite *s = suite_create("robust");
  TCase *deep = tu_tcase(s, "deep");
  tcase_add_test(deep, chain_of_25000_realizes);
  tcase_add_test(deep, chain_of_250000_auto_realizes);
  tcase_add_test(deep, chain_dumped_and_freed);
  return s;
}

KILN_TEST_MAIN(robust_suite)
