/* test_fn.c: compiled functions (kiln_compile / kiln_fn_run) against the
 * oracle, their argument checks and messages, in-place outputs, captured
 * constants, dumps and concurrent runs; and the lazy path's reuse of plans
 * (a graph built again with new data runs the plan of the first). */
#include "check_main.h"
#include "util/testutil.h"

#include <pthread.h>
#include <string.h>

enum { B = 8, IN = 16, HID = 32, OUT = 10 };
/* The logits reach ~1e4 (inputs and weights up to 4 in size), so f32
 * rounding of a GEMM's sums moves a softmax output by up to ~1e-4 of itself. */
#define MLP_RTOL 1e-4
#define MLP_ATOL 1e-5

typedef struct {
  kiln_tensor *w1, *b1, *w2, *b2;
} mlp;

static mlp mlp_weights(void) {
  return (mlp){tu_data(KILN_F32, KILN_SHAPE(HID, IN), 11, TU_SMALL), tu_data(KILN_F32, KILN_SHAPE(HID), 12, TU_SMALL),
               tu_data(KILN_F32, KILN_SHAPE(OUT, HID), 13, TU_SMALL), tu_data(KILN_F32, KILN_SHAPE(OUT), 14, TU_SMALL)};
}

static kiln_tensor *mlp_forward(const mlp *m, kiln_tensor *x) {
  kiln_tensor *h = kiln_relu(kiln_linear(x, m->w1, m->b1));
  return kiln_softmax(kiln_linear(h, m->w2, m->b2), -1);
}

/* mlp_forward over a placeholder of batch rows (-1: dynamic), compiled. */
static kiln_fn *compile_mlp(const mlp *m, int64_t batch) {
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(batch, IN));
  kiln_tensor *y = mlp_forward(m, x);
  kiln_fn *f = kiln_compile(1, &x, 1, &y);
  ck_assert_msg(f, "%s", kiln_last_error());
  return f;
}

/* The oracle's value of the same expression built on data. */
static ref_tensor *expected(const mlp *m, kiln_tensor *x) {
  kiln_tensor *y = mlp_forward(m, x);
  ref_tensor *r = ref_eval(y);
  ck_assert(r);
  return r;
}

START_TEST(mlp_matches_oracle) {
  kiln_scope_begin();
  mlp m = mlp_weights();
  kiln_fn *f = compile_mlp(&m, B);
  char why[512];
  for (uint64_t seed = 1; seed <= 3; seed++) {
    kiln_tensor *data = tu_data(KILN_F32, KILN_SHAPE(B, IN), seed, TU_SMALL);
    ref_tensor *want = expected(&m, data);
    kiln_reset_stats();
    kiln_tensor *out = NULL;
    ck_assert_int_eq(kiln_fn_run(f, &data, &out), KILN_OK);
    ck_assert_int_eq(kiln_stats().compiles, 0);
    ck_assert_uint_gt(kiln_stats().kernels_launched, 0);
    ck_assert_msg(ref_check(want, out, MLP_RTOL, MLP_ATOL, why, sizeof why), "seed %d: %s", (int)seed, why);
    ref_free(want);
  }
  kiln_fn_free(f);
  kiln_scope_end();
}
END_TEST

/* A given output that is the value's own storage is written in place; a run
 * allocates nothing that it keeps. */
START_TEST(output_written_in_place) {
  kiln_scope_begin();
  mlp m = mlp_weights();
  kiln_fn *f = compile_mlp(&m, B);
  static float result[B * OUT];
  kiln_tensor *out = kiln_from_buffer(result, KILN_F32, KILN_SHAPE(B, OUT));
  kiln_tensor *data = tu_data(KILN_F32, KILN_SHAPE(B, IN), 5, TU_SMALL);
  ck_assert_int_eq(kiln_fn_run(f, &data, &out), KILN_OK);   /* warms the allocator's cache */
  kiln_memory_stats_t before, after;
  ck_assert_int_eq(kiln_memory_stats(kiln_cpu_device(), &before), KILN_OK);
  memset(result, 0, sizeof result);
  kiln_tensor *given = out;
  ck_assert_int_eq(kiln_fn_run(f, &data, &out), KILN_OK);
  ck_assert_ptr_eq(out, given);
  ck_assert_int_eq(kiln_memory_stats(kiln_cpu_device(), &after), KILN_OK);
  ck_assert_uint_eq(after.allocated_bytes, before.allocated_bytes);
  ref_tensor *want = expected(&m, data);
  char why[512];
  ck_assert_msg(ref_check_data(want, result, MLP_RTOL, MLP_ATOL, why, sizeof why), "%s", why);
  ref_free(want);
  kiln_fn_free(f);
  kiln_scope_end();
}
END_TEST

/* An output that is a view (a transpose of the product) cannot be written in
 * place: the given tensor receives a copy. Two outputs, one a constant. */
START_TEST(view_and_constant_outputs) {
  kiln_scope_begin();
  kiln_tensor *w = tu_data(KILN_F32, KILN_SHAPE(3, 4), 7, TU_SMALL);
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(4, 2));
  kiln_tensor *ys[2] = {kiln_T(kiln_matmul(w, x)), kiln_sum(w)};
  kiln_fn *f = kiln_compile(1, &x, 2, ys);
  ck_assert_msg(f, "%s", kiln_last_error());
  kiln_tensor *data = tu_data(KILN_F32, KILN_SHAPE(4, 2), 8, TU_SMALL);
  ref_tensor *want0 = ref_eval(kiln_T(kiln_matmul(w, data))), *want1 = ref_eval(kiln_sum(w));
  static float got[2 * 3];
  kiln_tensor *outs[2] = {kiln_from_buffer(got, KILN_F32, KILN_SHAPE(2, 3)), NULL};
  ck_assert_int_eq(kiln_fn_run(f, &data, outs), KILN_OK);
  char why[512];
  ck_assert_msg(ref_check_data(want0, got, 1e-5, 1e-6, why, sizeof why), "%s", why);
  ck_assert_msg(ref_check(want1, outs[1], 1e-5, 1e-6, why, sizeof why), "%s", why);
  ref_free(want0);
  ref_free(want1);
  kiln_fn_free(f);
  kiln_scope_end();
}
END_TEST

/* Weights built lazily (random) are computed once, at compile time. */
START_TEST(captured_values_are_constants) {
  kiln_scope_begin();
  kiln_manual_seed(3);
  kiln_tensor *w = kiln_randn(KILN_SHAPE(IN), KILN_F32);
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(B, IN));
  kiln_tensor *y = kiln_mul(x, w);
  kiln_fn *f = kiln_compile(1, &x, 1, &y);
  ck_assert(f);
  ck_assert_int_eq(kiln_status_of(w), KILN_OK);
  float ones[B * IN], a[B * IN], b[B * IN];
  for (int i = 0; i < B * IN; i++) ones[i] = 1;
  kiln_tensor *in = kiln_from_data(ones, KILN_F32, KILN_SHAPE(B, IN));
  kiln_tensor *o1 = NULL, *o2 = NULL;
  ck_assert_int_eq(kiln_fn_run(f, &in, &o1), KILN_OK);
  ck_assert_int_eq(kiln_fn_run(f, &in, &o2), KILN_OK);
  ck_assert_int_eq(kiln_copy_to_host(o1, a, sizeof a), KILN_OK);
  ck_assert_int_eq(kiln_copy_to_host(o2, b, sizeof b), KILN_OK);
  ck_assert(!memcmp(a, b, sizeof a));
  const float *wv = kiln_data(w);
  for (int i = 0; i < B * IN; i++) ck_assert_float_eq(a[i], wv[i % IN]);
  kiln_fn_free(f);
  kiln_scope_end();
}
END_TEST

static int line_of_bad_op;

START_TEST(errors_name_function_and_argument) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(B, IN));
  kiln_tensor *y = kiln_exp(x);
  int line = __LINE__ + 1;
  kiln_fn *f = kiln_compile(1, &x, 1, &y);
  ck_assert(f);
  kiln_tensor *bad = kiln_zeros(KILN_SHAPE(4, IN), KILN_F32), *out = NULL;
  ck_assert_int_eq(kiln_fn_run(f, &bad, &out), KILN_ERR_ARG);
  char want[256];
  snprintf(want, sizeof want, "function compiled at %s:%d: input 0 is float32 (4,16); it takes float32 (8,16) on cpu",
           __FILE__, line);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  kiln_tensor *wrong_dt = kiln_zeros(KILN_SHAPE(B, IN), KILN_F64);
  ck_assert_int_eq(kiln_fn_run(f, &wrong_dt, &out), KILN_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "input 0 is float64 (8,16)"));
  kiln_tensor *strided = kiln_T(tu_data(KILN_F32, KILN_SHAPE(IN, B), 3, TU_SMALL));
  ck_assert_int_eq(kiln_fn_run(f, &strided, &out), KILN_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "input 0 is a strided view"));
  kiln_tensor *small_out = kiln_zeros(KILN_SHAPE(2), KILN_F32), *good = kiln_zeros(KILN_SHAPE(B, IN), KILN_F32);
  ck_assert_int_eq(kiln_fn_run(f, &good, &small_out), KILN_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "output 0 is float32 (2,)"));
  ck_assert_int_eq(kiln_fn_run(NULL, &good, &out), KILN_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "fn_run: the function is NULL"));
  kiln_fn_free(f);
  /* compile: inputs must be placeholders, outputs may not read other ones */
  kiln_tensor *z = kiln_placeholder(KILN_F32, KILN_SHAPE(B, IN));
  kiln_tensor *both = kiln_add(x, z);
  ck_assert_ptr_null(kiln_compile(1, &good, 1, &both));
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "compile: input 0 is not a placeholder"));
  ck_assert_ptr_null(kiln_compile(1, &x, 1, &both));
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "not an input"));
  /* a bad op of the graph: its own message and file:line */
  line_of_bad_op = __LINE__ + 1;
  kiln_tensor *mismatch = kiln_add(x, kiln_zeros(KILN_SHAPE(3), KILN_F32));
  ck_assert_ptr_null(kiln_compile(1, &x, 1, &mismatch));
  snprintf(want, sizeof want, "%s:%d: add:", __FILE__, line_of_bad_op);
  ck_assert_msg(strstr(kiln_last_error(), want), "%s", kiln_last_error());
  /* a placeholder's graph has no value of its own */
  ck_assert_int_eq(kiln_realize(y), KILN_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "realize: the tensor reads a placeholder"));
  ck_assert_ptr_null(kiln_data(x));
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "data: the tensor reads a placeholder"));
  kiln_scope_end();
}
END_TEST

START_TEST(dump_shows_steps) {
  kiln_scope_begin();
  mlp m = mlp_weights();
  kiln_fn *f = compile_mlp(&m, B);
  char *text = NULL, *dot = NULL;
  size_t n1, n2;
  FILE *t = open_memstream(&text, &n1), *d = open_memstream(&dot, &n2);
  ck_assert_int_eq(kiln_fn_dump(f, t, KILN_FMT_TEXT), KILN_OK);
  ck_assert_int_eq(kiln_fn_dump(f, d, KILN_FMT_DOT), KILN_OK);
  fclose(t);
  fclose(d);
  ck_assert_msg(strstr(text, "step 0: kernel k_") && strstr(text, "function compiled at"), "%s", text);
  ck_assert_msg(!strncmp(dot, "digraph kiln_fn {", 17) && strstr(dot, "-> k0;"), "%s", dot);
  free(text);
  free(dot);
  ck_assert_int_eq(kiln_fn_dump(NULL, stdout, KILN_FMT_TEXT), KILN_ERR_ARG);
  kiln_fn_free(f);
  kiln_scope_end();
}
END_TEST

typedef struct {
  kiln_fn *f;
  uint64_t seed;
  bool ok;
} runner;

static void *run_many(void *arg) {
  runner *r = arg;
  float in[B * IN], out[B * IN];
  r->ok = true;
  for (int it = 0; it < 200 && r->ok; it++) {
    for (int i = 0; i < B * IN; i++) in[i] = (float)((r->seed * 31 + (uint64_t)it + (uint64_t)i) % 17);
    kiln_tensor *x = kiln_from_buffer(in, KILN_F32, KILN_SHAPE(B, IN));
    kiln_tensor *y = kiln_from_buffer(out, KILN_F32, KILN_SHAPE(B, IN));
    r->ok = kiln_fn_run(r->f, &x, &y) == KILN_OK;
    for (int i = 0; r->ok && i < B * IN; i++) r->ok = out[i] == 2 * in[i] + 1;
    kiln_release(x);
    kiln_release(y);
  }
  return NULL;
}

/* One function run from two threads at once with different buffers. */
START_TEST(concurrent_runs) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_placeholder(KILN_F32, KILN_SHAPE(B, IN));
  kiln_tensor *y = kiln_adds(kiln_muls(x, 2), 1);
  kiln_fn *f = kiln_compile(1, &x, 1, &y);
  ck_assert(f);
  runner r[2] = {{f, 1, false}, {f, 2, false}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, run_many, &r[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  ck_assert(r[0].ok && r[1].ok);
  kiln_fn_free(f);
  kiln_scope_end();
}
END_TEST

/* A dynamic batch dim: each size is planned on its first call, results
 * match the oracle at every size, and the same size again plans nothing. */
START_TEST(dynamic_batch) {
  kiln_scope_begin();
  mlp m = mlp_weights();
  ck_assert_int_eq(kiln_size(kiln_placeholder(KILN_F32, KILN_SHAPE(-1, IN)), 0), KILN_DYN);
  kiln_fn *f = compile_mlp(&m, -1);
  char why[512];
  const int64_t sizes[] = {1, 5, 8, 3, 5};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    kiln_tensor *data = tu_data(KILN_F32, 2, (int64_t[]){sizes[k], IN}, 20 + k, TU_SMALL);
    ref_tensor *want = expected(&m, data);
    kiln_reset_stats();
    kiln_tensor *out = NULL;
    ck_assert_msg(kiln_fn_run(f, &data, &out) == KILN_OK, "%s", kiln_last_error());
    ck_assert_int_eq(kiln_size(out, 0), sizes[k]);
    if (k == 4) ck_assert_int_eq(kiln_stats().compiles, 0);   /* size 5 again */
    ck_assert_msg(ref_check(want, out, MLP_RTOL, MLP_ATOL, why, sizeof why), "size %d: %s", (int)sizes[k], why);
    ref_free(want);
  }
  kiln_fn_free(f);
  /* two inputs whose dynamic dims disagree in one call */
  kiln_tensor *a = kiln_placeholder(KILN_F32, KILN_SHAPE(-1, 4)), *b = kiln_placeholder(KILN_F32, KILN_SHAPE(-1, 4));
  kiln_tensor *sum = kiln_add(a, b);
  f = kiln_compile(2, ((kiln_tensor *[]){a, b}), 1, &sum);
  ck_assert(f);
  kiln_tensor *ins[2] = {kiln_zeros(KILN_SHAPE(2, 4), KILN_F32), kiln_zeros(KILN_SHAPE(3, 4), KILN_F32)}, *o = NULL;
  ck_assert_int_eq(kiln_fn_run(f, ins, &o), KILN_ERR_SHAPE);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "input 1 dim 0 is 3, but another dynamic dim of this call is 2"));
  kiln_fn_free(f);
  /* indexing along the dynamic dim cannot follow the size */
  int line = __LINE__ + 1;
  kiln_tensor *first = kiln_select(a, 0, 0);
  ck_assert_ptr_null(kiln_compile(1, &a, 1, &first));
  char want[160];
  snprintf(want, sizeof want, "%s:%d: compile: select: indexing along a dynamic dim is not supported", __FILE__, line);
  ck_assert_str_eq(kiln_last_error(), want);
  kiln_scope_end();
}
END_TEST

/* The lazy path: the same graph built again on new data compiles nothing
 * and reuses the plan; values stay right, held intermediates get theirs. */
START_TEST(lazy_graph_reuses_plan) {
  kiln_scope_begin();
  mlp m = mlp_weights();
  char why[512];
  for (uint64_t seed = 1; seed <= 3; seed++) {
    kiln_tensor *data = tu_data(KILN_F32, KILN_SHAPE(B, IN), seed, TU_SMALL);
    kiln_tensor *h = kiln_relu(kiln_linear(data, m.w1, m.b1));
    kiln_tensor *y = kiln_softmax(kiln_linear(h, m.w2, m.b2), -1);
    ref_tensor *want_y = ref_eval(y), *want_h = ref_eval(h);
    kiln_reset_stats();
    ck_assert_int_eq(kiln_realize(y), KILN_OK);
    if (seed > 1) ck_assert_int_eq(kiln_stats().compiles, 0);
    ck_assert_msg(ref_check(want_y, y, MLP_RTOL, MLP_ATOL, why, sizeof why), "seed %d: %s", (int)seed, why);
    kiln_reset_stats();
    ck_assert_msg(ref_check(want_h, h, MLP_RTOL, MLP_ATOL, why, sizeof why), "seed %d: %s", (int)seed, why);
    ref_free(want_y);
    ref_free(want_h);
  }
  kiln_scope_end();
}
END_TEST

static Suite *fn_suite(void) {
  Suite *s = suite_create("fn");
  TCase *c = tu_tcase(s, "fn");
  tcase_add_test(c, mlp_matches_oracle);
  tcase_add_test(c, output_written_in_place);
  tcase_add_test(c, view_and_constant_outputs);
  tcase_add_test(c, captured_values_are_constants);
  tcase_add_test(c, errors_name_function_and_argument);
  tcase_add_test(c, dump_shows_steps);
  tcase_add_test(c, concurrent_runs);
  tcase_add_test(c, dynamic_batch);
  tcase_add_test(c, lazy_graph_reuses_plan);
  return s;
}

KILN_TEST_MAIN(fn_suite)
