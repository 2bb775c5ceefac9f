/* test_attention.c: scaled_dot_product_attention's fused kernel (IR_ATTN,
 * codegen_cpu/attention.c) against the reference evaluator's full score
 * matrix and against the plain composition built here from public ops:
 * masks of each kind, GQA, odd sizes, transposed views, fully masked rows
 * (nan), one kernel, and a peak memory that stays O(S*d). The cases are
 * tests/util/attn_cases.c's (the CUDA emulation runs them too). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "ir/alloc.h"
#include "util/attn_cases.h"
#include "util/testutil.h"

static kiln_tensor *sdpa(const void *ctx) { return tu_attn_sdpa(ctx, tu_attn_inputs_of(ctx)); }

/* softmax(q k^T / sqrt(e) + mask) v from matmul, softmax and add (no GQA). */
static kiln_tensor *composition(const tu_attn_case *c, tu_attn_inputs in) {
  kiln_tensor *add = kiln_cast(tu_attn_mask_values(c), c->dt);
  kiln_tensor *scores = kiln_muls(kiln_matmul(in.q, kiln_transpose(in.k, -2, -1)), 1 / sqrt(c->e));
  return kiln_matmul(kiln_softmax(kiln_add(scores, add), -1), in.v);
}

START_TEST(fused_matches_reference) {
  const tu_attn_case *c = &tu_attn_cases[_i];
  char why[512];
  ref_tol tol = c->dt == KILN_F32 ? (ref_tol){2e-5, 2e-5} : (ref_tol){1e-12, 1e-12};
  kiln_scope_begin();
  ck_assert_msg(tu_check_fused_eager(sdpa, c, c->dt, tol, why, sizeof why), "case %d: %s", _i, why);
  kiln_scope_end();
}
END_TEST

START_TEST(fused_matches_composition) {
  const tu_attn_case *c = &tu_attn_cases[_i];
  if (c->hq != c->hkv) return;   /* the composition here has no GQA; the reference covers it */
  kiln_scope_begin();
  tu_attn_inputs in = tu_attn_inputs_of(c);
  kiln_tensor *all[4] = {in.q, in.k, in.v, in.mask};
  for (int i = 0; i < 4; i++) ck_assert_int_eq(all[i] ? kiln_realize(all[i]) : KILN_OK, KILN_OK);
  kiln_tensor *y = tu_attn_sdpa(c, in), *want = composition(c, in);
  ck_assert_uint_eq(tu_kernels_of(y), 1);   /* the transposed data and the broadcast mask are read in place */
  int64_t n = kiln_numel(y);
  ck_assert_int_eq(n, kiln_numel(want));
  const double *g = kiln_data(kiln_cast(y, KILN_F64)), *w = kiln_data(kiln_cast(want, KILN_F64));
  ck_assert_msg(g && w, "%s", kiln_last_error());
  double tol = c->dt == KILN_F32 ? 2e-5 : 1e-12;
  int nans = 0;
  for (int64_t i = 0; i < n; i++) {
    nans += isnan(w[i]);
    if (isnan(w[i])) ck_assert_msg(isnan(g[i]), "case %d [%lld]: got %g, want nan", _i, (long long)i, g[i]);
    else ck_assert_msg(fabs(g[i] - w[i]) <= tol * (1 + fabs(w[i])), "case %d [%lld]: got %.9g, want %.9g", _i,
                       (long long)i, g[i], w[i]);
  }
  ck_assert_int_eq(nans > 0, c->mode >= 2);   /* the masks drop a whole row: torch's nan */
  kiln_scope_end();
}
END_TEST

/* Fully masked rows are nan, the others finite (a float mask of -inf). */
START_TEST(fully_masked_rows_nan) {
  kiln_scope_begin();
  double mv[12] = {-INFINITY, -INFINITY, -INFINITY, 0, -INFINITY, 1, 0, 0, 0, -INFINITY, -INFINITY, -INFINITY};
  kiln_tensor *q = tu_data(KILN_F32, KILN_SHAPE(1, 4, 5), 1, TU_SMALL);
  kiln_tensor *k = tu_data(KILN_F32, KILN_SHAPE(1, 3, 5), 2, TU_SMALL);
  kiln_tensor *v = tu_data(KILN_F32, KILN_SHAPE(1, 3, 2), 3, TU_SMALL);
  kiln_tensor *m = kiln_cast(kiln_from_data(mv, KILN_F64, KILN_SHAPE(4, 3)), KILN_F32);
  const double *y = kiln_data(kiln_cast(kiln_scaled_dot_product_attention(q, k, v, m, 0, 0, 0), KILN_F64));
  ck_assert_msg(y, "%s", kiln_last_error());
  for (int i = 0; i < 8; i++) ck_assert_msg(isnan(y[i]) == (i < 2 || i >= 6), "[%d] = %g", i, y[i]);
  kiln_scope_end();
}
END_TEST

/* A projection's output viewed as heads (reshape + permute of a matmul)
 * is stored by its GEMM and read by the attention kernel through strides:
 * q, k and v projections, then one attention kernel. */
START_TEST(projections_then_one_kernel) {
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(2, 10, 8), 5, TU_SMALL);
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(8, 8), 6, TU_SMALL);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  ck_assert_int_eq(kiln_realize(w), KILN_OK);
  kiln_tensor *heads = kiln_permute(kiln_reshape(kiln_matmul(x, w), KILN_SHAPE(2, 10, 2, 4)), KILN_SHAPE(0, 2, 1, 3));
  kiln_tensor *y = kiln_scaled_dot_product_attention(heads, heads, heads, NULL, 1, 0, 0);
  ck_assert_uint_eq(tu_kernels_of(y), 2);
  kiln_scope_end();
}
END_TEST

/* Where the fused kernel does not apply the composition computes it (more
 * than one kernel), with the same values: f16 inputs, and k, v whose batch
 * dim broadcasts against q's. */
static kiln_tensor *half_inputs(const void *ctx) {
  (void)ctx;
  kiln_tensor *q = tu_data(KILN_F16, KILN_SHAPE(2, 5, 4), 11, TU_SMALL), *k = tu_data(KILN_F16, KILN_SHAPE(2, 6, 4), 12, TU_SMALL);
  return kiln_scaled_dot_product_attention(q, k, tu_data(KILN_F16, KILN_SHAPE(2, 6, 3), 13, TU_SMALL), NULL, 1, 0, 0);
}

static kiln_tensor *broadcast_batch(const void *ctx) {
  (void)ctx;
  kiln_tensor *q = tu_data(KILN_F32, KILN_SHAPE(3, 5, 4), 14, TU_SMALL), *k = tu_data(KILN_F32, KILN_SHAPE(1, 6, 4), 15, TU_SMALL);
  return kiln_scaled_dot_product_attention(q, k, tu_data(KILN_F32, KILN_SHAPE(1, 6, 3), 16, TU_SMALL), NULL, 0, 0, 0);
}

START_TEST(composition_where_not_fused) {
  char why[512];
  kiln_scope_begin();
  ck_assert_uint_gt(tu_kernels_of(half_inputs(NULL)), 1);
  ck_assert_uint_gt(tu_kernels_of(broadcast_batch(NULL)), 1);
  ck_assert_msg(tu_check_fused_eager(half_inputs, NULL, KILN_F16, ref_tol_dtype(KILN_F16), why, sizeof why), "%s", why);
  ck_assert_msg(tu_check_fused_eager(broadcast_batch, NULL, KILN_F32, (ref_tol){2e-5, 2e-5}, why, sizeof why), "%s", why);
  kiln_scope_end();
}
END_TEST

/* Head dims of 200 (f64) need a scratch too big for the stack: when its
 * allocation fails, the rows are computed one at a time without it, with
 * the same values. Every allocation of a realize is failed in turn (the
 * kernel compiled before): each run ends right or with KILN_ERR_MEMORY,
 * and at least one failed allocation (the scratch) still ends right. */
START_TEST(scratch_allocation_failure) {
  kiln_scope_begin();
  kiln_tensor *q = tu_data(KILN_F64, KILN_SHAPE(1, 50, 200), 21, TU_SMALL);
  kiln_tensor *k = tu_data(KILN_F64, KILN_SHAPE(1, 70, 200), 22, TU_SMALL);
  kiln_tensor *v = tu_data(KILN_F64, KILN_SHAPE(1, 70, 200), 23, TU_SMALL);
  kiln_tensor *in[3] = {q, k, v};
  for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_realize(in[i]), KILN_OK);
  const double *want = kiln_data(kiln_scaled_dot_product_attention(q, k, v, NULL, 1, 0, 0));
  ck_assert_msg(want, "%s", kiln_last_error());
  ir_alloc_fail_at(0, false);
  ck_assert_int_eq(kiln_realize(kiln_scaled_dot_product_attention(q, k, v, NULL, 1, 0, 0)), KILN_OK);
  uint64_t n = ir_alloc_count();
  int recovered = 0;
  for (uint64_t at = 1; at <= n; at++) {
    kiln_tensor *y = kiln_scaled_dot_product_attention(q, k, v, NULL, 1, 0, 0);
    ir_alloc_fail_at(at, false);
    kiln_status st = kiln_realize(y);
    bool hit = ir_alloc_failed() > 0;
    ir_alloc_fail_at(0, false);
    ck_assert_msg(st == KILN_OK || st == KILN_ERR_MEMORY, "allocation %llu: %s", (unsigned long long)at, kiln_last_error());
    if (st != KILN_OK) continue;
    const double *got = kiln_data(y);
    for (int i = 0; i < 50 * 200; i++) ck_assert_msg(fabs(got[i] - want[i]) <= 1e-12, "[%d] %g vs %g", i, got[i], want[i]);
    recovered += hit;
  }
  ck_assert_int_ge(recovered, 1);
  kiln_scope_end();
}
END_TEST

/* Peak memory of realizing attention over realized q, k, v. */
static uint64_t peak_of(kiln_tensor *y) {
  kiln_memory_stats_t before, after;
  ck_assert_int_eq(kiln_memory_stats(kiln_cpu_device(), &before), KILN_OK);
  kiln_reset_peak_memory();
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_int_eq(kiln_memory_stats(kiln_cpu_device(), &after), KILN_OK);
  return after.peak_bytes - before.allocated_bytes;
}

/* S = 1024, d = 16, 2 heads: the scores would be 8 MiB, q, k, v and the
 * output 128 KiB each. The fused kernel allocates its output only; the
 * composition stores the scores (which shows the check can fail). */
START_TEST(peak_memory_is_o_s_d) {
  kiln_scope_begin();
  const int64_t h = 2, s = 1024, d = 16, out = h * s * d * 4, scores = h * s * s * 4;
  kiln_tensor *q = tu_data(KILN_F32, KILN_SHAPE(h, s, d), 7, TU_SMALL);
  kiln_tensor *k = tu_data(KILN_F32, KILN_SHAPE(h, s, d), 8, TU_SMALL);
  kiln_tensor *v = tu_data(KILN_F32, KILN_SHAPE(h, s, d), 9, TU_SMALL);
  kiln_tensor *inputs[3] = {q, k, v};
  for (int i = 0; i < 3; i++) ck_assert_int_eq(kiln_realize(inputs[i]), KILN_OK);
  uint64_t fused = peak_of(kiln_scaled_dot_product_attention(q, k, v, NULL, 1, 0, 0));
  ck_assert_msg(fused <= (uint64_t)(2 * out), "fused attention peaked at %llu bytes", (unsigned long long)fused);
  kiln_tensor *sc = kiln_muls(kiln_matmul(q, kiln_transpose(k, -2, -1)), 0.25);
  uint64_t plain = peak_of(kiln_matmul(kiln_softmax(sc, -1), v));
  ck_assert_msg(plain >= (uint64_t)scores, "the composition peaked at %llu bytes", (unsigned long long)plain);
  kiln_scope_end();
}
END_TEST

static Suite *attention_suite(void) {
  Suite *s = suite_create("attention");
  TCase *t = tcase_create("fused");
  tcase_set_timeout(t, 120);
  tcase_add_loop_test(t, fused_matches_reference, 0, tu_attn_ncases);
  tcase_add_loop_test(t, fused_matches_composition, 0, tu_attn_ncases);
  tcase_add_test(t, fully_masked_rows_nan);
  tcase_add_test(t, projections_then_one_kernel);
  tcase_add_test(t, composition_where_not_fused);
  tcase_add_test(t, scratch_allocation_failure);
  tcase_add_test(t, peak_memory_is_o_s_d);
  suite_add_tcase(s, t);
  return s;
}

KILN_TEST_MAIN(attention_suite)
