/* test_runtime_behaviour.c: what the runtime promises beyond values: the
 * kernel cache compiles an expression once, eager mode runs one kernel per
 * op, realized nodes drop their inputs, scopes release buffers, Philox
 * random numbers depend only on the seed (not on threads or reruns), and
 * KILN_VALIDATE's comparison (its device half needs a GPU: here the
 * "device" outputs are host buffers). */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "runtime/inspect.h"
#include "runtime/rt.h"
#include "runtime/rt_internal.h"
#include "util/testutil.h"

/* ---- helpers -------------------------------------------------------------- */
typedef struct { int64_t rows, cols; uint64_t seed; } w1_case;

/* W1 = relu(a*b + c) * sigmoid(a), c broadcast over rows: five ops. */
static kiln_tensor *build_w1(const void *ctx) {
  const w1_case *w = ctx;
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(w->rows, w->cols), w->seed, TU_SMALL);
  kiln_tensor *b = tu_data(KILN_F32, KILN_SHAPE(w->rows, w->cols), w->seed + 1, TU_SMALL);
  kiln_tensor *c = tu_data(KILN_F32, KILN_SHAPE(w->cols), w->seed + 2, TU_SMALL);
  return kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(a));
}

/* Builds W1, computes it with the oracle, realizes it and compares. */
static void realize_w1_checked(const w1_case *w) {
  kiln_scope_begin();
  kiln_tensor *y = build_w1(w);
  ref_tensor *expect = ref_eval(y);
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  char why[1024];
  ref_tol tol = ref_tol_op(IR_SIGMOID, KILN_F32);
  tol.atol += 1e-5;   /* a*b + c may be one FMA: |a*b| <= 16 */
  bool ok = ref_check(expect, y, tol.rtol, tol.atol, why, sizeof why);
  ref_free(expect);
  kiln_scope_end();
  ck_assert_msg(ok, "W1: %s", why);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* A fresh, empty kernel cache directory for this (forked) test process, so a
 * disk cache cannot turn the first compile into a hit. */
static char cache_dir[64];
static void fresh_cache_dir(void) {
  snprintf(cache_dir, sizeof cache_dir, "/tmp/kiln-test-cache-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(cache_dir));
  setenv("KILN_CACHE_DIR", cache_dir, 1);
}
static void remove_cache_dir(void) { nftw(cache_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS); }

/* ---- kernel cache --------------------------------------------------------- */
START_TEST(same_expression_compiles_once) {
  fresh_cache_dir();
  kiln_reset_stats();
  w1_case first = {33, 65, 1}, second = {33, 65, 7};   /* same shapes, other data */
  realize_w1_checked(&first);
  kiln_stats_t s = kiln_stats();
  ck_assert_uint_eq(s.compiles, 1);
  ck_assert_uint_eq(s.cache_hits, 0);
  ck_assert_uint_eq(s.kernels_launched, 1);
  realize_w1_checked(&second);
  s = kiln_stats();
  ck_assert_uint_eq(s.compiles, 1);
  ck_assert_uint_eq(s.cache_hits, 1);
  ck_assert_uint_eq(s.kernels_launched, 2);
  remove_cache_dir();
}
END_TEST

/* Another shape is another kernel: the cache must not confuse them. */
START_TEST(other_shape_compiles_again) {
  fresh_cache_dir();
  kiln_reset_stats();
  realize_w1_checked(&(w1_case){33, 65, 1});
  realize_w1_checked(&(w1_case){65, 33, 1});
  kiln_stats_t s = kiln_stats();
  ck_assert_uint_eq(s.compiles, 2);
  ck_assert_uint_eq(s.cache_hits, 0);
  remove_cache_dir();
}
END_TEST

/* A random tensor is just another node: drawing again (a new Philox offset)
 * must not compile again, or every dropout step of a loop recompiles. */
START_TEST(rand_drawn_again_compiles_once) {
  fresh_cache_dir();
  kiln_reset_stats();
  for (int i = 0; i < 2; i++) {
    kiln_scope_begin();
    kiln_tensor *t = kiln_muls(kiln_rand(KILN_SHAPE(100, 3), KILN_F32), 2.0);
    ref_tensor *expect = ref_eval(t);
    ck_assert_int_eq(kiln_realize(t), KILN_OK);
    char why[1024];
    bool ok = ref_check(expect, t, 0, 0, why, sizeof why);
    ref_free(expect);
    kiln_scope_end();
    ck_assert_msg(ok, "draw %d: %s", i, why);
  }
  kiln_stats_t s = kiln_stats();
  ck_assert_uint_eq(s.compiles, 1);
  ck_assert_uint_eq(s.cache_hits, 1);
  remove_cache_dir();
}
END_TEST

/* ---- eager and fused kernel counts ---------------------------------------- */
START_TEST(eager_launches_one_kernel_per_op) {
  kiln_set_eager(1);
  kiln_reset_stats();
  realize_w1_checked(&(w1_case){17, 31, 3});
  ck_assert_uint_eq(kiln_stats().kernels_launched, 5);
  kiln_set_eager(0);
}
END_TEST

START_TEST(fused_launches_one_kernel) {
  kiln_set_eager(0);
  kiln_reset_stats();
  realize_w1_checked(&(w1_case){17, 31, 3});
  ck_assert_uint_eq(kiln_stats().kernels_launched, 1);
}
END_TEST

/* ---- lifetimes ------------------------------------------------------------ */
/* Without histories (KILN_GRAD_HISTORY_MB=0) a realized node lets go of
 * what it was computed from. */
START_TEST(realized_node_drops_inputs) {
  setenv("KILN_GRAD_HISTORY_MB", "0", 1);   /* read at this forked test's first op */
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(5, 7), 1, TU_FULL);
  kiln_tensor *b = tu_data(KILN_F32, KILN_SHAPE(5, 7), 2, TU_FULL);
  kiln_tensor *s = kiln_add(a, b);
  kiln_tensor *y = kiln_relu(s);
  int a_refs = a->refs, s_refs = s->refs, a_buf = a->buf->refs, b_buf = b->buf->refs;
  ck_assert_int_eq(s_refs, 2);       /* the user's handle and y */
  ck_assert_int_gt(y->nsrc, 0);
  ref_tensor *expect = ref_eval(y);
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_int_eq(y->op, IR_BUFFER);
  ck_assert_int_eq(y->nsrc, 0);
  ck_assert_int_eq(s->refs, s_refs - 1);   /* y let go of s */
  /* s is alive and pending: it still reads a's and b's storage, through the
   * private aliases of the leaves that the realize gave its graph (other
   * threads may be reading a and b) */
  ck_assert_int_eq(a->refs, a_refs - 1);
  ck_assert(s->src[0]->op == IR_BUFFER && s->src[0]->buf == a->buf && s->src[1]->buf == b->buf);
  ck_assert_int_eq(a->buf->refs, a_buf + 1);
  ck_assert_int_eq(b->buf->refs, b_buf + 1);
  char why[1024];
  ck_assert_msg(ref_check(expect, y, 0, 0, why, sizeof why), "%s", why);
  ref_free(expect);
  /* realizing s in turn lets go of a's and b's storage */
  ck_assert_int_eq(kiln_realize(s), KILN_OK);
  ck_assert_int_eq(s->nsrc, 0);
  ck_assert_int_eq(a->buf->refs, a_buf);
  ck_assert_int_eq(b->buf->refs, b_buf);
  kiln_scope_end();
}
END_TEST

/* With histories (the default) a realized node's edges move to its
 * history, which kiln_grad reads: its sources stay alive as long as it
 * does, and go with it. */
START_TEST(realized_node_keeps_its_history) {
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(5, 7), 1, TU_FULL);
  kiln_tensor *s = kiln_add(a, a), *y = kiln_retain(kiln_relu(s));
  int s_refs = s->refs;
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_int_eq(y->op, IR_BUFFER);
  ck_assert_int_eq(y->nsrc, 0);
  ck_assert(y->hist && y->hist->op == IR_RELU && y->hist->src[0] == s && !y->hist_cut);
  ck_assert_int_eq(s->refs, s_refs);   /* the history holds what y held */
  kiln_scope_end();                    /* s lives on in y's history */
  ck_assert(ir_node_live(y->hist->src[0]) && y->hist->src[0]->op == IR_ADD);
  kiln_release(y);
}
END_TEST

/* Everything made in a scope goes (its buffers return to the allocator)
 * except what was kept, which stays readable. A kept result computed in the
 * scope would keep its history (what it was computed from); kiln_detach
 * gives its value alone. */
START_TEST(scope_releases_all_but_kept) {
  size_t live0 = rt_buffer_stats().live_bytes;
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(1000, 100), 1, TU_SMALL);
  kiln_tensor *b = kiln_exp(a);
  kiln_tensor *c = kiln_add(b, a);
  ck_assert_int_eq(kiln_realize(b), KILN_OK);
  ck_assert_int_eq(kiln_realize(c), KILN_OK);
  kiln_tensor *twice = kiln_muls(c, 2.0);
  ref_tensor *expect = ref_eval(twice);
  ck_assert_int_eq(kiln_realize(twice), KILN_OK);
  kiln_tensor *kept = kiln_keep(kiln_detach(twice));
  ck_assert_uint_gt(rt_buffer_stats().live_bytes, live0 + 3 * 400000 - 1);
  kiln_scope_end();
  ck_assert_int_eq(kept->refs, 1);
  ck_assert_int_eq(kiln_realize(kept), KILN_OK);
  char why[1024];
  ck_assert_msg(ref_check(expect, kept, 1e-5, 1e-6, why, sizeof why), "%s", why);
  ref_free(expect);
  /* only kept's own buffer remains (blocks may be rounded up to a size class) */
  size_t live = rt_buffer_stats().live_bytes;
  ck_assert_uint_ge(live, live0 + 400000);
  ck_assert_uint_lt(live, live0 + 2 * 400000);
  kiln_release(kept);
  ck_assert_uint_eq(rt_buffer_stats().live_bytes, live0);
}
END_TEST

/* ---- random numbers ------------------------------------------------------- */
typedef struct { ir_op op; kiln_dtype dt; } rand_case;
static const rand_case rand_cases[] = {
  {IR_RAND, KILN_F32}, {IR_RAND, KILN_F64}, {IR_RAND, KILN_F16}, {IR_RAND, KILN_BF16},
  {IR_RANDN, KILN_F32}, {IR_RANDN, KILN_F64}, {IR_RANDN, KILN_F16},
  {IR_RANDINT, KILN_I64}, {IR_RANDINT, KILN_I32}, {IR_RANDINT, KILN_U8},
};
enum { NRAND = sizeof rand_cases / sizeof *rand_cases };

static kiln_tensor *make_rand(const rand_case *r, int64_t n) {
  switch (r->op) {
  case IR_RAND: return kiln_rand(KILN_SHAPE(n), r->dt);
  case IR_RANDN: return kiln_randn(KILN_SHAPE(n), r->dt);
  default: return kiln_randint(r->dt == KILN_U8 ? 0 : -1000, r->dt == KILN_U8 ? 200 : 1000000007, KILN_SHAPE(n), r->dt);
  }
}

/* Bits equal the oracle's exactly, except randn, whose compiled log and cos
 * are polynomial approximations (1e-5). */
static ref_tol rand_tol(const rand_case *r) {
  if (r->op != IR_RANDN) return (ref_tol){0, 0};
  return r->dt == KILN_F16 ? ref_tol_dtype(KILN_F16) : (ref_tol){1e-5, 1e-5};
}

/* Realizes every case on n elements and compares it with the oracle. */
static void check_rand_cases(int64_t n, const char *threads) {
  char why[1024];
  for (int i = 0; i < NRAND; i++) {
    kiln_scope_begin();
    kiln_manual_seed(1234 + (uint64_t)i);
    kiln_tensor *t = make_rand(&rand_cases[i], n);
    ref_tensor *expect = ref_eval(t);
    ck_assert_int_eq(kiln_realize(t), KILN_OK);
    ref_tol tol = rand_tol(&rand_cases[i]);
    bool ok = ref_check(expect, t, tol.rtol, tol.atol, why, sizeof why);
    ref_free(expect);
    kiln_scope_end();
    ck_assert_msg(ok, "%s %s, %s threads: %s", ir_ops[rand_cases[i].op].name,
                  ir_dtypes[rand_cases[i].dt].name, threads, why);
  }
}

/* The oracle does not depend on threads, so matching it under every thread
 * count is matching across thread counts. */
START_TEST(rand_matches_oracle_any_thread_count) {
  static const char *threads[] = {"1", "2", "3", "7"};
  setenv("KILN_NUM_THREADS", threads[_i], 1);   /* read once, by this forked process */
  ck_assert_int_eq(rt_opts()->num_threads, atoi(threads[_i]));
  check_rand_cases(1000003, threads[_i]);
  check_rand_cases(37, threads[_i]);
}
END_TEST

/* Returns the realized bytes of rand under seed (or unseeded when seed is 0). */
static void *rand_bytes(uint64_t seed, const rand_case *r, int64_t n) {
  if (seed) kiln_manual_seed(seed);
  kiln_tensor *t = make_rand(r, n);
  size_t bytes = (size_t)n * kiln_dtype_size(r->dt);
  void *out = malloc(bytes);
  ck_assert_ptr_nonnull(out);
  ck_assert_int_eq(kiln_copy_to_host(t, out, bytes), KILN_OK);
  kiln_release(t);
  return out;
}

START_TEST(same_seed_same_bits) {
  const rand_case *r = &rand_cases[_i];
  int64_t n = 4099;
  void *x = rand_bytes(99, r, n), *y = rand_bytes(99, r, n);
  ck_assert_msg(memcmp(x, y, (size_t)n * kiln_dtype_size(r->dt)) == 0, "%s %s differs under one seed",
                ir_ops[r->op].name, ir_dtypes[r->dt].name);
  free(x);
  free(y);
}
END_TEST

/* Without reseeding the stream moves on: two draws share almost nothing. */
START_TEST(unseeded_draws_differ) {
  const rand_case *r = &rand_cases[_i];
  int64_t n = 4099, same = 0;
  kiln_manual_seed(5);
  void *x = rand_bytes(0, r, n), *y = rand_bytes(0, r, n);
  size_t sz = kiln_dtype_size(r->dt);
  for (int64_t k = 0; k < n; k++) same += memcmp((char *)x + k * sz, (char *)y + k * sz, sz) == 0;
  /* u8 randint over 200 values and 8-bit bf16 collide by chance ~1/200, 1/256 */
  ck_assert_msg(same < n / 50, "%s %s: %lld of %lld elements equal", ir_ops[r->op].name,
                ir_dtypes[r->dt].name, (long long)same, (long long)n);
  free(x);
  free(y);
}
END_TEST

/* A chain of 12 unfused ops over a 4 MiB tensor whose intermediate handles
 * the program dropped: once a kernel's input is dead its buffer goes back to
 * the allocator and the next output reuses it, so the peak is the input plus
 * two intermediates, not all twelve. */
START_TEST(dead_intermediates_are_reused) {
  setenv("KILN_PASSES", "-fuse", 1);   /* read once, by this forked process */
  kiln_scope_begin();
  enum { N = 1 << 20 };
  kiln_tensor *x = kiln_ones(KILN_SHAPE(N), KILN_F32);
  ck_assert_int_eq(kiln_realize(x), KILN_OK);
  kiln_reset_peak_memory();
  kiln_tensor *y = kiln_retain(x);
  for (int i = 0; i < 12; i++) {
    kiln_tensor *next = i % 2 ? kiln_muls(y, 0.5) : kiln_adds(y, 1);
    kiln_release(y);  /* the program keeps no handle on intermediates */
    y = next;
  }
  kiln_memory_stats_t before, after;
  ck_assert_int_eq(kiln_memory_stats(kiln_cpu_device(), &before), KILN_OK);
  kiln_reset_stats();
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  ck_assert_int_eq(kiln_stats().kernels_launched, 12);
  ck_assert_int_eq(kiln_memory_stats(kiln_cpu_device(), &after), KILN_OK);
  ck_assert_msg(after.peak_bytes - before.allocated_bytes <= 2 * 4 * N + 4096, "peak grew by %llu bytes",
                (unsigned long long)(after.peak_bytes - before.allocated_bytes));
  ck_assert(fabs(kiln_item(kiln_select(y, 0, 0)) - 1.0) < 1e-6);  /* (1+1)/2 ... stays 1 */
  kiln_memory_stats_t cuda;
  ck_assert_int_eq(kiln_memory_stats((kiln_device){KILN_CUDA, 0}, &cuda), KILN_ERR_DEVICE);
  ck_assert_ptr_nonnull(strstr(kiln_last_error(), "CUDA not available"));
  kiln_scope_end();
}
END_TEST

/* ---- KILN_VALIDATE ----------------------------------------------------------- */
/* Rows of (dtype, device value, CPU value, whether they count as equal). */
START_TEST(validate_tolerance_by_dtype) {
  static const struct { kiln_dtype dt; double got, want; bool same; } rows[] = {
    {KILN_I32, 7, 7, true},          {KILN_I32, 7, 8, false},
    {KILN_BOOL, 1, 1, true},         {KILN_BOOL, 0, 1, false},
    {KILN_I64, 1e15, 1e15 + 1, false}, {KILN_U8, 255, 255, true},
    {KILN_F32, 1.0, 1.0 + 3e-7, true},   /* a few ulp: another summation order */
    {KILN_F32, 1.0, 1.001, false},   {KILN_F32, 1e-9, -1e-9, true},  /* cancelled to near zero */
    {KILN_F32, NAN, NAN, true},      {KILN_F32, NAN, 1, false},      {KILN_F32, 1, NAN, false},
    {KILN_F32, INFINITY, INFINITY, true}, {KILN_F32, INFINITY, -INFINITY, false},
    {KILN_F32, INFINITY, 3e38, false},
    {KILN_F64, 1.0, 1.0 + 1e-13, true}, {KILN_F64, 1.0, 1.0 + 1e-8, false},
    {KILN_F16, 1.0, 1.0009765625, true}, {KILN_F16, 1.0, 1.0625, false},  /* 1 ulp; 64 ulp */
    {KILN_BF16, 1.0, 1.0078125, true}, {KILN_BF16, 1.0, 1.5, false},
  };
  for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
    unsigned char got[3][8], want[3][8];  /* the pair is element 1 of 3 equal ones */
    kiln_tensor *t = kiln_from_data((const double[]){5, rows[r].got, 5}, KILN_F64, KILN_SHAPE(3));
    kiln_tensor *u = kiln_from_data((const double[]){5, rows[r].want, 5}, KILN_F64, KILN_SHAPE(3));
    kiln_tensor *tc = kiln_cast(t, rows[r].dt), *uc = kiln_cast(u, rows[r].dt);
    size_t bytes = 3 * ir_dtypes[rows[r].dt].size;
    ck_assert_int_eq(kiln_copy_to_host(tc, got, bytes), KILN_OK);
    ck_assert_int_eq(kiln_copy_to_host(uc, want, bytes), KILN_OK);
    ck_assert_msg(rt_validate_diff(rows[r].dt, got, want, 3) == (rows[r].same ? -1 : 1), "row %zu", r);
    kiln_release(t);
    kiln_release(u);
    kiln_release(tc);
    kiln_release(uc);
  }
}
END_TEST

/* rt_validate on a kernel whose "device" ran on the host: outputs equal to
 * the CPU's pass; one wrong element is reported with the kernel's name,
 * its index and both values. */
START_TEST(validate_names_the_first_difference) {
  enum { N = 1000 };
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(N), 1, TU_SMALL), *b = tu_data(KILN_F32, KILN_SHAPE(N), 2, TU_SMALL);
  kiln_tensor *y = kiln_add(a, b);
  rt_planned *plan;
  ck_assert_int_eq(rt_plan_for(KILN_CUDA, 1, &y, &plan), 1);
  rt_buffer *out = rt_buffer_alloc(N * sizeof(float));
  const float *pa = kiln_data(a), *pb = kiln_data(b);
  float *po = out->data;
  for (int i = 0; i < N; i++) po[i] = pa[i] + pb[i];
  rt_buffer *ins[2] = {plan[0].inputs[0]->buf, plan[0].inputs[1]->buf};
  ck_assert_int_eq(plan[0].ninputs, 2);
  ck_assert_int_eq(rt_validate(plan[0].k, plan[0].k->args, &out, ins, 0), KILN_OK);
  po[123] = 42.5f;
  ck_assert_int_eq(rt_validate(plan[0].k, plan[0].k->args, &out, ins, 0), KILN_ERR_COMPILE);
  char want[256];
  snprintf(want, sizeof want, "KILN_VALIDATE: kernel %s, output 0 (f32): element 123 is 42.5 on the device, %.9g on the CPU",
           plan[0].k->name, pa[123] + pb[123]);
  ck_assert_str_eq(kiln_last_error(), want);
  rt_buffer_release(out);
  rt_plan_free(plan, 1);
  kiln_release(y);
  kiln_release(a);
  kiln_release(b);
}
END_TEST

static Suite *runtime_behaviour_suite(void) {
  Suite *s = suite_create("runtime_behaviour");
  TCase *tc = tu_tcase(s, "cache");
  tcase_add_test(tc, same_expression_compiles_once);
  tcase_add_test(tc, other_shape_compiles_again);
  tcase_add_test(tc, rand_drawn_again_compiles_once);
  tc = tu_tcase(s, "kernel_counts");
  tcase_add_test(tc, eager_launches_one_kernel_per_op);
  tcase_add_test(tc, fused_launches_one_kernel);
  tc = tu_tcase(s, "lifetime");
  tcase_add_test(tc, realized_node_drops_inputs);
  tcase_add_test(tc, realized_node_keeps_its_history);
  tcase_add_test(tc, scope_releases_all_but_kept);
  tcase_add_test(tc, dead_intermediates_are_reused);
  tc = tu_tcase(s, "random");
  tcase_add_loop_test(tc, rand_matches_oracle_any_thread_count, 0, 4);
  tcase_add_loop_test(tc, same_seed_same_bits, 0, NRAND);
  tcase_add_loop_test(tc, unseeded_draws_differ, 0, NRAND);
  tc = tu_tcase(s, "validate");
  tcase_add_test(tc, validate_tolerance_by_dtype);
  tcase_add_test(tc, validate_names_the_first_difference);
  return s;
}

KILN_TEST_MAIN(runtime_behaviour_suite)
