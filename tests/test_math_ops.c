/* test_math_ops.c: issue 13's math group through the public API: the error
 * bound of each new function against libm over sweeps (f32, f64), special
 * values and domain edges, the relative accuracy of erfc/expm1/log1p where
 * the naive forms lose it, the activations and logaddexp against their
 * textbook formulas and the oracle (fused and eager), and the error paths.
 * (test_ops.c runs the new ops on every dtype with promotion and scalars.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

typedef kiln_tensor *(*unary_fn)(const char *, int, kiln_tensor *);

static int64_t ord64(double d) {
  int64_t i;
  memcpy(&i, &d, 8);
  return i < 0 ? INT64_MIN - i : i;
}

/* ulps between got and want, as tu_ulps_f32 */
static int64_t ulps64(double got, double want) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got) ? 0 : INT64_MAX;
  int64_t a = ord64(got), b = ord64(want);
  return a > b ? a - b : b - a;
}

/* y = fn(x) (or fn2(x, x2)) through kiln, fused, n elements of dt. */
static void run_op(ir_op op, kiln_dtype dt, int64_t n, const void *x, const void *x2, void *y) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(x, dt, KILN_SHAPE(n));
  kiln_tensor *r = x2 ? tu_binary(op)(__FILE__, __LINE__, a, kiln_from_data(x2, dt, KILN_SHAPE(n)))
                      : tu_unary(op)(__FILE__, __LINE__, a);
  ck_assert_msg(kiln_realize(r) == KILN_OK, "%s: %s", ir_ops[op].name, kiln_last_error());
  ck_assert_int_eq(kiln_dtype_of(r), dt);
  memcpy(y, kiln_data(r), (size_t)n * ir_dtypes[dt].size);
  kiln_scope_end();
}

static double libm_of(ir_op op, double x, double y) {
  switch (op) {
  case IR_ERF: return erf(x);
  case IR_ERFC: return erfc(x);
  case IR_EXPM1: return expm1(x);
  case IR_LOG1P: return log1p(x);
  case IR_LOG2: return log2(x);
  case IR_LOG10: return log10(x);
  case IR_EXP2: return exp2(x);
  case IR_TAN: return tan(x);
  case IR_ASIN: return asin(x);
  case IR_ACOS: return acos(x);
  case IR_ATAN: return atan(x);
  case IR_SINH: return sinh(x);
  case IR_COSH: return cosh(x);
  case IR_ASINH: return asinh(x);
  case IR_ACOSH: return acosh(x);
  case IR_ATANH: return atanh(x);
  case IR_ATAN2: return atan2(x, y);
  default: ck_abort_msg("libm_of: %s", ir_ops[op].name);
  }
  return 0;
}

/* ---- accuracy -----------------------------------------------------------
 * f32: max ulp against libm's f64 result rounded to f32, over a linear sweep
 * of the useful range, a sweep of bit patterns across all floats (tiny ones,
 * where expm1 and log1p must keep their relative accuracy; subnormals, huge,
 * inf, nan) and special values. atan2: a grid of the bit sweep against
 * itself. Measured on x86-64 with FMA (~1M inputs each; max ulp):
 *   erf 1, erfc 2 (Numerical Recipes' erfc fit, 1.2e-7 relative; the sweep
 *   reaches x = 10, results down to subnormal), tan 1 (every float, huge
 *   ones too), acos 1, and 0 for expm1, log1p, log2, log10, exp2, asin,
 *   atan, sinh, cosh, asinh, acosh, atanh and atan2: their f64 cores are good to
 *   2^-36 or better, so they round correctly but for results within 2^-36
 *   of a tie; 1 ulp is asserted for those (and acos).
 * f64 calls the process's libm: 0 ulp, asserted on a shorter sweep. */
typedef struct {
  ir_op op;
  double lo, hi;   /* linear sweep */
  int64_t bound;   /* f32 max ulp */
} acc_row;

static const acc_row acc_rows[] = {
  {IR_ERF, -6, 6, 1},       {IR_ERFC, -4, 10, 2},    {IR_EXPM1, -20, 89, 1},  {IR_LOG1P, -1, 50, 1},
  {IR_LOG2, 0, 100, 1},     {IR_LOG10, 0, 100, 1},   {IR_EXP2, -150, 128, 1}, {IR_TAN, -20, 20, 1},
  {IR_ASIN, -1, 1, 1},      {IR_ACOS, -1, 1, 1},     {IR_ATAN, -20, 20, 1},   {IR_SINH, -90, 90, 1},
  {IR_COSH, -90, 90, 1},    {IR_ASINH, -100, 100, 1}, {IR_ACOSH, 1, 100, 1},  {IR_ATANH, -1, 1, 1},
};
enum { NACC = sizeof acc_rows / sizeof *acc_rows };

START_TEST(accuracy_f32) {
  const acc_row *r = &acc_rows[_i];
  enum { N = 1 << 20 };
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  ck_assert(x && y);
  int n = tu_sweep_f32(x, N, r->lo, r->hi);
  run_op(r->op, KILN_F32, n, x, NULL, y);
  int64_t worst = 0;
  int at = 0;
  for (int i = 0; i < n; i++) {
    int64_t e = tu_ulps_f32(y[i], (float)libm_of(r->op, x[i], 0));
    if (e > worst) worst = e, at = i;
  }
  printf("accuracy f32 %-6s max %lld ulp at %a\n", ir_ops[r->op].name, (long long)worst, x[at]);
  ck_assert_msg(worst <= r->bound, "%s: %lld ulp at %a: got %a, want %a", ir_ops[r->op].name, (long long)worst,
                x[at], y[at], (float)libm_of(r->op, x[at], 0));
  free(x);
  free(y);
}
END_TEST

START_TEST(accuracy_atan2_f32) {
  enum { S = 1024, N = S * S };
  float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *y = malloc(N * sizeof *y), *v = malloc(S * sizeof *v);
  ck_assert(a && b && y && v);
  int m = tu_sweep_f32(v, S, -10, 10);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < m; j++) a[i * m + j] = v[i], b[i * m + j] = v[j];
  run_op(IR_ATAN2, KILN_F32, (int64_t)m * m, a, b, y);
  int64_t worst = 0;
  int at = 0;
  for (int i = 0; i < m * m; i++) {
    int64_t e = tu_ulps_f32(y[i], (float)atan2(a[i], b[i]));
    if (e > worst) worst = e, at = i;
  }
  printf("accuracy f32 atan2  max %lld ulp at (%a, %a)\n", (long long)worst, a[at], b[at]);
  ck_assert_msg(worst <= 1, "atan2(%a, %a) = %a, want %a", a[at], b[at], y[at], (float)atan2(a[at], b[at]));
  free(a); free(b); free(y); free(v);
}
END_TEST

START_TEST(accuracy_f64) {
  const acc_row *r = &acc_rows[_i];
  enum { N = 1 << 16 };
  double *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  ck_assert(x && y);
  for (int i = 0; i < N / 2; i++) x[i] = r->lo + (r->hi - r->lo) * i / (N / 2 - 1);
  for (int i = N / 2; i < N; i++) {  /* bit patterns across all doubles */
    uint64_t u = (uint64_t)(i - N / 2) * (UINT64_MAX / (N / 2));
    memcpy(&x[i], &u, 8);
  }
  run_op(r->op, KILN_F64, N, x, NULL, y);
  for (int i = 0; i < N; i++)
    ck_assert_msg(ulps64(y[i], libm_of(r->op, x[i], 0)) == 0, "%s(%a) = %a, libm %a", ir_ops[r->op].name, x[i], y[i],
                  libm_of(r->op, x[i], 0));
  free(x);
  free(y);
}
END_TEST

/* ---- special values, domain edges, tiny and huge arguments ---------------
 * want is checked exactly (sign of zero included) when it is 0, inf or nan,
 * else within 2 ulp of the dtype: these are the cases naive formulas get
 * wrong (1 - erf for large x, e^x - 1 and log(1 + x) for tiny x). */
typedef struct { ir_op op; double x, x2, want; } special;

static const special specials[] = {
  {IR_ERF, -0.0, 0, -0.0},          {IR_ERF, INFINITY, 0, 1},          {IR_ERF, -INFINITY, 0, -1},
  {IR_ERF, 1e-30, 0, 1.1283791670955127e-30}, {IR_ERF, NAN, 0, NAN},
  {IR_ERFC, INFINITY, 0, 0},        {IR_ERFC, -INFINITY, 0, 2},        {IR_ERFC, 0, 0, 1},
  {IR_ERFC, 9, 0, 4.13703174651381e-37}, {IR_ERFC, 5, 0, 1.5374597944280351e-12},
  {IR_EXPM1, -0.0, 0, -0.0},        {IR_EXPM1, 1e-10, 0, 1.00000000005e-10}, {IR_EXPM1, -3e-8, 0, -2.99999995500000045e-8},
  {IR_EXPM1, -INFINITY, 0, -1},     {IR_EXPM1, INFINITY, 0, INFINITY}, {IR_EXPM1, 1e-40, 0, 1e-40},
  {IR_LOG1P, -0.0, 0, -0.0},        {IR_LOG1P, 1e-10, 0, 9.999999999500001e-11}, {IR_LOG1P, -1e-12, 0, -1.0000000000005e-12},
  {IR_LOG1P, -1, 0, -INFINITY},     {IR_LOG1P, -2, 0, NAN},            {IR_LOG1P, INFINITY, 0, INFINITY},
  {IR_LOG2, 0, 0, -INFINITY},       {IR_LOG2, 8, 0, 3},                {IR_LOG2, -1, 0, NAN},
  {IR_LOG2, 0x1p-149, 0, -149},     {IR_LOG10, 1000, 0, 3},            {IR_LOG10, -0.0, 0, -INFINITY},
  {IR_LOG10, INFINITY, 0, INFINITY}, {IR_EXP2, 10, 0, 1024},           {IR_EXP2, -INFINITY, 0, 0},
  {IR_EXP2, -149, 0, 0x1p-149},     {IR_EXP2, 1024, 0, INFINITY},
  {IR_TAN, -0.0, 0, -0.0},          {IR_TAN, INFINITY, 0, NAN},        {IR_TAN, 1e-30, 0, 1e-30},
  {IR_ASIN, -0.0, 0, -0.0},         {IR_ASIN, 1, 0, M_PI_2},           {IR_ASIN, 1.5, 0, NAN},
  {IR_ASIN, -1, 0, -M_PI_2},        {IR_ACOS, 1, 0, 0},                {IR_ACOS, -1, 0, M_PI},
  {IR_ACOS, -1.0000001192092896, 0, NAN}, {IR_ACOS, NAN, 0, NAN},
  {IR_ATAN, -INFINITY, 0, -M_PI_2}, {IR_ATAN, -0.0, 0, -0.0},          {IR_ATAN, 1, 0, M_PI_4},
  {IR_SINH, -0.0, 0, -0.0},         {IR_SINH, 1e-20, 0, 1e-20},        {IR_SINH, -INFINITY, 0, -INFINITY},
  {IR_SINH, 100, 0, 1.3440585709080678e43}, {IR_COSH, -INFINITY, 0, INFINITY}, {IR_COSH, 0, 0, 1},
  {IR_ASINH, -0.0, 0, -0.0},        {IR_ASINH, -INFINITY, 0, -INFINITY}, {IR_ASINH, 1e-20, 0, 1e-20},
  {IR_ASINH, 1e30, 0, 69.77069997038132}, {IR_ACOSH, 1, 0, 0},         {IR_ACOSH, 0.5, 0, NAN},
  {IR_ACOSH, -2, 0, NAN},           {IR_ACOSH, -1e30, 0, NAN},         {IR_ACOSH, INFINITY, 0, INFINITY},
  {IR_ATANH, 1, 0, INFINITY},       {IR_ATANH, -1, 0, -INFINITY},      {IR_ATANH, 2, 0, NAN},
  {IR_ATANH, -0.0, 0, -0.0},        {IR_ATANH, 1e-20, 0, 1e-20},       {IR_ATANH, -1.5, 0, NAN},
  {IR_ATAN2, 0.0, -0.0, M_PI},      {IR_ATAN2, -0.0, -0.0, -M_PI},     {IR_ATAN2, -0.0, 0.0, -0.0},
  {IR_ATAN2, 1, -INFINITY, M_PI},   {IR_ATAN2, INFINITY, -INFINITY, 3 * M_PI_4},
  {IR_ATAN2, -INFINITY, INFINITY, -M_PI_4}, {IR_ATAN2, -5, 0, -M_PI_2}, {IR_ATAN2, 0, NAN, NAN},
  {IR_ATAN2, 1e-30, 1e30, 1e-60},
};
enum { NSPECIAL = sizeof specials / sizeof *specials };

static bool exact_want(double w) { return isnan(w) || isinf(w) || w == 0; }

START_TEST(special_values) {
  static const kiln_dtype dts[] = {KILN_F32, KILN_F64};
  kiln_dtype dt = dts[_i % 2];
  int eager = _i / 2;
  kiln_set_eager(eager);
  for (int k = 0; k < NSPECIAL; k++) {
    const special *s = &specials[k];
    bool binary = ir_ops[s->op].arity == 2;
    double got, want = s->want;
    if (dt == KILN_F32) {
      float x = (float)s->x, x2 = (float)s->x2, y;
      run_op(s->op, dt, 1, &x, binary ? &x2 : NULL, &y);
      got = y;
      want = (float)want;
    } else {
      double y;
      run_op(s->op, dt, 1, &s->x, binary ? &s->x2 : NULL, &y);
      got = y;
    }
    bool ok = exact_want(want) ? (isnan(want) ? isnan(got) : got == want && signbit(got) == signbit(want))
                               : (dt == KILN_F32 ? tu_ulps_f32((float)got, (float)want) <= 2 : fabs(got - want) <= 4e-16 * fabs(want));
    ck_assert_msg(ok, "%s %s(%a, %a) = %a, want %a (%s)", ir_dtypes[dt].name, ir_ops[s->op].name, s->x, s->x2, got,
                  want, eager ? "eager" : "fused");
  }
  kiln_set_eager(0);
}
END_TEST

/* ---- activations and logaddexp against their formulas ------------------ */
#define SELU_A 1.6732632423543772848170429916717
#define SELU_S 1.0507009873554804934193349852946

static double softplus_ref(double x, double beta, double th) { return beta * x > th ? x : log1p(exp(beta * x)) / beta; }

typedef struct {
  const char *name;
  kiln_tensor *(*build)(kiln_tensor *x);   /* the op, parameters bound */
  double (*ref)(double x);
} act_row;

static kiln_tensor *b_elu(kiln_tensor *x) { return kiln_elu(x, 1.0); }
static kiln_tensor *b_elu2(kiln_tensor *x) { return kiln_elu(x, 0.5); }
static kiln_tensor *b_celu(kiln_tensor *x) { return kiln_celu(x, 2.0); }
static kiln_tensor *b_selu(kiln_tensor *x) { return kiln_selu(x); }
static kiln_tensor *b_softplus(kiln_tensor *x) { return kiln_softplus(x, 1, 20); }
static kiln_tensor *b_softplus2(kiln_tensor *x) { return kiln_softplus(x, 2, 5); }
static kiln_tensor *b_mish(kiln_tensor *x) { return kiln_mish(x); }
static kiln_tensor *b_logsigmoid(kiln_tensor *x) { return kiln_logsigmoid(x); }
static kiln_tensor *b_logaddexp(kiln_tensor *x) { return kiln_logaddexps(x, 3.0); }

static double r_elu(double x) { return x > 0 ? x : expm1(x); }
static double r_elu2(double x) { return x > 0 ? x : 0.5 * expm1(x); }
static double r_celu(double x) { return fmax(0, x) + fmin(0, 2 * expm1(x / 2)); }
static double r_selu(double x) { return SELU_S * (x > 0 ? x : SELU_A * expm1(x)); }
static double r_softplus(double x) { return softplus_ref(x, 1, 20); }
static double r_softplus2(double x) { return softplus_ref(x, 2, 5); }
static double r_mish(double x) { return x * tanh(softplus_ref(x, 1, 20)); }
static double r_logsigmoid(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }
static double r_logaddexp(double x) { return fmax(x, 3) + log1p(exp(-fabs(x - 3))); }

static const act_row acts[] = {
  {"elu", b_elu, r_elu},                {"elu(alpha 0.5)", b_elu2, r_elu2},
  {"celu(alpha 2)", b_celu, r_celu},    {"selu", b_selu, r_selu},
  {"softplus", b_softplus, r_softplus}, {"softplus(beta 2, threshold 5)", b_softplus2, r_softplus2},
  {"mish", b_mish, r_mish},             {"logsigmoid", b_logsigmoid, r_logsigmoid},
  {"logaddexps(x, 3)", b_logaddexp, r_logaddexp},
};
enum { NACT = sizeof acts / sizeof *acts, NGRID = 1201 };

/* x in [-60, 60] (both tails, the softplus thresholds, tiny values) against
 * the formula in f64 libm, f32 and f64, fused and eager. A few rounded ops
 * each: f32 within 8 ulp-sized relative steps plus an absolute 1e-7 near
 * the zeros (mish(-60) ~ -5e-25). */
START_TEST(activations_formula) {
  static const struct { kiln_dtype dt; int eager; } modes[] = {{KILN_F32, 0}, {KILN_F32, 1}, {KILN_F64, 0}};
  kiln_dtype dt = modes[_i].dt;
  int eager = modes[_i].eager;
  kiln_set_eager(eager);
  double x[NGRID];
  for (int i = 0; i < NGRID; i++) x[i] = -60 + 0.1 * i;
  x[600] = -0.0, x[601] = 1e-30, x[602] = -1e-30;
  double rtol = dt == KILN_F32 ? 1e-6 : 1e-14, atol = dt == KILN_F32 ? 1e-7 : 1e-300;
  for (int k = 0; k < NACT; k++) {  /* in one process: eager kernels are shared */
    const act_row *a = &acts[k];
    kiln_scope_begin();
    kiln_tensor *t = kiln_cast(kiln_from_data(x, KILN_F64, KILN_SHAPE(NGRID)), dt);
    kiln_tensor *y = kiln_cast(a->build(t), KILN_F64);
    ck_assert_msg(kiln_realize(y) == KILN_OK, "%s: %s", a->name, kiln_last_error());
    const double *got = kiln_data(y);
    for (int i = 0; i < NGRID; i++) {
      double xi = dt == KILN_F32 ? (double)(float)x[i] : x[i], want = a->ref(xi);
      ck_assert_msg(fabs(got[i] - want) <= atol + rtol * fabs(want), "%s %s(%.17g) = %.17g, want %.17g (%s)",
                    ir_dtypes[dt].name, a->name, xi, got[i], want, eager ? "eager" : "fused");
    }
    kiln_scope_end();
  }
  kiln_set_eager(0);
}
END_TEST

/* nan stays nan, the infinities go where the formulas say. */
START_TEST(activations_specials) {
  double x[3] = {NAN, INFINITY, -INFINITY};
  static const double want[NACT][3] = {
    {NAN, INFINITY, -1}, {NAN, INFINITY, -0.5}, {NAN, INFINITY, -2}, {NAN, INFINITY, -SELU_S * SELU_A},
    {NAN, INFINITY, 0}, {NAN, INFINITY, 0}, {NAN, INFINITY, NAN}, {NAN, 0, -INFINITY}, {NAN, INFINITY, 3},
  };
  for (int k = 0; k < NACT; k++) {
    kiln_scope_begin();
    kiln_tensor *y = acts[k].build(kiln_from_data(x, KILN_F64, KILN_SHAPE(3)));
    ck_assert_int_eq(kiln_realize(y), KILN_OK);
    const double *got = kiln_data(y);
    for (int i = 0; i < 3; i++)
      ck_assert_msg(isnan(want[k][i]) ? isnan(got[i]) : got[i] == want[k][i], "%s(%g) = %g, want %g", acts[k].name,
                    x[i], got[i], want[k][i]);
    kiln_scope_end();
  }
}
END_TEST

START_TEST(logaddexp_values) {
  double a[] = {1000, -1000, INFINITY, -INFINITY, NAN, 1, 0, -INFINITY, 2};
  double b[] = {1000, -1001, INFINITY, -INFINITY, 1, NAN, -745, 5, -INFINITY};
  double want[] = {1000 + M_LN2, -1000 + log1p(exp(-1.0)), INFINITY, -INFINITY, NAN, NAN, log1p(exp(-745.0)), 5, 2};
  enum { N = sizeof a / sizeof *a };
  kiln_scope_begin();
  kiln_tensor *y = kiln_logaddexp(kiln_from_data(a, KILN_F64, KILN_SHAPE(N)), kiln_from_data(b, KILN_F64, KILN_SHAPE(N)));
  ck_assert_int_eq(kiln_realize(y), KILN_OK);
  const double *got = kiln_data(y);
  for (int i = 0; i < N; i++)
    ck_assert_msg(isnan(want[i]) ? isnan(got[i]) : got[i] == want[i] || fabs(got[i] - want[i]) <= 1e-15 * fabs(want[i]),
                  "logaddexp(%g, %g) = %.17g, want %.17g", a[i], b[i], got[i], want[i]);
  kiln_scope_end();
}
END_TEST

/* ---- the oracle, fused and eager: every float dtype and integer inputs
 * (promoted to float32), a transposed (non-contiguous) operand, size-0 and
 * size-1 dims ----------------------------------------------------------- */
typedef struct { int act; kiln_dtype dt; int ndim; int64_t shape[3]; bool transpose; } oracle_case;

static kiln_tensor *build_oracle(const void *ctx) {
  const oracle_case *c = ctx;
  kiln_tensor *x = tu_data(c->dt, c->ndim, c->shape, 7 + (uint64_t)c->act, TU_MODERATE);
  if (c->transpose) x = kiln_transpose(x, 0, 1);
  return acts[c->act].build(x);
}

static const kiln_dtype oracle_dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I32, KILN_BOOL};
enum { NODT = sizeof oracle_dts / sizeof *oracle_dts };

START_TEST(activations_oracle) {
  static const oracle_case shapes[] = {
    {0, 0, 2, {13, 29}, true}, {0, 0, 3, {3, 0, 5}, false}, {0, 0, 2, {1, 1}, false},
  };
  for (int d = 0; d < NODT; d++)   /* the odd sizes on f32 only: each case compiles kernels */
    for (size_t s = 0; s < (d ? 1 : sizeof shapes / sizeof *shapes); s++) {
      oracle_case c = shapes[s];
      c.act = _i, c.dt = oracle_dts[d];
      kiln_dtype want = ir_is_float(c.dt) ? c.dt : KILN_F32;
      ref_tol tol = ref_tol_dtype(want);
      tol.rtol *= 4;   /* chains of a few rounded ops */
      char why[1200];
      ck_assert_msg(tu_check_fused_eager(build_oracle, &c, want, tol, why, sizeof why), "%s on %s: %s",
                    acts[_i].name, ir_dtypes[c.dt].name, why);
    }
}
END_TEST

/* An activation is a few elementwise ops that fuse: one kernel per call. */
START_TEST(activations_fuse) {
  for (int k = 0; k < NACT; k++) {
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data((float[]){-1, 0.5f, 3}, KILN_F32, KILN_SHAPE(3));
    kiln_tensor *y = acts[k].build(kiln_muls(x, 2.0));
    kiln_reset_stats();
    ck_assert_int_eq(kiln_realize(y), KILN_OK);
    ck_assert_msg(kiln_stats().kernels_launched == 1, "%s: %llu kernels", acts[k].name,
                  (unsigned long long)kiln_stats().kernels_launched);
    kiln_scope_end();
  }
}
END_TEST

/* ---- errors ------------------------------------------------------------- */
static void expect_error(kiln_tensor *t, kiln_status st, int line, const char *text) {
  char want[1024];
  snprintf(want, sizeof want, "%s:%d: %s", __FILE__, line, text);
  ck_assert_int_eq(kiln_status_of(t), st);
  ck_assert_str_eq(kiln_last_error(), want);
  ck_assert_int_eq(kiln_realize(t), st);
  ck_assert_str_eq(kiln_last_error(), want);
}

START_TEST(error_messages) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_zeros(KILN_SHAPE(2, 3), KILN_F32), *v = kiln_zeros(KILN_SHAPE(4), KILN_F32);
  int l;
  l = __LINE__; expect_error(kiln_erfc(NULL), KILN_ERR_ARG, l, "erfc: argument 1 is NULL");
  l = __LINE__; expect_error(kiln_atan2(a, v), KILN_ERR_SHAPE, l,
                             "atan2: shapes (2,3) and (4,) cannot be broadcast (dim 1: 3 vs 4)");
  l = __LINE__; expect_error(kiln_logaddexp(a, v), KILN_ERR_SHAPE, l,
                             "logaddexp: shapes (2,3) and (4,) cannot be broadcast (dim 1: 3 vs 4)");
  l = __LINE__; expect_error(kiln_logaddexp(a, NULL), KILN_ERR_ARG, l, "logaddexp: argument 2 is NULL");
  l = __LINE__; expect_error(kiln_celu(a, 0), KILN_ERR_ARG, l, "celu: alpha must not be 0 (it divides x)");
  l = __LINE__; expect_error(kiln_softplus(a, 0, 20), KILN_ERR_ARG, l, "softplus: beta must not be 0");
  l = __LINE__; expect_error(kiln_mish(NULL), KILN_ERR_ARG, l, "mish: argument 1 is NULL");
  l = __LINE__; expect_error(kiln_selu(NULL), KILN_ERR_ARG, l, "selu: argument 1 is NULL");
  l = __LINE__; expect_error(kiln_logsigmoid(kiln_erf(NULL)), KILN_ERR_ARG, l, "erf: argument 1 is NULL");
  kiln_scope_end();
}
END_TEST

static Suite *math_suite(void) {
  Suite *s = suite_create("math_ops");
  TCase *tc = tu_tcase(s, "accuracy");
  tcase_add_loop_test(tc, accuracy_f32, 0, NACC);
  tcase_add_test(tc, accuracy_atan2_f32);
  tcase_add_loop_test(tc, accuracy_f64, 0, NACC);
  tcase_add_loop_test(tu_tcase(s, "specials"), special_values, 0, 4);
  tc = tu_tcase(s, "activations");
  tcase_add_loop_test(tc, activations_formula, 0, 3);
  tcase_add_test(tc, activations_specials);
  tcase_add_test(tc, logaddexp_values);
  tcase_add_loop_test(tc, activations_oracle, 0, NACT);
  tcase_add_test(tc, activations_fuse);
  tcase_add_test(tu_tcase(s, "errors"), error_messages);
  return s;
}

KILN_TEST_MAIN(math_suite)
