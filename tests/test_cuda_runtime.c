/* test_cuda_runtime.c: the runtime's CUDA device seen from the public API.
 * Without a GPU (CI): CUDA is unavailable with a reason, every use of a CUDA
 * device is a clean error at the user's line, and nothing leaks (the
 * sanitizer build checks). With one: transfers round-trip exactly, kernels
 * on cuda:0 agree with the CPU, kiln_rand gives the same bits on both, and
 * kiln_memory_stats sees the device's memory. The GPU cases print
 * "skipped: no CUDA device" and pass when there is none (Check has no skip),
 * or fail under KILN_REQUIRE_GPU=1 (tu_have_gpu). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "runtime/rt.h"
#include "util/testutil.h"

static const kiln_device cuda0 = {KILN_CUDA, 0};

/* The error message an op built at line l of this file must carry. */
static void expect_error(kiln_tensor *t, kiln_status st, int l, const char *msg) {
  char want[512];
  snprintf(want, sizeof want, "%s:%d: %s", __FILE__, l, msg);
  ck_assert_int_eq(kiln_status_of(t), st);
  ck_assert_str_eq(kiln_last_error(), want);
}

/* ---- without a GPU ---------------------------------------------------------- */
START_TEST(cuda_unavailable_with_reason) {
  if (kiln_cuda_is_available()) return;
  ck_assert_int_eq(kiln_cuda_device_count(), 0);
  ck_assert_str_ne(kiln_cuda_unavailable_reason(), "");
  ck_assert_int_eq(kiln_default_device().type, KILN_CPU);
}
END_TEST

START_TEST(to_cuda_is_an_error_at_the_callers_line) {
  if (kiln_cuda_is_available()) return;
  kiln_scope_begin();
  kiln_tensor *x = kiln_ones(KILN_SHAPE(4), KILN_F32);
  char msg[512];
  snprintf(msg, sizeof msg, "to: CUDA not available: %s", kiln_cuda_unavailable_reason());
  int l = __LINE__; kiln_tensor *g = kiln_to(x, cuda0);
  expect_error(g, KILN_ERR_DEVICE, l, msg);
  ck_assert_int_eq(kiln_realize(g), KILN_ERR_DEVICE);
  kiln_tensor *y = kiln_adds(g, 1);   /* sticky: the first message, the first line */
  expect_error(y, KILN_ERR_DEVICE, l, msg);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);   /* the source is untouched */
  ck_assert_double_eq(kiln_item(kiln_sum(x)), 4);
  kiln_scope_end();
}
END_TEST

START_TEST(to_the_same_device_is_the_tensor) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(0, 6, 1);
  ck_assert_ptr_eq(kiln_cpu(x), x);
  ck_assert_ptr_eq(kiln_to(x, kiln_cpu_device()), x);
  kiln_tensor *y = kiln_keep(kiln_cpu(x));   /* a handle of its own: survives the scope */
  kiln_scope_end();
  kiln_tensor *sum = kiln_sum(y);
  ck_assert_double_eq(kiln_item(sum), 15);
  kiln_release(sum);
  kiln_release(y);
}
END_TEST

START_TEST(to_bad_arguments) {
  kiln_scope_begin();
  int l = __LINE__; kiln_tensor *e = kiln_cpu(NULL);
  expect_error(e, KILN_ERR_ARG, l, "to: argument 1 is NULL");
  kiln_tensor *x = kiln_zeros(KILN_SHAPE(2), KILN_F32);
  l = __LINE__; e = kiln_to(x, ((kiln_device){(kiln_device_type)7, 0}));
  expect_error(e, KILN_ERR_ARG, l, "to: invalid device (type 7, index 0)");
  l = __LINE__; e = kiln_to(x, ((kiln_device){KILN_CPU, 1}));
  expect_error(e, KILN_ERR_ARG, l, "to: invalid device (type 0, index 1)");
  l = __LINE__; e = kiln_to(x, ((kiln_device){KILN_CUDA, 99}));
  ck_assert_int_eq(kiln_status_of(e), KILN_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "to: CUDA not available: "));
  kiln_scope_end();
}
END_TEST

/* Without a GPU no tensor can be on one: this test puts one there by hand,
 * as if kiln_to had, to see what ops that mix devices say. */
START_TEST(mixing_devices_names_both) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_ones(KILN_SHAPE(2, 2), KILN_F32), *g = kiln_ones(KILN_SHAPE(2, 2), KILN_F32);
  g->device = cuda0;
  int l = __LINE__; kiln_tensor *e = kiln_add(a, g);
  expect_error(e, KILN_ERR_DEVICE, l, "add: expected all tensors on one device, found cpu and cuda:0");
  l = __LINE__; e = kiln_where(kiln_gts(g, 0), a, a);
  expect_error(e, KILN_ERR_DEVICE, l, "where: expected all tensors on one device, found cuda:0 and cpu");
  l = __LINE__; e = kiln_matmul(a, g);
  expect_error(e, KILN_ERR_DEVICE, l, "matmul: expected all tensors on one device, found cpu and cuda:0");
  g->device = kiln_cpu_device();
  kiln_scope_end();
}
END_TEST

START_TEST(memory_stats_of_cuda) {
  kiln_memory_stats_t s;
  if (kiln_cuda_is_available()) {
    ck_assert_int_eq(kiln_memory_stats(cuda0, &s), KILN_OK);
    return;
  }
  char want[512];
  snprintf(want, sizeof want, "memory_stats: CUDA not available: %s", kiln_cuda_unavailable_reason());
  ck_assert_int_eq(kiln_memory_stats(cuda0, &s), KILN_ERR_DEVICE);
  ck_assert_str_eq(kiln_last_error(), want);
  ck_assert_int_eq(kiln_memory_stats(kiln_cpu_device(), NULL), KILN_ERR_ARG);
  ck_assert_int_eq(kiln_memory_stats(((kiln_device){(kiln_device_type)5, 0}), &s), KILN_ERR_ARG);
}
END_TEST

START_TEST(empty_cache_is_harmless) {
  kiln_empty_cache();   /* nothing cached yet */
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(0, 1000, 1);
  kiln_tensor *y = kiln_muls(x, 2);
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  kiln_release(kiln_muls(y, 3));   /* a freed block lands in the cache */
  kiln_empty_cache();
  kiln_memory_stats_t s;
  ck_assert_int_eq(kiln_memory_stats(kiln_cpu_device(), &s), KILN_OK);
  ck_assert_uint_eq(s.reserved_bytes, s.allocated_bytes);
  ck_assert_double_eq(kiln_item(kiln_sum(y)), 999000);   /* live tensors keep their data */
  kiln_scope_end();
  kiln_empty_cache();
}
END_TEST

/* ---- on a GPU (tu_have_gpu: skipped without one unless KILN_REQUIRE_GPU=1) -- */

/* t's values on the host, as f64. */
static void host_values(kiln_tensor *t, double *out) {
  kiln_tensor *h = kiln_cast(kiln_cpu(t), KILN_F64);
  ck_assert_msg(kiln_copy_to_host(h, out, (size_t)kiln_numel(h) * sizeof(double)) == KILN_OK, "%s",
                kiln_last_error());
}

/* a and b (same shape, any devices) agree to rtol, NaNs in the same places. */
static void expect_close(kiln_tensor *a, kiln_tensor *b, double rtol) {
  int64_t n = kiln_numel(a);
  ck_assert_int_eq(n, kiln_numel(b));
  double *x = malloc(sizeof *x * (size_t)(n + 1)), *y = malloc(sizeof *y * (size_t)(n + 1));
  ck_assert(x && y);
  host_values(a, x);
  host_values(b, y);
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg((isnan(x[i]) && isnan(y[i])) || fabs(x[i] - y[i]) <= rtol * fmax(1, fabs(x[i])),
                  "element %lld: %.17g vs %.17g", (long long)i, x[i], y[i]);
  free(x);
  free(y);
}

/* Bytes of the CPU tensors a and b are equal. */
static void expect_same_bits(kiln_tensor *a, kiln_tensor *b) {
  const void *p = kiln_data(a), *q = kiln_data(b);
  ck_assert_msg(p && q, "%s", kiln_last_error());
  ck_assert_int_eq(memcmp(p, q, (size_t)kiln_numel(a) * kiln_dtype_size(kiln_dtype_of(a))), 0);
}

/* Small (queued straight), large (pinned staging, several chunks) and a
 * strided view (copied with its storage) come back bit for bit. */
START_TEST(transfer_round_trip) {
  if (!tu_have_gpu()) return;
  kiln_scope_begin();
  int64_t sizes[] = {1, 1000, 3 << 20};
  for (int i = 0; i < 3; i++) {
    kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(sizes[i]), 11 + i, TU_FULL);
    kiln_tensor *g = kiln_to(x, cuda0);
    ck_assert_int_eq(kiln_device_of(g).type, KILN_CUDA);
    kiln_tensor *back = kiln_cpu(g);
    ck_assert_int_eq(kiln_realize(back), KILN_OK);
    expect_same_bits(x, back);
  }
  kiln_tensor *m = tu_data(KILN_I32, KILN_SHAPE(37, 53), 5, TU_FULL);
  kiln_tensor *t = kiln_T(m);
  ck_assert_int_eq(kiln_realize(t), KILN_OK);   /* a strided view of m's buffer */
  kiln_tensor *back = kiln_cpu(kiln_to(t, cuda0));
  ck_assert_int_eq(kiln_realize(back), KILN_OK);
  expect_same_bits(t, back);   /* kiln_data compacts both */
  kiln_scope_end();
}
END_TEST

static kiln_tensor *w1(kiln_tensor *a, kiln_tensor *b, kiln_tensor *c) {
  return kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(a));
}

START_TEST(elementwise_and_reductions_match_the_cpu) {
  if (!tu_have_gpu()) return;
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(300, 257), 1, TU_SMALL);
  kiln_tensor *b = tu_data(KILN_F32, KILN_SHAPE(300, 257), 2, TU_SMALL);
  kiln_tensor *c = tu_data(KILN_F32, KILN_SHAPE(257), 3, TU_SMALL);
  kiln_tensor *ga = kiln_to(a, cuda0), *gb = kiln_to(b, cuda0), *gc = kiln_to(c, cuda0);
  kiln_tensor *y = w1(a, b, c), *gy = w1(ga, gb, gc);
  ck_assert_int_eq(kiln_device_of(gy).type, KILN_CUDA);
  expect_close(y, gy, 1e-6);
  expect_close(kiln_sum_dims(y, KILN_DIMS(1), 0), kiln_sum_dims(gy, KILN_DIMS(1), 0), 1e-5);
  expect_close(kiln_max(a), kiln_max(ga), 0);
  expect_close(kiln_softmax(a, -1), kiln_softmax(ga, -1), 1e-6);
  expect_close(kiln_argmin_dim(b, 0, 0), kiln_argmin_dim(gb, 0, 0), 0);
  kiln_scope_end();
}
END_TEST

/* Full reductions long enough for the whole grid (codegen_cuda/emit.c:
 * every block's result through the scratch to the last block), twice so the
 * second launch finds the scratch's counter reset; elementwise kernels on
 * the vector path, aligned and through an offset view (the fallback). */
START_TEST(grid_reductions_and_vectors_match_the_cpu) {
  if (!tu_have_gpu()) return;
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(1 << 22), 1, TU_SMALL), *g = kiln_to(x, cuda0);
  for (int rep = 0; rep < 2; rep++) {
    expect_close(kiln_sum(x), kiln_sum(g), 1e-5);
    expect_close(kiln_mean(x), kiln_mean(g), 1e-5);
    expect_close(kiln_argmax(x), kiln_argmax(g), 0);
    expect_close(kiln_min(x), kiln_min(g), 0);
  }
  expect_close(kiln_adds(x, 1), kiln_adds(g, 1), 0);
  expect_close(kiln_adds(kiln_slice(x, 0, 3, 1 << 22, 1), 1), kiln_adds(kiln_slice(g, 0, 3, 1 << 22, 1), 1), 0);
  kiln_scope_end();
}
END_TEST

/* KILN_VALIDATE (runtime/validate.c): every kernel checked against the CPU
 * back end passes. (rt_validate's reports are tested without a GPU in
 * test_runtime_behaviour.c.) */
START_TEST(validate_passes_on_correct_kernels) {
  if (!tu_have_gpu()) return;
  rt_opts()->validate = true;
  kiln_scope_begin();
  kiln_tensor *a = kiln_to(tu_data(KILN_F32, KILN_SHAPE(300, 257), 1, TU_SMALL), cuda0);
  kiln_tensor *b = kiln_to(tu_data(KILN_F32, KILN_SHAPE(300, 257), 2, TU_SMALL), cuda0);
  kiln_tensor *c = kiln_to(tu_data(KILN_F32, KILN_SHAPE(257), 3, TU_SMALL), cuda0);
  kiln_tensor *ys[] = {w1(a, b, c), kiln_softmax(a, -1), kiln_sum(b), kiln_argmin_dim(b, 0, 0)};
  for (int i = 0; i < 4; i++) ck_assert_msg(kiln_realize(ys[i]) == KILN_OK, "%d: %s", i, kiln_last_error());
  kiln_scope_end();
  rt_opts()->validate = false;
}
END_TEST

/* Matrix products go to cuBLASLt (codegen_cuda/gemm.c): transposes read in
 * place, batches (one broadcast), the epilogues cuBLASLt applies (bias,
 * relu, tanh gelu), one it does not (the exact gelu runs in a rest kernel),
 * f16. cuBLASLt may sum in another order and approximate its tanh: looser
 * tolerances there. */
START_TEST(matmul_matches_the_cpu) {
  if (!tu_have_gpu()) return;
  kiln_scope_begin();
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(64, 32), 1, TU_SMALL);
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(48, 32), 2, TU_SMALL);
  kiln_tensor *b = tu_data(KILN_F32, KILN_SHAPE(48), 3, TU_SMALL);
  kiln_tensor *bt = tu_data(KILN_F32, KILN_SHAPE(5, 32, 48), 4, TU_SMALL);
  kiln_tensor *gx = kiln_to(x, cuda0), *gw = kiln_to(w, cuda0), *gb = kiln_to(b, cuda0), *gbt = kiln_to(bt, cuda0);
  expect_close(kiln_matmul(x, kiln_T(w)), kiln_matmul(gx, kiln_T(gw)), 1e-5);
  expect_close(kiln_matmul(kiln_T(w), kiln_T(x)), kiln_matmul(kiln_T(gw), kiln_T(gx)), 1e-5);
  expect_close(kiln_matmul(x, bt), kiln_matmul(gx, gbt), 1e-5);
  expect_close(kiln_linear(x, w, b), kiln_linear(gx, gw, gb), 1e-5);
  expect_close(kiln_relu(kiln_linear(x, w, b)), kiln_relu(kiln_linear(gx, gw, gb)), 1e-5);
  expect_close(kiln_gelu_tanh(kiln_linear(x, w, b)), kiln_gelu_tanh(kiln_linear(gx, gw, gb)), 1e-3);
  expect_close(kiln_gelu(kiln_linear(x, w, b)), kiln_gelu(kiln_linear(gx, gw, gb)), 1e-5);
  kiln_tensor *h = kiln_cast(x, KILN_F16), *hw = kiln_cast(w, KILN_F16), *hb = kiln_cast(b, KILN_F16);
  expect_close(kiln_relu(kiln_linear(h, hw, hb)),
               kiln_relu(kiln_linear(kiln_to(h, cuda0), kiln_to(hw, cuda0), kiln_to(hb, cuda0))), 2e-3);
  kiln_scope_end();
}
END_TEST

/* Operands cuBLASLt cannot read in place (a flipped row, a step, a
 * broadcast row) go through a contiguous copy (passes/gemm_operands.c).
 * With that pass off: a clean error at the user's line, not a crash or a
 * wrong answer. */
START_TEST(matmul_of_views_cublaslt_cannot_read) {
  if (!tu_have_gpu()) return;
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(64, 32), 1, TU_SMALL), *ga = kiln_to(a, cuda0);
  kiln_tensor *b = tu_data(KILN_F32, KILN_SHAPE(32, 16), 2, TU_SMALL), *gb = kiln_to(b, cuda0);
  kiln_tensor *r = tu_data(KILN_F32, KILN_SHAPE(1, 32), 3, TU_SMALL), *gr = kiln_to(r, cuda0);
  expect_close(kiln_matmul(kiln_flip(a, KILN_DIMS(1)), b), kiln_matmul(kiln_flip(ga, KILN_DIMS(1)), gb), 1e-5);
  expect_close(kiln_matmul(kiln_index(a, ":, ::2"), kiln_index(b, "::2, :")),
               kiln_matmul(kiln_index(ga, ":, ::2"), kiln_index(gb, "::2, :")), 1e-5);
  expect_close(kiln_matmul(kiln_expand(r, KILN_SHAPE(8, 32)), b), kiln_matmul(kiln_expand(gr, KILN_SHAPE(8, 32)), gb),
               1e-5);
  const char *passes = rt_opts()->passes;
  rt_opts()->passes = "-gemm_operands";
  int l = __LINE__; kiln_tensor *y = kiln_matmul(kiln_flip(ga, KILN_DIMS(1)), gb);
  kiln_status st = kiln_realize(y);
  rt_opts()->passes = passes;
  ck_assert_int_eq(st, KILN_ERR_DEVICE);
  char want[128];
  snprintf(want, sizeof want, "%s:%d: matmul: not supported on cuda:0: ", __FILE__, l);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), want));
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "strides (32, -1)"));
  kiln_scope_end();
}
END_TEST

/* Philox is keyed by (seed, element index): the same seed gives the same
 * bits on either device. */
START_TEST(rand_is_bitwise_identical) {
  if (!tu_have_gpu()) return;
  kiln_scope_begin();
  kiln_tensor *zeros = kiln_to(kiln_zeros(KILN_SHAPE(1000, 3), KILN_F32), cuda0);
  kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16};
  for (int i = 0; i < 3; i++) {
    kiln_manual_seed(1234);
    kiln_tensor *c = kiln_rand(KILN_SHAPE(1000, 3), dts[i]);
    kiln_manual_seed(1234);
    kiln_tensor *g = kiln_rand_like(kiln_cast(zeros, dts[i]));
    ck_assert_int_eq(kiln_device_of(g).type, KILN_CUDA);
    kiln_tensor *back = kiln_cpu(g);
    ck_assert_int_eq(kiln_realize(back), KILN_OK);
    ck_assert_int_eq(kiln_realize(c), KILN_OK);
    expect_same_bits(c, back);
  }
  kiln_scope_end();
}
END_TEST

START_TEST(memory_stats_after_the_first_kernel) {
  if (!tu_have_gpu()) return;
  kiln_scope_begin();
  kiln_tensor *g = kiln_to(kiln_ones(KILN_SHAPE(1 << 20), KILN_F32), cuda0);
  kiln_tensor *y = kiln_muls(g, 3);
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  kiln_memory_stats_t s;
  ck_assert_int_eq(kiln_memory_stats(cuda0, &s), KILN_OK);
  ck_assert_uint_ge(s.allocated_bytes, 4u << 20);
  ck_assert_uint_ge(s.reserved_bytes, s.allocated_bytes);
  ck_assert_uint_ge(s.peak_bytes, s.allocated_bytes);
  kiln_scope_end();   /* y and g go back to the cache */
  kiln_empty_cache();
  ck_assert_int_eq(kiln_memory_stats(cuda0, &s), KILN_OK);
  ck_assert_uint_eq(s.reserved_bytes, s.allocated_bytes);
}
END_TEST

/* scaled_dot_product_attention of CUDA tensors is the fused kernel
 * (codegen_cuda/attention.cuh), one launch, agreeing with the CPU's fused
 * kernel: causal with GQA, a bool mask whose row 0 drops every key (nan on
 * both), f64 with an additive mask and head dims over one tile chunk.
 * Realizing S = 1024 over 2 heads allocates its output, never the 8 MiB of
 * scores. */
static kiln_tensor *sdpa(kiln_tensor *const in[4], bool gpu, bool causal, bool gqa) {
  kiln_tensor *t[4];
  for (int i = 0; i < 4; i++) t[i] = in[i] && gpu ? kiln_to(in[i], cuda0) : in[i];
  for (int i = 0; i < 4; i++) ck_assert_int_eq(t[i] ? kiln_realize(t[i]) : KILN_OK, KILN_OK);
  return kiln_scaled_dot_product_attention(t[0], t[1], t[2], t[3], causal, 0, gqa);
}

static void expect_fused_match(kiln_tensor *const in[4], bool causal, bool gqa, double rtol) {
  kiln_tensor *g = sdpa(in, true, causal, gqa);
  ck_assert_int_eq(kiln_device_of(g).type, KILN_CUDA);
  ck_assert_uint_eq(tu_kernels_of(g), 1);
  expect_close(sdpa(in, false, causal, gqa), g, rtol);
}

START_TEST(attention_matches_the_cpu) {
  if (!tu_have_gpu()) return;
  kiln_scope_begin();
  kiln_tensor *q = tu_data(KILN_F32, KILN_SHAPE(2, 4, 100, 16), 1, TU_SMALL);
  kiln_tensor *k = tu_data(KILN_F32, KILN_SHAPE(2, 2, 70, 16), 2, TU_SMALL);
  kiln_tensor *v = tu_data(KILN_F32, KILN_SHAPE(2, 2, 70, 24), 3, TU_SMALL);
  kiln_tensor *rows = kiln_gts(kiln_reshape(kiln_arange(0, 100, 1), KILN_SHAPE(100, 1)), 0);
  kiln_tensor *keep = kiln_logical_and(kiln_gts(tu_data(KILN_F32, KILN_SHAPE(100, 70), 4, TU_SMALL), -0.5), rows);
  expect_fused_match((kiln_tensor *[4]){q, k, v, NULL}, true, true, 1e-5);
  expect_fused_match((kiln_tensor *[4]){q, k, v, keep}, false, true, 1e-5);
  kiln_tensor *q64 = tu_data(KILN_F64, KILN_SHAPE(3, 33, 40), 5, TU_SMALL);
  kiln_tensor *k64 = tu_data(KILN_F64, KILN_SHAPE(3, 50, 40), 6, TU_SMALL);
  kiln_tensor *v64 = tu_data(KILN_F64, KILN_SHAPE(3, 50, 36), 7, TU_SMALL);
  kiln_tensor *add = tu_data(KILN_F64, KILN_SHAPE(33, 50), 8, TU_SMALL);
  expect_fused_match((kiln_tensor *[4]){q64, k64, v64, add}, false, false, 1e-12);
  kiln_tensor *big = kiln_to(tu_data(KILN_F32, KILN_SHAPE(2, 1024, 16), 9, TU_SMALL), cuda0);
  ck_assert_int_eq(kiln_realize(big), KILN_OK);
  kiln_memory_stats_t before, after;
  ck_assert_int_eq(kiln_memory_stats(cuda0, &before), KILN_OK);
  kiln_reset_peak_memory();
  ck_assert_int_eq(kiln_realize(kiln_scaled_dot_product_attention(big, big, big, NULL, true, 0, false)), KILN_OK);
  ck_assert_int_eq(kiln_memory_stats(cuda0, &after), KILN_OK);
  ck_assert_uint_lt(after.peak_bytes - before.allocated_bytes, 2u << 20);
  kiln_scope_end();
}
END_TEST

static Suite *cuda_runtime_suite(void) {
  Suite *s = suite_create("cuda_runtime");
  TCase *tc = tu_tcase(s, "no_gpu");
  tcase_add_test(tc, cuda_unavailable_with_reason);
  tcase_add_test(tc, to_cuda_is_an_error_at_the_callers_line);
  tcase_add_test(tc, to_the_same_device_is_the_tensor);
  tcase_add_test(tc, to_bad_arguments);
  tcase_add_test(tc, mixing_devices_names_both);
  tcase_add_test(tc, memory_stats_of_cuda);
  tcase_add_test(tc, empty_cache_is_harmless);
  tc = tu_tcase(s, "gpu");
  tcase_add_test(tc, transfer_round_trip);
  tcase_add_test(tc, elementwise_and_reductions_match_the_cpu);
  tcase_add_test(tc, grid_reductions_and_vectors_match_the_cpu);
  tcase_add_test(tc, validate_passes_on_correct_kernels);
  tcase_add_test(tc, matmul_matches_the_cpu);
  tcase_add_test(tc, matmul_of_views_cublaslt_cannot_read);
  tcase_add_test(tc, rand_is_bitwise_identical);
  tcase_add_test(tc, memory_stats_after_the_first_kernel);
  tcase_add_test(tc, attention_matches_the_cpu);
  return s;
}

KILN_TEST_MAIN(cuda_runtime_suite)
