/* test_topk_rows.c: top-k of long contiguous f32 rows, where the CPU skips
 * a block of the row that cannot beat the current k-th best: rows made to
 * defeat that test (rising, all equal, nan and -0 in late blocks, only
 * nan) give the values and positions of the reference evaluator, largest
 * and smallest, fused and eager, and hand-worked ones. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

enum { ROWS = 9, COLS = 203, K = 8 };   /* several blocks and a tail per row */

static void fill_row(float *x, int r) {
  for (int j = 0; j < COLS; j++) {
    switch (r) {
    case 0: x[j] = (float)j; break;                            /* each element beats the last */
    case 1: x[j] = (float)-j; break;
    case 2: x[j] = 1.5f; break;                                /* ties only: the first positions */
    case 3: x[j] = j % 2 ? -0.0f : 0.0f; break;                /* -0 equal to +0 */
    case 4: x[j] = j == 150 || j == 40 ? NAN : (float)(j % 17); break;   /* nan the largest */
    case 5: x[j] = NAN; break;
    case 6: x[j] = j == 199 ? INFINITY : j == 120 ? -INFINITY : (float)((j * 37) % 101) - 50; break;
    case 7: x[j] = j < 190 ? 0.0f : 1.0f; break;               /* the winners in the tail */
    default: x[j] = j % 64 == 63 ? 9.0f : (float)(j % 5); break; /* ties at block ends */
    }
  }
}

static kiln_tensor *rows(void) {
  static float x[ROWS][COLS];
  for (int r = 0; r < ROWS; r++) fill_row(x[r], r);
  return kiln_from_data(x, KILN_F32, KILN_SHAPE(ROWS, COLS));
}

typedef struct {
  int largest, indices;
} topk_case;

static kiln_tensor *build_topk(const void *ctx) {
  const topk_case *c = ctx;
  kiln_tensor *v = NULL, *i = NULL;
  kiln_topk(rows(), K, -1, c->largest, 1, &v, &i);
  return c->indices ? i : v;
}

START_TEST(rows_against_the_oracle) {
  for (int largest = 0; largest < 2; largest++)
    for (int indices = 0; indices < 2; indices++) {
      topk_case c = {largest, indices};
      char why[512];
      bool ok = tu_check_fused_eager(build_topk, &c, KILN_NUM_DTYPES, (ref_tol){0, 0}, why, sizeof why);
      ck_assert_msg(ok, "largest %d indices %d: %s", largest, indices, why);
    }
}
END_TEST

/* row 4: the two nans first (by position), then the 16s; smallest: the 0s */
START_TEST(rows_hand_worked) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_select(rows(), 0, 4), *v = NULL, *i = NULL;
  kiln_topk(x, 4, 0, 1, 1, &v, &i);
  TU_EXPECT(v, KILN_SHAPE(4), 0, NAN, NAN, 16, 16);
  TU_EXPECT(i, KILN_SHAPE(4), 0, 40, 150, 16, 33);
  kiln_topk(x, 3, 0, 0, 1, &v, &i);
  TU_EXPECT(v, KILN_SHAPE(3), 0, 0, 0, 0);
  TU_EXPECT(i, KILN_SHAPE(3), 0, 0, 17, 34);
  kiln_topk(kiln_select(rows(), 0, 7), 2, 0, 1, 1, &v, &i);
  TU_EXPECT(i, KILN_SHAPE(2), 0, 190, 191);
  kiln_scope_end();
}
END_TEST

static Suite *topk_suite(void) {
  Suite *s = suite_create("topk_rows");
  TCase *tc = tu_tcase(s, "rows");
  tcase_add_test(tc, rows_against_the_oracle);
  tcase_add_test(tc, rows_hand_worked);
  return s;
}

KILN_TEST_MAIN(topk_suite)
