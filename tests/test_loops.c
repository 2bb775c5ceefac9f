/* test_loops.c: kiln in a loop. Values are launch arguments, so a loop over
 * new scalars, clamp bounds, fills, ranges and seeds compiles each kernel
 * once; the values that are code (passes/values.c) compile apart. A kernel
 * structure seen with a second shape gets one shape-generic variant
 * (KILN_DYNAMIC, runtime/dynamic.c), so a loop over batch sizes compiles
 * each at most twice. Every result is checked by hand or against the
 * reference evaluator. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "check_main.h"
#include "runtime/rt.h"
#include "util/testutil.h"

#define LOOP 10000

static const float xs[16] = {-3.5f, -2, -1.25f, -0.5f, -0.0f, 0, 0.25f, 0.5f,
                             1, 1.75f, 2, 2.5f, 3, 3.25f, 3.75f, 4};

/* Realizes y, compares it with the oracle (rtol/atol) and releases it. */
static void check_ref(kiln_tensor *y, double rtol, double atol, const char *what, int i) {
  ref_tensor *want = ref_eval(y);
  ck_assert_msg(kiln_realize(y) == KILN_OK, "%s %d: %s", what, i, kiln_last_error());
  char why[512];
  bool ok = ref_check(want, y, rtol, atol, why, sizeof why);
  ref_free(want);
  ck_assert_msg(ok, "%s %d: %s", what, i, why);
}

static void assert_compiles(uint64_t want, const char *what) {
  kiln_stats_t s = kiln_stats();
  ck_assert_msg(s.compiles == want, "%s: %llu compiles, want %llu", what, (unsigned long long)s.compiles,
                (unsigned long long)want);
}

/* Plans: how often realize ran the passes and lowering (new values are
 * bound into the plan of their structure). */
static void assert_plans(uint64_t want, const char *what) {
  kiln_stats_t s = kiln_stats();
  ck_assert_msg(s.plans == want, "%s: %llu plans, want %llu", what, (unsigned long long)s.plans,
                (unsigned long long)want);
}

/* ---- section: values are arguments ---------------------------------------- */
START_TEST(new_scalar_compiles_once) {
  kiln_reset_stats();
  kiln_tensor *x = kiln_from_data(xs, KILN_F32, KILN_SHAPE(16));
  for (int i = 0; i < LOOP; i++) {
    kiln_scope_begin();
    double s = 1.5 + i * 1e-3;   /* never 1: x * 1 is x (simplify) */
    kiln_tensor *y = kiln_muls(x, s);
    ck_assert_int_eq(kiln_realize(y), KILN_OK);
    const float *d = kiln_data(y);
    for (int j = 0; j < 16; j++)
      ck_assert_msg(d[j] == xs[j] * (float)s, "x*%g [%d]: %g, want %g", s, j, d[j], xs[j] * (float)s);
    kiln_scope_end();
  }
  assert_compiles(1, "x * s");
  assert_plans(1, "x * s");
  kiln_release(x);
}
END_TEST

START_TEST(new_clamp_bounds_compile_once) {
  kiln_reset_stats();
  kiln_tensor *x = kiln_from_data(xs, KILN_F32, KILN_SHAPE(4, 4));
  for (int i = 0; i < LOOP; i++) {
    kiln_scope_begin();
    double lo = -1 - i * 2e-4, hi = 1 + i * 3e-4;
    kiln_tensor *y = kiln_clamp(x, lo, hi);
    ck_assert_int_eq(kiln_realize(y), KILN_OK);
    const float *d = kiln_data(y);
    for (int j = 0; j < 16; j++) {
      float want = fminf(fmaxf(xs[j], (float)lo), (float)hi);
      ck_assert_msg(d[j] == want, "clamp(%g, %g) [%d]: %g, want %g", lo, hi, j, d[j], want);
    }
    kiln_scope_end();
  }
  assert_compiles(1, "clamp(x, lo, hi)");
  assert_plans(1, "clamp(x, lo, hi)");
  kiln_release(x);
}
END_TEST

START_TEST(new_fill_compiles_once) {
  kiln_reset_stats();
  for (int i = 0; i < LOOP; i++) {
    kiln_scope_begin();
    double v = i * 0.37 - 1000;
    kiln_tensor *y = kiln_full(KILN_SHAPE(3, 5), v, KILN_F32);
    ck_assert_int_eq(kiln_realize(y), KILN_OK);
    const float *d = kiln_data(y);
    for (int j = 0; j < 15; j++) ck_assert_msg(d[j] == (float)v, "full(%g) [%d]: %g", v, j, d[j]);
    kiln_scope_end();
  }
  assert_compiles(1, "full(shape, v)");
  assert_plans(1, "full(shape, v)");
}
END_TEST

START_TEST(new_seed_compiles_once) {
  kiln_reset_stats();
  float first = 0;
  for (int i = 0; i < LOOP; i++) {
    kiln_scope_begin();
    kiln_manual_seed((uint64_t)i * 7919u + 1);
    kiln_tensor *y = kiln_rand(KILN_SHAPE(64), KILN_F32);
    check_ref(y, 0, 0, "rand", i);   /* Philox is exact */
    if (i == 0) first = ((const float *)kiln_data(y))[0];
    if (i == 1) ck_assert_float_ne(((const float *)kiln_data(y))[0], first);
    kiln_scope_end();
  }
  assert_compiles(1, "rand with new seeds");
  assert_plans(1, "rand with new seeds");
}
END_TEST

/* The other sources whose values are arguments: one compile each. */
START_TEST(ranges_pads_and_bounds_are_arguments) {
  kiln_reset_stats();
  kiln_tensor *x = kiln_from_data(xs, KILN_F32, KILN_SHAPE(4, 4));
  for (int i = 0; i < 100; i++) {
    kiln_scope_begin();
    kiln_manual_seed((uint64_t)i);
    check_ref(kiln_arange(i, i + 8, 1), 0, 0, "arange i64", i);
    check_ref(kiln_arange(i + 0.5, i + 0.5 + 8 * 0.25, 0.25), 0, 0, "arange f32", i);
    check_ref(kiln_linspace(-i, 3.0 * i + 1, 7), 1e-6, 1e-6, "linspace", i);
    check_ref(kiln_pad(x, KILN_SHAPE(1, 2), i * 0.5 + 0.25), 0, 0, "pad", i);
    check_ref(kiln_randint(-i, 2 * i + 3, KILN_SHAPE(32), KILN_I64), 0, 0, "randint", i);
    kiln_scope_end();
  }
  assert_compiles(5, "arange i64, arange f32, linspace, pad, randint");
  assert_plans(5, "arange i64, arange f32, linspace, pad, randint");
  kiln_release(x);
}
END_TEST

/* Small integer exponents are code (multiplies, passes/values.c): each is
 * its own kernel; every other exponent is an argument of one kernel. */
START_TEST(small_integer_pow_is_code) {
  kiln_reset_stats();
  kiln_tensor *x = kiln_from_data(xs, KILN_F32, KILN_SHAPE(16));
  ref_tol tol = ref_tol_op(IR_POW, KILN_F32);
  static const double code[] = {-2, -1, 0, 2, 3, 4};
  for (size_t i = 0; i < sizeof code / sizeof *code; i++) {
    kiln_scope_begin();
    check_ref(kiln_pows(x, code[i]), tol.rtol, tol.atol, "pow by a small integer", (int)i);
    kiln_scope_end();
  }
  assert_compiles(6, "x ** -2, -1, 0, 2, 3, 4");
  kiln_tensor *pos = kiln_abs(x);
  for (int i = 0; i < 50; i++) {
    kiln_scope_begin();
    check_ref(kiln_pows(pos, 0.5 + i * 0.31), tol.rtol, tol.atol, "pow by a value", i);
    kiln_scope_end();
  }
  assert_compiles(7, "x ** values");
  assert_plans(7, "x ** values");
  kiln_release(pos);
  kiln_release(x);
}
END_TEST

/* Values the passes decide on are not arguments of the plan: x * 1 is x
 * (in x * s + 0.5), so the plan made for s = 1 serves s = 1 only; a plan
 * with s bound serves every s, 1 included (x * 1 computed is x). */
START_TEST(identity_values_pin_their_plan) {
  kiln_reset_stats();
  kiln_tensor *x = kiln_from_data(xs, KILN_F32, KILN_SHAPE(16));
  static const double s[] = {1, 2, 1, 3, 1, -0.5};
  static const int plans[] = {1, 2, 2, 2, 2, 2};
  for (int i = 0; i < 6; i++) {
    kiln_scope_begin();
    kiln_tensor *y = kiln_adds(kiln_muls(x, s[i]), 0.5);
    ck_assert_int_eq(kiln_realize(y), KILN_OK);
    const float *d = kiln_data(y);
    for (int j = 0; j < 16; j++) {
      float want = xs[j] * (float)s[i] + 0.5f;
      ck_assert_msg(d[j] == want, "x*%g + 0.5 [%d]: %g, want %g", s[i], j, d[j], want);
    }
    kiln_scope_end();
    assert_plans((uint64_t)plans[i], "x * s + 0.5, s = 1 first");
  }
  kiln_release(x);
}
END_TEST

/* A value the simplifier folds (c * 2 is one constant) is the plan's, even
 * where the same value also reaches a kernel as an argument (x * c): a new
 * c plans again (and compiles nothing); each result is exact. */
START_TEST(folded_values_pin_their_plan) {
  kiln_reset_stats();
  kiln_tensor *x = kiln_from_data(xs, KILN_F32, KILN_SHAPE(16));
  for (int i = 0; i < 20; i++) {
    kiln_scope_begin();
    float c = 0.75f + 0.375f * (float)i;   /* never 1: x * 1 is x */
    kiln_tensor *cc = kiln_full(KILN_SHAPE(1), c, KILN_F32);
    kiln_tensor *y = kiln_add(kiln_mul(x, cc), kiln_muls(cc, 2));
    ck_assert_int_eq(kiln_realize(y), KILN_OK);
    const float *d = kiln_data(y);
    for (int j = 0; j < 16; j++) {
      float want = xs[j] * c + c * 2;
      ck_assert_msg(d[j] == want, "x*c + c*2, c = %g [%d]: %g, want %g", c, j, d[j], want);
    }
    kiln_scope_end();
  }
  assert_plans(20, "x*c + c*2 with 20 values of c");
  assert_compiles(1, "x*c + c*2 with 20 values of c");
  kiln_release(x);
}
END_TEST

/* Equal values merge (cse): x*a + x*b with a == b is one product, so that
 * plan is for equal values only; with a != b the products stay apart and
 * that plan serves every a and b. */
START_TEST(merged_values_pin_their_plan) {
  kiln_reset_stats();
  kiln_tensor *x = kiln_from_data(xs, KILN_F32, KILN_SHAPE(16));
  static const float a[] = {2, 3, 7, 4}, b[] = {2, 5, 7, -1};
  static const int plans[] = {1, 2, 2, 2};
  for (int i = 0; i < 4; i++) {
    kiln_scope_begin();
    kiln_tensor *y = kiln_add(kiln_muls(x, a[i]), kiln_muls(x, b[i]));
    ck_assert_int_eq(kiln_realize(y), KILN_OK);
    const float *d = kiln_data(y);
    for (int j = 0; j < 16; j++) {
      float want = xs[j] * a[i] + xs[j] * b[i];
      ck_assert_msg(d[j] == want, "x*%g + x*%g [%d]: %g, want %g", a[i], b[i], j, d[j], want);
    }
    kiln_scope_end();
    assert_plans((uint64_t)plans[i], "x*a + x*b");
  }
  kiln_release(x);
}
END_TEST

/* Kernels are named by what they compute (KILN_DEBUG=1, kiln_dump_graph). */
START_TEST(kernel_names_say_what_they_compute) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(xs, KILN_F32, KILN_SHAPE(4, 4));
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_int_eq(kiln_dump_graph(kiln_softmax(x, -1), f, KILN_FMT_TEXT), KILN_OK);
  fclose(f);
  ck_assert_msg(strstr(text, " k_softmax_f32_"), "%s", text);
  free(text);
  kiln_scope_end();
}
END_TEST

/* ---- section: one kernel per structure, whatever the shape ---------------- */
/* relu(a*b + c) * sigmoid(a), c broadcast over rows: one kernel per shape. */
static void w1_checked(int64_t rows, int64_t cols, uint64_t seed) {
  kiln_scope_begin();
  kiln_tensor *a = tu_data(KILN_F32, KILN_SHAPE(rows, cols), seed, TU_SMALL);
  kiln_tensor *b = tu_data(KILN_F32, KILN_SHAPE(rows, cols), seed + 1, TU_SMALL);
  kiln_tensor *c = tu_data(KILN_F32, KILN_SHAPE(cols), seed + 2, TU_SMALL);
  kiln_tensor *y = kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(a));
  ref_tol tol = ref_tol_op(IR_SIGMOID, KILN_F32);
  check_ref(y, tol.rtol, tol.atol + 1e-5, "w1", (int)rows);
  kiln_scope_end();
}

static const int64_t w1_shapes[][2] = {{33, 65}, {33, 65}, {40, 65}, {17, 30}, {5, 7}, {64, 129}};
#define NW1 (sizeof w1_shapes / sizeof *w1_shapes)

/* Per shape in order, the compiles so far for each KILN_DYNAMIC mode. */
static void w1_loop(int mode, const uint64_t *want) {
  kiln_set_dynamic(mode);
  kiln_reset_stats();
  for (size_t i = 0; i < NW1; i++) {
    w1_checked(w1_shapes[i][0], w1_shapes[i][1], i);
    char what[64];
    snprintf(what, sizeof what, "KILN_DYNAMIC=%d, shape %zu", mode, i);
    assert_compiles(want[i], what);
  }
}

START_TEST(auto_dynamic_compiles_twice) {
  w1_loop(KILN_DYNAMIC_AUTO, (const uint64_t[NW1]){1, 1, 2, 2, 2, 2});  /* exact, then generic */
}
END_TEST

START_TEST(dynamic_on_compiles_once) {
  w1_loop(KILN_DYNAMIC_ON, (const uint64_t[NW1]){1, 1, 1, 1, 1, 1});
}
END_TEST

START_TEST(dynamic_off_compiles_per_shape) {
  w1_loop(KILN_DYNAMIC_OFF, (const uint64_t[NW1]){1, 1, 2, 3, 4, 5});
}
END_TEST

/* Views, sources and reductions of the generic kernels: each expression at
 * three shapes, generic only, against the oracle. (How many variants they
 * compile depends on which of their sizes happen to be equal or 1, which
 * the variants' keys hold; the batch loops below count them.) */
static kiln_tensor *views_expr(int64_t r, int64_t c, int which) {
  kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(r, c), (uint64_t)(r * c), TU_SMALL);
  kiln_tensor *y = kiln_relu(x);   /* computed: its views fold into the kernel's index */
  switch (which) {
  case 0: return kiln_slice(kiln_slice(y, 1, 1, c, 2), 0, 1, r - 1, 1);
  case 1: return kiln_flip(kiln_transpose(y, 0, 1), KILN_DIMS(0, 1));
  case 2: return kiln_pad(y, KILN_SHAPE(2, 1, 1, 3), -0.5);
  case 3: return kiln_cat(2, ((kiln_tensor *[]){y, kiln_neg(x)}), 1);
  case 4: return kiln_reshape(kiln_transpose(y, 0, 1), KILN_SHAPE(c * r));
  case 5: return kiln_sum_dims(kiln_mul(y, kiln_slice(x, 1, 0, c, 1)), KILN_DIMS(1), 1);
  case 6: return kiln_add(kiln_softmax(x, -1), kiln_reshape(kiln_arange(0, r * c, 1), KILN_SHAPE(r, c)));
  default: return kiln_index(x, "1:, ::2");   /* a strided buffer view */
  }
}

START_TEST(generic_views_sources_reductions) {
  kiln_set_dynamic(KILN_DYNAMIC_ON);
  for (int which = 0; which < 8; which++) {
    static const int64_t shapes[][2] = {{6, 9}, {11, 4}, {3, 17}};
    for (int i = 0; i < 3; i++) {
      kiln_scope_begin();
      check_ref(views_expr(shapes[i][0], shapes[i][1], which), 1e-6, 1e-6, "generic view", which);
      kiln_scope_end();
    }
  }
}
END_TEST

/* A 2-layer MLP forward over 100 batch sizes, all above the widths (equal
 * sizes share one argument, duck sizing, so a batch equal to a width would
 * be another structure), its products as GEMMs (kiln_linear: shape-generic
 * from the first size) and as broadcast multiplies and sums (reductions:
 * specialised, then generic). */
#define MLP_IN 5
#define MLP_HID 7
#define MLP_OUT 11
#define MLP_BATCH0 12

static kiln_tensor *dense(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, bool gemm) {
  if (gemm) return kiln_linear(x, w, b);
  return kiln_add(kiln_sum_dims(kiln_mul(kiln_unsqueeze(x, 1), kiln_unsqueeze(w, 0)), KILN_DIMS(-1), 0), b);
}

static void mlp_over_batch_sizes(bool gemm) {
  kiln_set_dynamic(KILN_DYNAMIC_AUTO);
  kiln_scope_begin();
  kiln_tensor *w1 = tu_data(KILN_F32, KILN_SHAPE(MLP_HID, MLP_IN), 1, TU_SMALL);
  kiln_tensor *b1 = tu_data(KILN_F32, KILN_SHAPE(MLP_HID), 2, TU_SMALL);
  kiln_tensor *w2 = tu_data(KILN_F32, KILN_SHAPE(MLP_OUT, MLP_HID), 3, TU_SMALL);
  kiln_tensor *b2 = tu_data(KILN_F32, KILN_SHAPE(MLP_OUT), 4, TU_SMALL);
  w1 = kiln_muls(w1, 0.25);
  w2 = kiln_muls(w2, 0.25);
  kiln_tensor *ws[] = {w1, w2};
  ck_assert_int_eq(kiln_realize_n(2, ws), KILN_OK);
  kiln_reset_stats();
  uint64_t first = 0, second = 0;
  for (int64_t batch = MLP_BATCH0; batch < MLP_BATCH0 + 100; batch++) {
    kiln_scope_begin();
    kiln_tensor *x = tu_data(KILN_F32, KILN_SHAPE(batch, MLP_IN), (uint64_t)batch, TU_SMALL);
    kiln_tensor *y = kiln_softmax(dense(kiln_relu(dense(x, w1, b1, gemm)), w2, b2, gemm), -1);
    check_ref(y, 1e-4, 1e-6, gemm ? "mlp batch (linear)" : "mlp batch", (int)batch);
    kiln_scope_end();
    if (batch == MLP_BATCH0) first = kiln_stats().compiles;
    if (batch == MLP_BATCH0 + 1) second = kiln_stats().compiles;
  }
  kiln_scope_end();
  uint64_t all = kiln_stats().compiles;
  ck_assert_msg(second <= 2 * first && all == second, "%s: %llu kernels compiled for the first batch size, %llu "
                "after two, %llu after 100", gemm ? "linear" : "sums", (unsigned long long)first,
                (unsigned long long)second, (unsigned long long)all);
}

START_TEST(mlp_over_batch_sizes_compiles_twice) {
  mlp_over_batch_sizes(true);
  mlp_over_batch_sizes(false);
}
END_TEST

/* One compile per GEMM structure, whatever its shapes: the driver takes
 * every size, the epilogue is shape-generic from the first shape (square
 * and not, batched, transposed and strided operands, fused epilogues),
 * each result against the oracle. */
static kiln_tensor *gemm_expr(int which, int64_t m, int64_t n, int64_t kd) {
  uint64_t seed = (uint64_t)(m * 10007 + n * 101 + kd);
  switch (which) {
  case 0: return kiln_matmul(tu_data(KILN_F32, KILN_SHAPE(m, kd), seed, TU_SMALL),
                             tu_data(KILN_F32, KILN_SHAPE(kd, n), seed + 1, TU_SMALL));
  case 1: return kiln_gelu(kiln_linear(tu_data(KILN_F32, KILN_SHAPE(m, kd), seed, TU_SMALL),
                                       tu_data(KILN_F32, KILN_SHAPE(n, kd), seed + 1, TU_SMALL),
                                       tu_data(KILN_F32, KILN_SHAPE(n), seed + 2, TU_SMALL)));
  case 2: return kiln_matmul(tu_data(KILN_F64, KILN_SHAPE(3, m, kd), seed, TU_SMALL),
                             tu_data(KILN_F64, KILN_SHAPE(3, kd, n), seed + 1, TU_SMALL));
  case 3: {   /* A: every other column of a wider matrix; B read transposed */
    kiln_tensor *a = kiln_slice(tu_data(KILN_F32, KILN_SHAPE(m, 2 * kd), seed, TU_SMALL), 1, 0, 2 * kd, 2);
    kiln_tensor *b = kiln_transpose(tu_data(KILN_F32, KILN_SHAPE(n, kd), seed + 1, TU_SMALL), 0, 1);
    return kiln_add(kiln_matmul(a, b), tu_data(KILN_F32, KILN_SHAPE(m, n), seed + 2, TU_SMALL));
  }
  default: return NULL;
  }
}

START_TEST(gemm_shapes_compile_once) {
  static const int64_t shapes[][3] = {{9, 13, 6}, {20, 20, 20}, {33, 7, 50}, {5, 70, 3}, {64, 48, 40}, {17, 17, 2}};
  kiln_set_dynamic(KILN_DYNAMIC_AUTO);
  for (int which = 0; which < 4; which++) {
    kiln_reset_stats();
    uint64_t first = 0;
    for (int i = 0; i < 6; i++) {
      kiln_scope_begin();
      check_ref(gemm_expr(which, shapes[i][0], shapes[i][1], shapes[i][2]), 1e-5, 1e-5, "gemm shape", which * 10 + i);
      kiln_scope_end();
      if (i == 0) first = kiln_stats().compiles;
    }
    uint64_t all = kiln_stats().compiles;
    ck_assert_msg(first >= 1 && all == first, "gemm structure %d: %llu compiles at the first shape, %llu after 6",
                  which, (unsigned long long)first, (unsigned long long)all);
  }
}
END_TEST

/* stderr while run() runs with KILN_DEBUG=level, into text. */
static void debug_text(int level, void (*run)(void), char *text, size_t size) {
  rt_opts()->debug = level;
  FILE *log = tmpfile();
  ck_assert_ptr_nonnull(log);
  int saved = dup(2);
  dup2(fileno(log), 2);
  run();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rt_opts()->debug = 0;
  rewind(log);
  size_t n = fread(text, 1, size - 1, log);
  text[n] = 0;
  fclose(log);
}

/* A softmax of x * s realized for two values of s, then a compiled function
 * run at one size. */
static void two_plans(void) {
  kiln_tensor *x = kiln_from_data(xs, KILN_F32, KILN_SHAPE(16));
  for (int i = 0; i < 2; i++) {
    kiln_scope_begin();
    ck_assert_int_eq(kiln_realize(kiln_softmax(kiln_muls(x, 2.0 + i), 0)), KILN_OK);
    kiln_scope_end();
  }
  kiln_tensor *p = kiln_placeholder(KILN_F32, KILN_SHAPE(-1)), *q = kiln_exp(p), *out = NULL;
  kiln_fn *f = kiln_compile(1, &p, 1, &q);
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(kiln_fn_run(f, &x, &out), KILN_OK);
  kiln_release(out);
  kiln_fn_free(f);
  kiln_release(q);
  kiln_release(p);
  kiln_release(x);
}

/* KILN_DEBUG=2 adds what level 1 does not: whether each realize's plan was
 * made (and in how long) or found, its values bound, and the plans of a
 * compiled function. */
START_TEST(debug_level_2_says_where_plans_came_from) {
  char text[8192];
  debug_text(2, two_plans, text, sizeof text);
  const char *made = strstr(text, "kiln: plan for softmax at ");
  const char *found = made ? strstr(made + 1, "kiln: plan for softmax at ") : NULL;
  ck_assert_msg(made && strstr(made, ": made in ") && strstr(made, " ms (1 step)"), "%s", text);
  ck_assert_msg(found && strstr(found, ": found (1 step), its values bound as launch arguments"), "%s", text);
  ck_assert_msg(strstr(text, "kiln: plan for the function compiled at ") && strstr(text, ", dynamic size 16: made in "),
                "%s", text);
  ck_assert_msg(strstr(text, "kiln: k_softmax_f32_"), "level 2 keeps level 1's lines:\n%s", text);
  debug_text(1, two_plans, text, sizeof text);
  ck_assert_msg(!strstr(text, "kiln: plan for") && strstr(text, "kiln: k_softmax_f32_"), "%s", text);
}
END_TEST

/* x * s over a slice of x with a new length (a new shape) each time. */
static void three_shapes(void) {
  kiln_tensor *x = kiln_from_data(xs, KILN_F32, KILN_SHAPE(16));
  for (int i = 0; i < 3; i++) {
    kiln_scope_begin();
    kiln_tensor *y = kiln_muls(kiln_slice(x, 0, 0, 16 - i, 1), 3.0 + i);
    ck_assert_int_eq(kiln_realize(y), KILN_OK);
    kiln_scope_end();
  }
  kiln_release(x);
}

/* KILN_DEBUG=1 says per kernel whether it was compiled (and how long that
 * took) or found in memory, and which variant ran. */
START_TEST(debug_lines_say_where_kernels_came_from) {
  char text[4096];
  debug_text(1, three_shapes, text, sizeof text);
  const char *first = strstr(text, "kiln: k_mul_f32_"), *then = strstr(text, "(generic, compiled in ");
  ck_assert_msg(first && strstr(first, " ms)") && strstr(text, "(compiled in "), "%s", text);
  ck_assert_msg(then && strstr(then, "(generic, memory)"), "%s", text);
}
END_TEST

static Suite *loops_suite(void) {
  setenv("KILN_CACHE", "0", 1);   /* a disk cache must not turn the first compile into a hit */
  Suite *s = suite_create("loops");
  TCase *tc = tcase_create("values");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, new_scalar_compiles_once);
  tcase_add_test(tc, new_clamp_bounds_compile_once);
  tcase_add_test(tc, new_fill_compiles_once);
  tcase_add_test(tc, new_seed_compiles_once);
  tcase_add_test(tc, identity_values_pin_their_plan);
  tcase_add_test(tc, folded_values_pin_their_plan);
  tcase_add_test(tc, merged_values_pin_their_plan);
  tcase_add_test(tc, ranges_pads_and_bounds_are_arguments);
  tcase_add_test(tc, small_integer_pow_is_code);
  tcase_add_test(tc, kernel_names_say_what_they_compute);
  tcase_add_test(tc, debug_lines_say_where_kernels_came_from);
  tcase_add_test(tc, debug_level_2_says_where_plans_came_from);
  suite_add_tcase(s, tc);
  tc = tcase_create("shapes");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, auto_dynamic_compiles_twice);
  tcase_add_test(tc, dynamic_on_compiles_once);
  tcase_add_test(tc, dynamic_off_compiles_per_shape);
  tcase_add_test(tc, generic_views_sources_reductions);
  tcase_add_test(tc, mlp_over_batch_sizes_compiles_twice);
  tcase_add_test(tc, gemm_shapes_compile_once);
  suite_add_tcase(s, tc);
  return s;
}

KILN_TEST_MAIN(loops_suite)
