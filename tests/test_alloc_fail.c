/* test_alloc_fail.c: allocation failure is a status (SQLite's faultsim). A
 * realistic program (build, fuse, realize, print, a compiled function, a
 * .npy round trip) runs with kiln's Nth allocation failing, for every N it
 * makes, then with every allocation from N on failing: each run ends with
 * the right values or KILN_ERR_MEMORY naming what failed, never another
 * status or an abort, and the same program then runs clean and right.
 * LeakSanitizer (the sanitizer build) checks that no failure leaks. */
#include "check_main.h"
#include "ir/alloc.h"
#include "runtime/rt.h"
#include "util/testutil.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const float av[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {0.5f, -1, 2, 1, 0.25f, -2};
/* By hand: relu(a*b - 1) = [[0,0,5],[3,0.25,0]], its row sums, a @ b^T. */
static const float y_want[6] = {0, 0, 5, 3, 0.25f, 0}, s_want[2] = {5, 3.25f}, m_want[4] = {4.5f, -4.5f, 9, -6.75f};
static char npy_path[64];

/* What a run ended with, and where. */
typedef struct {
  kiln_status st;
  const char *step;
  char msg[512];
} outcome;

static bool failed(outcome *o, const char *step, kiln_status st) {
  if (st == KILN_OK) return false;
  o->st = st;
  o->step = step;
  snprintf(o->msg, sizeof o->msg, "%s", kiln_last_error());
  return true;
}

static void expect_values(kiln_tensor *t, const float *want, int n, const char *what) {
  const float *got = kiln_data(t);
  ck_assert_msg(got, "%s: %s", what, kiln_last_error());
  for (int i = 0; i < n; i++) ck_assert_msg(got[i] == want[i], "%s[%d] = %g, want %g", what, i, got[i], want[i]);
}

/* relu(x*b - 1) and its row sums: the lazy graph and the compiled one. */
static kiln_tensor *fused(kiln_tensor *x, kiln_tensor *b) { return kiln_relu(kiln_subs(kiln_mul(x, b), 1)); }

static bool lazy_part(outcome *o, kiln_tensor *a, kiln_tensor *b) {
  kiln_tensor *y = fused(a, b);
  kiln_tensor *outs[] = {y, kiln_sum_dims(y, 1, (int64_t[]){1}, 0), kiln_matmul(a, kiln_transpose(b, 0, 1))};
  if (failed(o, "realize", kiln_realize_n(3, outs))) return false;
  expect_values(outs[0], y_want, 6, "relu");
  expect_values(outs[1], s_want, 2, "sum");
  expect_values(outs[2], m_want, 4, "matmul");
  char *text = kiln_to_string(outs[1]);
  if (!text) return failed(o, "to_string", KILN_ERR_MEMORY);
  ck_assert_str_eq(text, "tensor([5.0000, 3.2500])");
  free(text);
  if (failed(o, "save_npy", kiln_save_npy(outs[1], npy_path))) return false;
  kiln_tensor *back = kiln_load_npy(npy_path);
  if (failed(o, "load_npy", kiln_status_of(back))) return false;
  expect_values(back, s_want, 2, "load_npy");
  return true;
}

static bool compiled_part(outcome *o, kiln_tensor *a, kiln_tensor *b) {
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(2, 3));
  kiln_tensor *z = kiln_sum_dims(fused(x, b), 1, (int64_t[]){1}, 0);
  kiln_fn *fn = kiln_compile(1, &x, 1, &z);
  if (!fn) return !failed(o, "compile", KILN_ERR_MEMORY);
  kiln_tensor *out = NULL;
  kiln_status st = kiln_fn_run(fn, &a, &out);
  kiln_fn_free(fn);
  if (failed(o, "fn_run", st)) return false;
  expect_values(out, s_want, 2, "fn_run");
  kiln_release(out);
  return true;
}

/* Each run plans its graphs afresh (passes, lowering, planning); the
 * kernels come from the in-memory cache. */
static outcome program(void) {
  outcome o = {KILN_OK, NULL, ""};
  rt_plans_forget();
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3)), *b = kiln_from_data(bv, KILN_F32, KILN_SHAPE(2, 3));
  if (lazy_part(&o, a, b)) compiled_part(&o, a, b);
  kiln_scope_end();
  return o;
}

/* Out of memory is the only failure allowed, and it says so. */
static void check_outcome(const outcome *o, uint64_t n, bool after) {
  if (o->st == KILN_OK) return;
  ck_assert_msg(o->st == KILN_ERR_MEMORY, "N=%llu%s: %s gave status %d: %s", (unsigned long long)n, after ? "+" : "",
                o->step, (int)o->st, o->msg);
  ck_assert_msg(strstr(o->msg, "out of memory"), "N=%llu%s: %s: the message says %s", (unsigned long long)n,
                after ? "+" : "", o->step, o->msg);
}

static void expect_clean(uint64_t n, bool after) {
  outcome o = program();
  ck_assert_msg(o.st == KILN_OK, "after N=%llu%s: %s failed with %d: %s", (unsigned long long)n, after ? "+" : "",
                o.step ? o.step : "?", (int)o.st, o.msg);
}

/* The allocations one clean run makes once kernels, plans and the pool are warm. */
static uint64_t count_allocations(void) {
  snprintf(npy_path, sizeof npy_path, "/tmp/kiln-alloc-fail-%d.npy", (int)getpid());
  expect_clean(0, false);
  ir_alloc_fail_at(0, false);
  expect_clean(0, false);
  uint64_t a = ir_alloc_count();
  ck_assert_uint_gt(a, 50);   /* the program goes through kiln's allocator */
  return a;
}

/* How many allocations a run makes depends a little on what the allocator
 * and the caches keep from earlier runs: N goes up to the most any clean
 * run made. */
static void sweep(bool after) {
  uint64_t a = count_allocations(), failing = 0, injected = 0;
  for (uint64_t n = 1; n <= a; n++) {
    ir_alloc_fail_at(n, after);
    outcome o = program();
    injected += ir_alloc_failed() > 0;
    ir_alloc_fail_at(0, false);
    check_outcome(&o, n, after);
    failing += o.st != KILN_OK;
    expect_clean(n, after);
    if (ir_alloc_count() > a) a = ir_alloc_count();
  }
  fprintf(stderr, "test_alloc_fail: N = 1..%llu%s: %llu runs had an allocation fail, %llu ended in KILN_ERR_MEMORY\n",
          (unsigned long long)a, after ? " (every allocation from N on failing)" : "", (unsigned long long)injected,
          (unsigned long long)failing);
  ck_assert_uint_gt(failing, 0);
  unlink(npy_path);
}

START_TEST(each_allocation_fails_once) { sweep(false); }
END_TEST

START_TEST(every_allocation_from_n_fails) { sweep(true); }
END_TEST

/* The error a user sees names the op that could not be built, where. */
START_TEST(failed_op_names_itself) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(av, KILN_F32, KILN_SHAPE(2, 3));
  ir_alloc_fail_at(1, true);
  kiln_tensor *e = kiln_exp(a);
  int line = __LINE__ - 1;
  ir_alloc_fail_at(0, false);
  ck_assert_int_eq(kiln_status_of(e), KILN_ERR_MEMORY);
  char want[128];
  snprintf(want, sizeof want, "test_alloc_fail.c:%d: exp: out of memory", line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  /* failing one allocation at a time: the first that fails the op is its node's */
  kiln_status st = KILN_OK;
  for (uint64_t n = 1; n < 8 && st == KILN_OK; n++) {
    ir_alloc_fail_at(n, false);
    e = kiln_zeros(KILN_SHAPE(2), KILN_F32);
    line = __LINE__ - 1;
    ir_alloc_fail_at(0, false);
    st = kiln_status_of(e);
  }
  ck_assert_int_eq(st, KILN_ERR_MEMORY);
  snprintf(want, sizeof want, "test_alloc_fail.c:%d: zeros: out of memory", line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  kiln_scope_end();
}
END_TEST

static Suite *alloc_fail_suite(void) {
  Suite *s = suite_create("alloc_fail");
  TCase *tc = tu_tcase(s, "faultsim");
  tcase_add_test(tc, failed_op_names_itself);
  tcase_add_test(tc, each_allocation_fails_once);
  tcase_add_test(tc, every_allocation_from_n_fails);
  return s;
}

KILN_TEST_MAIN(alloc_fail_suite)
