/* test_cpu_codegen.c: the CPU back end on hand-built kernels: every graph op
 * per dtype against hand-computed values, casts, f16/bf16 rounding, Philox
 * bit-exactness, loop nests, vectorization of the optimised IR, and the
 * accuracy of the f32 transcendentals against libm (max ulp over sweeps). */
#include "check_main.h"
#include "codegen_cpu/cpu.h"
#include "codegen_cpu/cpu_impl.h"
#include "ir/philox.h"
#include "util/testutil.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

static cpu_jit *jit;

static void setup(void) {
  char *err = NULL;
  jit = cpu_jit_new(&err);
  ck_assert_msg(jit != NULL, "cpu_jit_new: %s", err ? err : "");
}

static void teardown(void) { cpu_jit_free(jit); }

static cpu_kernel_fn compile(kernel *k, ir_str *ir) {
  char *err = NULL;
  cpu_code *code = cpu_jit_compile(jit, k, NULL, ir, &err);
  ck_assert_msg(code != NULL, "cpu_jit_compile: %s", err ? err : "");
  return cpu_code_fn(code);
}

/* ---- scalar access to buffers of any storage dtype (not f16/bf16) -------- */
static void put(void *p, kiln_dtype t, int64_t i, double v) {
  switch (t) {
  case KILN_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  case KILN_U8: ((uint8_t *)p)[i] = (uint8_t)(int64_t)v; break;
  case KILN_I8: ((int8_t *)p)[i] = (int8_t)(int64_t)v; break;
  case KILN_I16: ((int16_t *)p)[i] = (int16_t)(int64_t)v; break;
  case KILN_I32: ((int32_t *)p)[i] = (int32_t)(int64_t)v; break;
  case KILN_I64: ((int64_t *)p)[i] = (int64_t)v; break;
  case KILN_F32: ((float *)p)[i] = (float)v; break;
  case KILN_F64: ((double *)p)[i] = v; break;
  default: ck_abort_msg("put: dtype");
  }
}

static double get(const void *p, kiln_dtype t, int64_t i) {
  switch (t) {
  case KILN_BOOL: return ((const uint8_t *)p)[i];
  case KILN_U8: return ((const uint8_t *)p)[i];
  case KILN_I8: return ((const int8_t *)p)[i];
  case KILN_I16: return ((const int16_t *)p)[i];
  case KILN_I32: return ((const int32_t *)p)[i];
  case KILN_I64: return (double)((const int64_t *)p)[i];
  case KILN_F32: return ((const float *)p)[i];
  case KILN_F64: return ((const double *)p)[i];
  default: ck_abort_msg("get: dtype");
  }
  return 0;
}

/* ---- a 1-D elementwise kernel: p0[i] = op(p1[i], p2[i], p3[i]) ----------- */
static kernel *ew_kernel(ir_op op, kiln_dtype at, kiln_dtype bt, kiln_dtype rt, int64_t n) {
  kernel *k = k_new();
  int out = k_param(k, rt, true, n);
  int nin = ir_ops[op].arity;
  int v = k_var(k);
  kstmt *loop = ks_loop(k, v, n, KL_VECTOR);
  kexpr *i = kx_var(k, v), *x[3] = {NULL, NULL, NULL};
  for (int j = 0; j < nin; j++) {
    kiln_dtype t = j == 0 ? at : bt;
    x[j] = kx_load(k, k_param(k, t, false, n), i, ir_compute_dtype(t));
  }
  loop->body = ks_store(k, out, i, kx_op(k, op, ir_compute_dtype(rt), x[0], x[1], x[2]));
  k->body = loop;
  return k;
}

typedef struct {
  ir_op op;
  kiln_dtype at, bt, rt;   /* dtype of a, of b and c, of the result */
  double a, b, c, want;
} op_row;

#define NaN NAN
#define INF INFINITY
static const op_row op_rows[] = {
  {IR_NEG, KILN_I32, 0, KILN_I32, 5, 0, 0, -5},
  {IR_NEG, KILN_F32, 0, KILN_F32, 2.5, 0, 0, -2.5},
  {IR_NEG, KILN_I8, 0, KILN_I8, -128, 0, 0, -128},           /* wraps */
  {IR_ABS, KILN_I32, 0, KILN_I32, -7, 0, 0, 7},
  {IR_ABS, KILN_F64, 0, KILN_F64, -0.5, 0, 0, 0.5},
  {IR_ABS, KILN_U8, 0, KILN_U8, 200, 0, 0, 200},
  {IR_ABS, KILN_I8, 0, KILN_I8, -128, 0, 0, -128},
  {IR_EXP, KILN_F32, 0, KILN_F32, 1, 0, 0, M_E},
  {IR_EXP, KILN_F64, 0, KILN_F64, 1, 0, 0, M_E},
  {IR_LOG, KILN_F64, 0, KILN_F64, M_E, 0, 0, 1},
  {IR_LOG, KILN_F32, 0, KILN_F32, 0, 0, 0, -INF},
  {IR_LOG, KILN_F32, 0, KILN_F32, -1, 0, 0, NaN},
  {IR_SQRT, KILN_F32, 0, KILN_F32, 4, 0, 0, 2},
  {IR_SQRT, KILN_F64, 0, KILN_F64, 2, 0, 0, M_SQRT2},
  {IR_RSQRT, KILN_F32, 0, KILN_F32, 4, 0, 0, 0.5},
  {IR_SIN, KILN_F64, 0, KILN_F64, 1, 0, 0, 0.8414709848078965},
  {IR_SIN, KILN_F32, 0, KILN_F32, 1, 0, 0, 0.8414709848078965},
  {IR_COS, KILN_F32, 0, KILN_F32, 0, 0, 0, 1},
  {IR_COS, KILN_F64, 0, KILN_F64, 1, 0, 0, 0.5403023058681398},
  {IR_TANH, KILN_F32, 0, KILN_F32, 0.5, 0, 0, 0.46211715726000974},
  {IR_TANH, KILN_F64, 0, KILN_F64, -0.5, 0, 0, -0.46211715726000974},
  {IR_SIGMOID, KILN_F32, 0, KILN_F32, 0, 0, 0, 0.5},
  {IR_SIGMOID, KILN_F64, 0, KILN_F64, 2, 0, 0, 0.8807970779778823},
  {IR_GELU, KILN_F32, 0, KILN_F32, 1, 0, 0, 0.8413447460685429},
  {IR_GELU, KILN_F64, 0, KILN_F64, -1, 0, 0, -0.15865525393145707},
  {IR_GELU_TANH, KILN_F32, 0, KILN_F32, 1, 0, 0, 0.8411919906082768},
  {IR_GELU_TANH, KILN_F64, 0, KILN_F64, -1, 0, 0, -0.15880800939172324},
  {IR_SILU, KILN_F32, 0, KILN_F32, 1, 0, 0, 0.7310585786300049},
  {IR_SILU, KILN_F64, 0, KILN_F64, -2, 0, 0, -0.2384058440442351},
  {IR_RELU, KILN_I32, 0, KILN_I32, -3, 0, 0, 0},
  {IR_RELU, KILN_F32, 0, KILN_F32, -1, 0, 0, 0},
  {IR_RELU, KILN_F32, 0, KILN_F32, NaN, 0, 0, NaN},
  {IR_RELU, KILN_U8, 0, KILN_U8, 5, 0, 0, 5},
  {IR_RELU, KILN_I64, 0, KILN_I64, 9, 0, 0, 9},
  {IR_FLOOR, KILN_F32, 0, KILN_F32, -1.5, 0, 0, -2},
  {IR_FLOOR, KILN_I32, 0, KILN_I32, 7, 0, 0, 7},
  {IR_CEIL, KILN_F64, 0, KILN_F64, -1.5, 0, 0, -1},
  {IR_ROUND, KILN_F32, 0, KILN_F32, 2.5, 0, 0, 2},
  {IR_ROUND, KILN_F32, 0, KILN_F32, 3.5, 0, 0, 4},
  {IR_ROUND, KILN_F64, 0, KILN_F64, -2.5, 0, 0, -2},
  {IR_SIGN, KILN_F32, 0, KILN_F32, -3, 0, 0, -1},
  {IR_SIGN, KILN_F32, 0, KILN_F32, NaN, 0, 0, 0},
  {IR_SIGN, KILN_I32, 0, KILN_I32, 0, 0, 0, 0},
  {IR_SIGN, KILN_I64, 0, KILN_I64, -9, 0, 0, -1},
  {IR_SIGN, KILN_U8, 0, KILN_U8, 9, 0, 0, 1},
  {IR_RECIPROCAL, KILN_F32, 0, KILN_F32, 4, 0, 0, 0.25},
  {IR_LOGICAL_NOT, KILN_F32, 0, KILN_BOOL, 0, 0, 0, 1},
  {IR_LOGICAL_NOT, KILN_F32, 0, KILN_BOOL, NaN, 0, 0, 0},
  {IR_LOGICAL_NOT, KILN_I32, 0, KILN_BOOL, 3, 0, 0, 0},
  {IR_LOGICAL_NOT, KILN_BOOL, 0, KILN_BOOL, 1, 0, 0, 0},
  {IR_CAST, KILN_F32, 0, KILN_I32, 3.9, 0, 0, 3},
  {IR_CAST, KILN_F32, 0, KILN_I32, -3.9, 0, 0, -3},
  {IR_CAST, KILN_F32, 0, KILN_I32, NaN, 0, 0, 0},
  {IR_CAST, KILN_F32, 0, KILN_I32, 1e10, 0, 0, 2147483647},
  {IR_CAST, KILN_F32, 0, KILN_I8, 300, 0, 0, 127},
  {IR_CAST, KILN_F32, 0, KILN_I8, -300, 0, 0, -128},
  {IR_CAST, KILN_F64, 0, KILN_U8, -5, 0, 0, 0},
  {IR_CAST, KILN_F32, 0, KILN_U8, 300, 0, 0, 255},
  {IR_CAST, KILN_F32, 0, KILN_I64, -INF, 0, 0, (double)INT64_MIN},
  {IR_CAST, KILN_F32, 0, KILN_BOOL, 0.5, 0, 0, 1},
  {IR_CAST, KILN_F32, 0, KILN_BOOL, NaN, 0, 0, 1},
  {IR_CAST, KILN_F64, 0, KILN_BOOL, -0.0, 0, 0, 0},
  {IR_CAST, KILN_I32, 0, KILN_BOOL, 2, 0, 0, 1},
  {IR_CAST, KILN_BOOL, 0, KILN_F32, 1, 0, 0, 1},
  {IR_CAST, KILN_BOOL, 0, KILN_I64, 1, 0, 0, 1},
  {IR_CAST, KILN_I32, 0, KILN_I8, 300, 0, 0, 44},
  {IR_CAST, KILN_U8, 0, KILN_I32, 200, 0, 0, 200},
  {IR_CAST, KILN_I8, 0, KILN_I32, -1, 0, 0, -1},
  {IR_CAST, KILN_I8, 0, KILN_U8, -1, 0, 0, 255},
  {IR_CAST, KILN_U8, 0, KILN_F32, 255, 0, 0, 255},
  {IR_CAST, KILN_I64, 0, KILN_F64, -3, 0, 0, -3},
  {IR_CAST, KILN_F64, 0, KILN_F32, 1e300, 0, 0, INF},
  {IR_ADD, KILN_I32, KILN_I32, KILN_I32, 2147483647, 1, 0, -2147483648.0},
  {IR_ADD, KILN_BOOL, KILN_BOOL, KILN_BOOL, 1, 1, 0, 1},
  {IR_ADD, KILN_F32, KILN_F32, KILN_F32, 0.5, 0.25, 0, 0.75},
  {IR_SUB, KILN_U8, KILN_U8, KILN_U8, 3, 5, 0, 254},
  {IR_SUB, KILN_F64, KILN_F64, KILN_F64, 3, 5, 0, -2},
  {IR_MUL, KILN_BOOL, KILN_BOOL, KILN_BOOL, 1, 0, 0, 0},
  {IR_MUL, KILN_I16, KILN_I16, KILN_I16, 300, 300, 0, 24464},
  {IR_MUL, KILN_F32, KILN_F32, KILN_F32, 1.5, -2, 0, -3},
  {IR_DIV, KILN_F32, KILN_F32, KILN_F32, 1, 0, 0, INF},
  {IR_DIV, KILN_F32, KILN_F32, KILN_F32, -1, 0, 0, -INF},
  {IR_DIV, KILN_F64, KILN_F64, KILN_F64, 0, 0, 0, NaN},
  {IR_DIV, KILN_F64, KILN_F64, KILN_F64, 1, 4, 0, 0.25},
  {IR_POW, KILN_I32, KILN_I32, KILN_I32, 3, 4, 0, 81},
  {IR_POW, KILN_I32, KILN_I32, KILN_I32, 2, 31, 0, -2147483648.0},
  {IR_POW, KILN_I32, KILN_I32, KILN_I32, 2, -1, 0, 0},
  {IR_POW, KILN_I32, KILN_I32, KILN_I32, 1, -5, 0, 1},
  {IR_POW, KILN_I32, KILN_I32, KILN_I32, -1, -3, 0, -1},
  {IR_POW, KILN_I32, KILN_I32, KILN_I32, -1, -4, 0, 1},
  {IR_POW, KILN_I64, KILN_I64, KILN_I64, -3, 3, 0, -27},
  {IR_POW, KILN_I8, KILN_I8, KILN_I8, 3, 5, 0, -13},           /* 243 wraps */
  {IR_POW, KILN_U8, KILN_U8, KILN_U8, 3, 5, 0, 243},
  {IR_POW, KILN_U8, KILN_U8, KILN_U8, 2, 8, 0, 0},
  {IR_POW, KILN_I16, KILN_I16, KILN_I16, 7, 0, 0, 1},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, 2, 0.5, 0, M_SQRT2},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, -8, 1.0 / 3, 0, NaN},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, -2, 3, 0, -8},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, -2, -2, 0, 0.25},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, 0, -1, 0, INF},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, -0.0, -1, 0, -INF},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, 0, 2, 0, 0},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, NaN, 0, 0, 1},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, 1, NaN, 0, 1},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, -1, INF, 0, 1},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, 0.5, INF, 0, 0},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, 0.5, -INF, 0, INF},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, -INF, 3, 0, -INF},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, -INF, 0.5, 0, INF},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, 10, 38, 0, 1e38},
  {IR_POW, KILN_F32, KILN_F32, KILN_F32, 10, 39, 0, INF},
  {IR_POW, KILN_F64, KILN_F64, KILN_F64, 2, 10, 0, 1024},
  {IR_MAXIMUM, KILN_F32, KILN_F32, KILN_F32, NaN, 1, 0, NaN},
  {IR_MAXIMUM, KILN_F32, KILN_F32, KILN_F32, -1, 2, 0, 2},
  {IR_MAXIMUM, KILN_I32, KILN_I32, KILN_I32, -3, 2, 0, 2},
  {IR_MAXIMUM, KILN_U8, KILN_U8, KILN_U8, 200, 3, 0, 200},
  {IR_MAXIMUM, KILN_BOOL, KILN_BOOL, KILN_BOOL, 0, 1, 0, 1},
  {IR_MINIMUM, KILN_F64, KILN_F64, KILN_F64, 1, NaN, 0, NaN},
  {IR_MINIMUM, KILN_I8, KILN_I8, KILN_I8, -3, 2, 0, -3},
  {IR_MINIMUM, KILN_U8, KILN_U8, KILN_U8, 200, 3, 0, 3},
  {IR_EQ, KILN_F32, KILN_F32, KILN_BOOL, NaN, NaN, 0, 0},
  {IR_EQ, KILN_I64, KILN_I64, KILN_BOOL, 5, 5, 0, 1},
  {IR_NE, KILN_F32, KILN_F32, KILN_BOOL, NaN, NaN, 0, 1},
  {IR_NE, KILN_BOOL, KILN_BOOL, KILN_BOOL, 1, 1, 0, 0},
  {IR_LT, KILN_F32, KILN_F32, KILN_BOOL, 1, 2, 0, 1},
  {IR_LT, KILN_F32, KILN_F32, KILN_BOOL, NaN, 2, 0, 0},
  {IR_LE, KILN_I32, KILN_I32, KILN_BOOL, 2, 2, 0, 1},
  {IR_GT, KILN_U8, KILN_U8, KILN_BOOL, 200, 3, 0, 1},
  {IR_GT, KILN_BOOL, KILN_BOOL, KILN_BOOL, 1, 0, 0, 1},
  {IR_GE, KILN_I8, KILN_I8, KILN_BOOL, -1, 0, 0, 0},
  {IR_LOGICAL_AND, KILN_F32, KILN_F32, KILN_BOOL, 0.5, NaN, 0, 1},
  {IR_LOGICAL_AND, KILN_I32, KILN_I32, KILN_BOOL, 2, 0, 0, 0},
  {IR_LOGICAL_OR, KILN_F32, KILN_F32, KILN_BOOL, 0, -0.0, 0, 0},
  {IR_LOGICAL_OR, KILN_I32, KILN_I32, KILN_BOOL, 0, -1, 0, 1},
  {IR_WHERE, KILN_BOOL, KILN_F32, KILN_F32, 1, 2, 3, 2},
  {IR_WHERE, KILN_BOOL, KILN_I64, KILN_I64, 0, 2, 3, 3},
  {IR_CLAMP, KILN_F32, KILN_F32, KILN_F32, 5, 0, 3, 3},
  {IR_CLAMP, KILN_F32, KILN_F32, KILN_F32, NaN, 0, 3, NaN},
  {IR_CLAMP, KILN_F32, KILN_F32, KILN_F32, 1, NaN, 3, NaN},
  {IR_CLAMP, KILN_I32, KILN_I32, KILN_I32, -5, 0, 3, 0},
  {IR_CLAMP, KILN_U8, KILN_U8, KILN_U8, 250, 10, 200, 200},
};

static bool same_value(double got, double want, kiln_dtype t) {
  if (isnan(want)) return isnan(got);
  if (!ir_is_float(t) || isinf(want) || want == 0) return got == want;
  return fabs(got - want) <= 4e-7 * fabs(want);  /* a few f32 ulp */
}

START_TEST(test_ops) {
  const op_row *r = &op_rows[_i];
  enum { N = 3 };  /* a few lanes: the value repeated */
  kernel *k = ew_kernel(r->op, r->at, r->bt, r->rt, N);
  cpu_kernel_fn fn = compile(k, NULL);
  uint64_t mem[4][N];
  double in[3] = {r->a, r->b, r->c};
  for (int j = 1; j < k->nparams; j++)
    for (int i = 0; i < N; i++) put(mem[j], j == 1 ? r->at : r->bt, i, in[j - 1]);
  void *bufs[4] = {mem[0], mem[1], mem[2], mem[3]};
  fn(bufs, 0, 1);
  for (int i = 0; i < N; i++) {
    double got = get(mem[0], r->rt, i);
    ck_assert_msg(same_value(got, r->want, r->rt), "%s.%s(%g, %g, %g) = %.9g, want %.9g", ir_ops[r->op].name,
                  ir_dtypes[r->rt].short_name, r->a, r->b, r->c, got, r->want);
  }
  k_free(k);
}
END_TEST

/* i64 pow wraps modulo 2^64 (exact, beyond a double's 53 bits). */
START_TEST(test_pow_i64_wraps) {
  kernel *k = ew_kernel(IR_POW, KILN_I64, KILN_I64, KILN_I64, 1);
  cpu_kernel_fn fn = compile(k, NULL);
  int64_t out = 0, a = 3, b = 40;
  void *bufs[3] = {&out, &a, &b};
  fn(bufs, 0, 1);
  uint64_t want = 1;
  for (int i = 0; i < 40; i++) want *= 3;
  ck_assert_uint_eq((uint64_t)out, want);
  k_free(k);
}
END_TEST

/* ---- loops, memoisation, idiv/imod, vectorization ----------------------- */
/* out[i] = relu(a[i]*b[i] + c[i]) * sigmoid(a[i]), the W1 benchmark. */
static kernel *w1_kernel(int64_t n) {
  kernel *k = k_new();
  int out = k_param(k, KILN_F32, true, n);
  int pa = k_param(k, KILN_F32, false, n), pb = k_param(k, KILN_F32, false, n);
  int pc = k_param(k, KILN_F32, false, n);
  int v = k_var(k);
  kstmt *loop = ks_loop(k, v, n, KL_PARALLEL);
  kexpr *i = kx_var(k, v);
  kexpr *a = kx_load(k, pa, i, KILN_F32), *b = kx_load(k, pb, i, KILN_F32), *c = kx_load(k, pc, i, KILN_F32);
  kexpr *t = kx_op(k, IR_ADD, KILN_F32, kx_op(k, IR_MUL, KILN_F32, a, b, NULL), c, NULL);
  t = kx_op(k, IR_RELU, KILN_F32, t, NULL, NULL);
  loop->body = ks_store(k, out, i, kx_op(k, IR_MUL, KILN_F32, t, kx_op(k, IR_SIGMOID, KILN_F32, a, NULL, NULL), NULL));
  k->body = loop;
  return k;
}

START_TEST(test_w1_vectorizes) {
  enum { N = 1000 };
  kernel *k = w1_kernel(N);
  ir_str ir = {0};
  cpu_kernel_fn fn = compile(k, &ir);
  ck_assert_msg(strstr(ir.s, "<16 x float>") != NULL, "not vectorized to 16 lanes:\n%s", ir.s);
  ck_assert_msg(strstr(ir.s, "@kiln.") == NULL && strstr(ir.s, "@exp") == NULL, "a call left in the loop");
  float out[N], a[N], b[N], c[N];
  for (int i = 0; i < N; i++) {
    a[i] = (float)(i - 500) / 37.0f;
    b[i] = (float)(i % 17) / 5.0f - 1;
    c[i] = (float)(i % 5) - 2;
    out[i] = -1;
  }
  void *bufs[4] = {out, a, b, c};
  fn(bufs, 0, 7);   /* the runtime splits the parallel loop: lo..hi */
  fn(bufs, 7, N);
  for (int i = 0; i < N; i++) {
    float t = a[i] * b[i] + c[i];  /* rounded as the kernel does: it cancels */
    double want = (t < 0 ? 0 : t) / (1 + exp(-(double)a[i]));
    ck_assert_msg(fabs(out[i] - want) <= 1e-6 * fabs(want) + 1e-30, "w1[%d] = %.9g, want %.9g", i, out[i], want);
  }
  fn(bufs, 5, 5);  /* an empty range does nothing */
  ir_str_free(&ir);
  k_free(k);
}
END_TEST

/* f32 gelu, gelu_tanh and pow compute in f64 (8 lanes): their loops are
 * interleaved 8 times (64 elements per vector iteration) so that enough of
 * their long dependency chains run at once; f32 exp keeps LLVM's choice. */
START_TEST(test_wide_math_interleaved) {
  static const ir_op wide[] = {IR_GELU, IR_GELU_TANH, IR_POW};
  for (int w = 0; w < 4; w++) {
    kernel *k = ew_kernel(w < 3 ? wide[w] : IR_EXP, KILN_F32, KILN_F32, KILN_F32, 4096);
    ir_str ir = {0};
    compile(k, &ir);
    bool by64 = strstr(ir.s, "add nuw i64 %index, 64") != NULL;
    ck_assert_msg(by64 == (w < 3), "%s: %s 64 elements per vector iteration", ir_ops[k->body->body->value->op].name,
                  by64 ? "unexpectedly" : "not");
    ir_str_free(&ir);
    k_free(k);
  }
}
END_TEST

/* out[i0*W + i1] = a[i0*W + i1] + c[i1] (parallel outer, vector inner), and
 * a transposed copy through idiv/imod: t[i] = a[(i % H) * W + i / H]. */
START_TEST(test_nested_loops) {
  enum { H = 13, W = 37 };
  kernel *k = k_new();
  int out = k_param(k, KILN_F32, true, H * W), tr = k_param(k, KILN_F32, true, H * W);
  int pa = k_param(k, KILN_F32, false, H * W), pc = k_param(k, KILN_F32, false, W);
  int v0 = k_var(k), v1 = k_var(k), v2 = k_var(k);
  kstmt *outer = ks_loop(k, v0, H, KL_PARALLEL), *inner = ks_loop(k, v1, W, KL_VECTOR);
  kexpr *idx = kx_iadd(k, kx_imul(k, kx_var(k, v0), kx_int(k, KILN_I64, W)), kx_var(k, v1));
  inner->body = ks_store(k, out, idx, kx_op(k, IR_ADD, KILN_F32, kx_load(k, pa, idx, KILN_F32),
                                            kx_load(k, pc, kx_var(k, v1), KILN_F32), NULL));
  outer->body = inner;
  kstmt *flat = ks_loop(k, v2, H * W, KL_SERIAL);
  kexpr *i = kx_var(k, v2), *h = kx_int(k, KILN_I64, H);
  kexpr *src = kx_iadd(k, kx_imul(k, kx_imod(k, i, h), kx_int(k, KILN_I64, W)), kx_idiv(k, i, h));
  flat->body = ks_store(k, tr, i, kx_load(k, pa, src, KILN_F32));
  k->body = flat;
  flat->next = outer;
  ir_str ir = {0};
  cpu_kernel_fn fn = compile(k, &ir);
  ck_assert_msg(strstr(ir.s, "<16 x float>") != NULL, "inner loop not vectorized:\n%s", ir.s);
  static float o[H * W], t[H * W], a[H * W], c[W];
  for (int j = 0; j < H * W; j++) a[j] = (float)j;
  for (int j = 0; j < W; j++) c[j] = (float)(1000 * j);
  void *bufs[4] = {o, t, a, c};
  fn(bufs, 0, H);
  for (int r = 0; r < H; r++)
    for (int j = 0; j < W; j++) ck_assert_float_eq(o[r * W + j], a[r * W + j] + c[j]);
  for (int j = 0; j < H * W; j++) ck_assert_float_eq(t[j], a[(j % H) * W + j / H]);
  ir_str_free(&ir);
  k_free(k);
}
END_TEST

/* Rows of 4 to 64 lanes under a parallel loop (a + b on f32[16,16] and
 * its like): each row becomes vector operations, not one gather and one
 * scatter per lane across rows (the loop vectorizer taking the outer loop
 * once LLVM unrolled the row). With the hint gone the test fails. */
START_TEST(test_short_rows_not_gathered) {
  static const int64_t widths[] = {4, 8, 16, 64};
  for (int w = 0; w < 4; w++) {
    enum { H = 16 };
    int64_t W = widths[w];
    kernel *k = k_new();
    int out = k_param(k, KILN_F32, true, H * W), pa = k_param(k, KILN_F32, false, H * W);
    int v0 = k_var(k), v1 = k_var(k);
    kstmt *rows = ks_loop(k, v0, H, KL_PARALLEL), *row = ks_loop(k, v1, W, KL_VECTOR);
    kexpr *idx = kx_iadd(k, kx_imul(k, kx_var(k, v0), kx_int(k, KILN_I64, W)), kx_var(k, v1));
    kexpr *a = kx_load(k, pa, idx, KILN_F32);
    row->body = ks_store(k, out, idx, kx_op(k, IR_ADD, KILN_F32, a, a, NULL));
    rows->body = row;
    k->body = rows;
    ir_str ir = {0};
    cpu_kernel_fn fn = compile(k, &ir);
    ck_assert_msg(!strstr(ir.s, "masked.gather") && !strstr(ir.s, "masked.scatter"), "width %d: rows gathered",
                  (int)W);
    static float o[H * 64], x[H * 64];
    for (int j = 0; j < H * W; j++) x[j] = (float)j - 7, o[j] = -1;
    void *bufs[2] = {o, x};
    fn(bufs, 0, 5);
    fn(bufs, 5, H);
    for (int j = 0; j < H * W; j++) ck_assert_float_eq(o[j], 2 * x[j]);
    ir_str_free(&ir);
    k_free(k);
  }
}
END_TEST

/* One expression used in two sibling loops, and a row sum written as
 * out[r] = 0; for j: out[r] = out[r] + a[r*W + j]: a value computed inside
 * a loop must be recomputed, not reused, after it. */
START_TEST(test_sibling_loops_and_sums) {
  enum { H = 5, W = 19 };
  kernel *k = k_new();
  int p1 = k_param(k, KILN_F32, true, W), p2 = k_param(k, KILN_F32, true, W), ps = k_param(k, KILN_F64, true, H);
  int pa = k_param(k, KILN_F32, false, H * W);
  int v = k_var(k), r = k_var(k), j = k_var(k);
  kexpr *x2 = kx_op(k, IR_MUL, KILN_F32, kx_load(k, pa, kx_var(k, v), KILN_F32), kx_float(k, KILN_F32, 2), NULL);
  kstmt *l1 = ks_loop(k, v, W, KL_SERIAL), *l2 = ks_loop(k, v, W, KL_SERIAL);
  l1->body = ks_store(k, p1, kx_var(k, v), x2);
  l2->body = ks_store(k, p2, kx_var(k, v), kx_op(k, IR_ADD, KILN_F32, x2, kx_float(k, KILN_F32, 1), NULL));
  kstmt *rows = ks_loop(k, r, H, KL_SERIAL), *cols = ks_loop(k, j, W, KL_SERIAL);
  kexpr *acc = kx_load(k, ps, kx_var(k, r), KILN_F64);
  kexpr *elem = kx_cast(k, kx_load(k, pa, kx_iadd(k, kx_imul(k, kx_var(k, r), kx_int(k, KILN_I64, W)), kx_var(k, j)), KILN_F32), KILN_F64);
  cols->body = ks_store(k, ps, kx_var(k, r), kx_op(k, IR_ADD, KILN_F64, acc, elem, NULL));
  rows->body = ks_store(k, ps, kx_var(k, r), kx_float(k, KILN_F64, 0));
  rows->body->next = cols;
  k->body = l1;
  l1->next = l2;
  l2->next = rows;
  cpu_kernel_fn fn = compile(k, NULL);
  float o1[W], o2[W], a[H * W];
  double s[H];
  for (int i = 0; i < H * W; i++) a[i] = (float)i;
  void *bufs[4] = {o1, o2, s, a};
  fn(bufs, 0, 1);
  for (int i = 0; i < W; i++) {
    ck_assert_float_eq(o1[i], 2 * a[i]);
    ck_assert_float_eq(o2[i], 2 * a[i] + 1);
  }
  for (int i = 0; i < H; i++) ck_assert_double_eq(s[i], W * (double)i * W + W * (W - 1) / 2.0);
  k_free(k);
}
END_TEST

/* ---- f16 / bf16 storage -------------------------------------------------- */
static uint16_t bf16_ref(float f) {  /* round to nearest even, nan quiet */
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* p0[i] = p1[i] converted between storage dtypes `to` and `from`; with
 * `round_cast`, the stored f32 is the value rounded by a cast to `to`. */
static kernel *convert_kernel(kiln_dtype from, kiln_dtype to, int64_t n, bool round_cast) {
  kernel *k = k_new();
  int out = k_param(k, round_cast ? KILN_F32 : to, true, n), in = k_param(k, from, false, n);
  int v = k_var(k);
  kstmt *loop = ks_loop(k, v, n, KL_VECTOR);
  kexpr *x = kx_load(k, in, kx_var(k, v), KILN_F32);
  if (round_cast) x = kx_cast(k, kx_cast(k, x, to), KILN_F32);
  loop->body = ks_store(k, out, kx_var(k, v), x);
  k->body = loop;
  return k;
}

START_TEST(test_half_storage) {
  enum { N = 1 << 20 };
  float *x = malloc(N * sizeof *x), *back = malloc(N * sizeof *back), *rounded = malloc(N * sizeof *rounded);
  uint16_t *h = malloc(N * sizeof *h);
  for (uint32_t i = 0; i < N; i++) x[i] = bits_f32(i * 4099u + (i >> 3));  /* all exponents, both signs */
  float special[] = {65504, 65519.99f, 65520, 1e-8f, 5.9604645e-8f, 2.98e-8f, -0.0f, INFINITY, -INFINITY, NAN,
                     1.00048828125f, 1.00146484375f, 3.389531e38f, FLT_MAX};
  memcpy(x, special, sizeof special);
  kiln_dtype types[2] = {KILN_F16, KILN_BF16};
  for (int t = 0; t < 2; t++) {
    kernel *st = convert_kernel(KILN_F32, types[t], N, false), *ld = convert_kernel(types[t], KILN_F32, N, false);
    kernel *rc = convert_kernel(KILN_F32, types[t], N, true);
    compile(st, NULL)((void *[]){h, x}, 0, 1);
    compile(ld, NULL)((void *[]){back, h}, 0, 1);
    compile(rc, NULL)((void *[]){rounded, x}, 0, 1);
    for (int i = 0; i < N; i++) {
      float want;
      if (t == 0) {
        _Float16 w = (_Float16)x[i];
        uint16_t wb;
        memcpy(&wb, &w, 2);
        ck_assert_msg(isnan(x[i]) ? (h[i] & 0x7fff) > 0x7c00 : h[i] == wb, "f16(%a) = %#x, want %#x", x[i], h[i], wb);
        want = (float)w;
      } else {
        ck_assert_msg(h[i] == bf16_ref(x[i]), "bf16(%a) = %#x, want %#x", x[i], h[i], bf16_ref(x[i]));
        want = bits_f32((uint32_t)bf16_ref(x[i]) << 16);
      }
      ck_assert_msg(isnan(want) ? isnan(back[i]) && isnan(rounded[i]) : back[i] == want && rounded[i] == want,
                    "%s round trip of %a: %a / %a, want %a", ir_dtypes[types[t]].name, x[i], back[i], rounded[i], want);
    }
    k_free(st);
    k_free(ld);
    k_free(rc);
  }
  free(x); free(back); free(rounded); free(h);
}
END_TEST

/* bool loads normalise any non-zero byte to 1. */
START_TEST(test_bool_load_normalises) {
  kernel *k = ew_kernel(IR_CAST, KILN_BOOL, 0, KILN_I32, 4);
  cpu_kernel_fn fn = compile(k, NULL);
  uint8_t in[4] = {0, 1, 2, 255};
  int32_t out[4];
  fn((void *[]){out, in}, 0, 1);
  ck_assert_int_eq(out[0], 0);
  for (int i = 1; i < 4; i++) ck_assert_int_eq(out[i], 1);
  k_free(k);
}
END_TEST

/* ---- Philox --------------------------------------------------------------- */
START_TEST(test_philox_exact) {
  enum { N = 4096 };
  const uint64_t seed = 0x0123456789abcdefull, base = 0xfffff000ull;  /* crosses 2^32 */
  kernel *k = k_new();
  int outs[4];
  for (int w = 0; w < 4; w++) outs[w] = k_param(k, KILN_I64, true, N);
  int v = k_var(k);
  kstmt *loop = ks_loop(k, v, N, KL_VECTOR);
  kexpr *ctr = kx_iadd(k, kx_var(k, v), kx_int(k, KILN_I64, (int64_t)base));
  kstmt **tail = &loop->body;
  for (int w = 0; w < 4; w++) {
    *tail = ks_store(k, outs[w], kx_var(k, v), kx_philox(k, kx_int(k, KILN_I64, (int64_t)seed), ctr, w));
    tail = &(*tail)->next;
  }
  k->body = loop;
  static int64_t o[4][N];
  compile(k, NULL)((void *[]){o[0], o[1], o[2], o[3]}, 0, 1);
  for (int i = 0; i < N; i++) {
    uint32_t want[4];
    philox4x32_10(seed, base + (uint64_t)i, want);
    for (int w = 0; w < 4; w++) ck_assert_uint_eq((uint64_t)o[w][i], want[w]);
  }
  k_free(k);
}
END_TEST

/* ---- accuracy of the f32 transcendentals ---------------------------------
 * Max error in ulp against the f64 libm result rounded to f32, over a
 * linear sweep of the useful range, a sweep of bit patterns across all
 * floats (subnormals, huge, inf, nan) and special values. Measured here
 * (x86-64 with FMA, ~3M inputs each) -> asserted bound:
 *   exp 1 -> 1 ulp, log 1 -> 1, sin 1 -> 1 (every float, huge ones too),
 *   cos 1 -> 1, tanh 1 -> 2, sigmoid 2 -> 2, silu 3 -> 3, gelu 2 -> 3
 *   (Numerical Recipes' erfc fit, 1.2e-7 relative), gelu_tanh 1 -> 1 (f64
 *   inside), pow 1 -> 1 (grid below).
 * Subnormal results count in subnormal ulps. */
typedef struct {
  ir_op op;
  double lo, hi;      /* linear sweep */
  int64_t bound;      /* max ulp */
} acc_row;

static const acc_row acc_rows[] = {
  {IR_EXP, -104, 89, 1},    {IR_LOG, 0, 100, 1},        {IR_SIN, -100, 100, 1},
  {IR_COS, -100, 100, 1},   {IR_TANH, -10, 10, 2},      {IR_SIGMOID, -110, 110, 2},
  {IR_SILU, -110, 110, 3},  {IR_GELU, -15, 15, 3},      {IR_GELU_TANH, -15, 15, 1},
};

static double ref(ir_op op, double x) {
  switch (op) {
  case IR_EXP: return exp(x);
  case IR_LOG: return log(x);
  case IR_SIN: return sin(x);
  case IR_COS: return cos(x);
  case IR_TANH: return tanh(x);
  case IR_SIGMOID: return 1 / (1 + exp(-x));
  case IR_SILU: return isinf(x) && x < 0 ? NAN : x / (1 + exp(-x));
  case IR_GELU: return 0.5 * x * erfc(-x * M_SQRT1_2);
  case IR_GELU_TANH: return x / (1 + exp(-2 * sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  default: ck_abort_msg("ref: op");
  }
  return 0;
}

START_TEST(test_accuracy_f32) {
  const acc_row *r = &acc_rows[_i];
  enum { N = 3 << 20 };
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  int n = tu_sweep_f32(x, N, r->lo, r->hi);
  kernel *k = ew_kernel(r->op, KILN_F32, 0, KILN_F32, n);
  compile(k, NULL)((void *[]){y, x}, 0, 1);
  int64_t worst = 0;
  int at = 0;
  for (int i = 0; i < n; i++) {
    int64_t e = tu_ulps_f32(y[i], (float)ref(r->op, x[i]));
    if (e > worst) worst = e, at = i;
  }
  printf("accuracy %-8s max %lld ulp at %a (%.9g)\n", ir_ops[r->op].name, (long long)worst, x[at], x[at]);
  ck_assert_msg(worst <= r->bound, "%s: %lld ulp at %a: got %a, want %a", ir_ops[r->op].name, (long long)worst,
                x[at], y[at], (float)ref(r->op, x[at]));
  k_free(k);
  free(x);
  free(y);
}
END_TEST

/* pow over a grid of bases and exponents, plus negative bases with integer
 * exponents, against libm's pow in f64 rounded to f32. */
START_TEST(test_accuracy_powf) {
  enum { NA = 1500, NB = 800, N = NA * NB };
  float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *y = malloc(N * sizeof *y);
  for (int i = 0; i < NA; i++)
    for (int j = 0; j < NB; j++) {
      float base = (float)(i < NA / 2 ? 1e-3 * pow(1e8, (double)i / (NA / 2)) : -(double)(i - NA / 2) / 8);
      float ex = (float)(i < NA / 2 ? -40 + 80.0 * j / NB : j - NB / 2);
      a[i * NB + j] = base;
      b[i * NB + j] = ex;
    }
  kernel *k = ew_kernel(IR_POW, KILN_F32, KILN_F32, KILN_F32, N);
  compile(k, NULL)((void *[]){y, a, b}, 0, 1);
  int64_t worst = 0;
  int at = 0;
  for (int i = 0; i < N; i++) {
    int64_t e = tu_ulps_f32(y[i], (float)pow(a[i], b[i]));
    if (e > worst) worst = e, at = i;
  }
  printf("accuracy pow      max %lld ulp at pow(%a, %a)\n", (long long)worst, a[at], b[at]);
  ck_assert_msg(worst <= 1, "pow(%a, %a) = %a, want %a", a[at], b[at], y[at], (float)pow(a[at], b[at]));
  k_free(k);
  free(a); free(b); free(y);
}
END_TEST

/* ---- compile time (printed for the docs, never asserted) ------------------ */
static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

START_TEST(test_compile_time) {
  cpu_jit_free(jit);
  kernel *k1 = w1_kernel(1 << 24), *k2 = ew_kernel(IR_ADD, KILN_F32, KILN_F32, KILN_F32, 1 << 24);
  double t0 = now_ms();
  char *err = NULL;
  jit = cpu_jit_new(&err);
  ck_assert_ptr_nonnull(jit);
  compile(k1, NULL);
  double t1 = now_ms();
  compile(k2, NULL);
  double t2 = now_ms();
  /* A name already loaded is refused with LLVM's message (the runtime's
   * cache loads each key once), and the JIT stays usable. */
  ck_assert_ptr_null(cpu_jit_compile(jit, k1, NULL, NULL, &err));
  ck_assert_msg(strstr(err, "Duplicate definition") && strstr(err, k1->name), "%s", err);
  free(err);
  kernel *k3 = ew_kernel(IR_MUL, KILN_F32, KILN_F32, KILN_F32, 16);
  float a[16], b[16], c[16];
  for (int i = 0; i < 16; i++) a[i] = (float)i, b[i] = 2;
  compile(k3, NULL)((void *[]){c, a, b}, 0, 1);
  ck_assert_float_eq(c[15], 30);
  k_free(k3);
  printf("compile: cold (LLJIT + W1 kernel) %.1f ms, second kernel %.1f ms; target %.60s...\n", t1 - t0, t2 - t1,
         cpu_jit_target(jit));
  k_free(k1);
  k_free(k2);
}
END_TEST

/* An object file the JIT refuses is an error with LLVM's message and the
 * kernel's name, never an abort; the object cpu_jit_compile gives loads
 * back (what the disk cache does with it) and runs. */
START_TEST(test_object_files) {
  char *err = NULL;
  kernel *k = ew_kernel(IR_SUB, KILN_F32, KILN_F32, KILN_F32, 16);
  ck_assert_ptr_null(cpu_jit_load(jit, k, "k_garbage", "not an object file", 18, &err));
  ck_assert_msg(strstr(err, "k_garbage") || strstr(err, "object"), "%s", err);
  free(err);
  ir_str obj = {0};
  cpu_code *c = cpu_jit_compile(jit, k, &obj, NULL, &err);
  ck_assert_msg(c != NULL, "%s", err);
  ck_assert_uint_eq(cpu_code_bytes(c), obj.len);
  ck_assert_int_eq(memcmp(obj.s, "\x7f" "ELF", 4), 0);
  cpu_code_free(c);   /* the name is free again */
  c = cpu_jit_load(jit, k, k->name, obj.s, obj.len, &err);
  ck_assert_msg(c != NULL, "%s", err);
  float a[16], b[16], r[16];
  for (int i = 0; i < 16; i++) a[i] = (float)i, b[i] = 0.5f;
  cpu_code_fn(c)((void *[]){r, a, b}, 0, 1);
  ck_assert_float_eq(r[3], 2.5f);
  ir_str_free(&obj);
  k_free(k);
}
END_TEST

/* An x86 interrupt handler with three arguments: instruction selection
 * refuses it with a fatal error (LLVM has no way to return it). */
static void emit_fatal_module(void) {
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("fatal", ctx);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx), args[3] = {i64, i64, i64};
  LLVMValueRef f = LLVMAddFunction(m, "k_fatal", LLVMFunctionType(LLVMVoidTypeInContext(ctx), args, 3, 0));
  LLVMSetFunctionCallConv(f, LLVMX86INTRCallConv);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, f, "entry"));
  LLVMBuildRetVoid(b);
  char *triple = LLVMGetDefaultTargetTriple(), *msg = NULL;
  LLVMTargetRef t;
  ck_assert(!LLVMGetTargetFromTriple(triple, &t, &msg));
  LLVMTargetMachineRef tm = LLVMCreateTargetMachine(t, triple, "", "", LLVMCodeGenLevelDefault, LLVMRelocPIC,
                                                    LLVMCodeModelSmall);
  LLVMMemoryBufferRef buf;
  LLVMTargetMachineEmitToMemoryBuffer(tm, m, LLVMObjectFile, &msg, &buf);
}

/* LLVM ends the process after a fatal error, but the message kiln's
 * handler (installed by cpu_jit_new) prints first says it was kiln. */
START_TEST(test_fatal_error_names_kiln) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    emit_fatal_module();
    _exit(0);
  }
  close(fds[1]);
  char text[1024] = "";
  size_t got = 0;
  for (ssize_t r; got < sizeof text - 1 && (r = read(fds[0], text + got, sizeof text - 1 - got)) > 0;) got += (size_t)r;
  text[got] = '\0';
  close(fds[0]);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(!WIFEXITED(status) || WEXITSTATUS(status) != 0, "LLVM returned from a fatal error");
  ck_assert_msg(strstr(text, "kiln: LLVM fatal error while compiling kernel") && strstr(text, "x86 interrupt"), "%s",
                text);
}
END_TEST

/* ---- an expression 200,000 deep ---------------------------------------------
 * Fusion keeps kernels far shallower (passes/fuse.c), but every walk of the
 * kernel IR takes any depth on its own stack: keying, printing, rewriting
 * and the code generator (the loop-nest function, without LLVM's passes). */
enum { DEEP = 200000 };

typedef struct {
  kernel *k;
  int from, to;
} retarget;

/* Loads of param from become loads of param to. */
static kexpr *load_elsewhere(void *ctx, kexpr *x) {
  retarget *r = ctx;
  return x->kind == KX_LOAD && x->buf == r->from ? kx_load(r->k, r->to, x->a, x->type) : NULL;
}

static int64_t count_instructions(LLVMValueRef fn) {
  int64_t n = 0;
  for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(fn); b; b = LLVMGetNextBasicBlock(b))
    for (LLVMValueRef ins = LLVMGetFirstInstruction(b); ins; ins = LLVMGetNextInstruction(ins)) n++;
  return n;
}

START_TEST(test_deep_expression_walks) {
  kernel *k = k_new();
  int out = k_param(k, KILN_I32, true, 4), in = k_param(k, KILN_I32, false, 4), other = k_param(k, KILN_I32, false, 4);
  int v = k_var(k);
  kstmt *loop = ks_loop(k, v, 4, KL_SERIAL);
  kexpr *i = kx_var(k, v), *x = kx_load(k, in, i, KILN_I32), *e = x;
  for (int d = 0; d < DEEP; d++) e = kx_op(k, IR_ADD, KILN_I32, e, x, NULL);   /* x * (DEEP + 1) */
  loop->body = ks_store(k, out, i, e);
  k->body = loop;
  ir_str key = {0}, text = {0};
  k_key(k, &key);
  k_print(&text, k);
  ck_assert_uint_gt(text.len, (size_t)DEEP * 10);   /* a line per expression */
  kexpr *moved = kx_rewrite(k, e, load_elsewhere, &(retarget){k, in, other});
  int depth = 0;
  const kexpr *m = moved;
  for (; m->kind == KX_OP; m = m->a->kind == KX_OP ? m->a : m->b) {   /* operands may be in either order */
    ck_assert_int_eq((m->a->kind == KX_LOAD ? m->a : m->b)->buf, other);
    depth++;
  }
  ck_assert_int_eq(depth, DEEP);
  ck_assert_int_eq(m->buf, other);
  LLVMContextRef ctx = LLVMContextCreate();
  char *triple = LLVMGetDefaultTargetTriple();
  LLVMModuleRef mod = cpu_emit_module(ctx, k, triple, "", "", "");
  int64_t body = 0;
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) body += count_instructions(fn);
  ck_assert_int_ge(body, DEEP);   /* an add per level */
  LLVMDisposeModule(mod);
  LLVMDisposeMessage(triple);
  LLVMContextDispose(ctx);
  ir_str_free(&key);
  ir_str_free(&text);
  k_free(k);
}
END_TEST

static Suite *cpu_codegen_suite(void) {
  Suite *s = suite_create("cpu_codegen");
  TCase *tc = tcase_create("ops");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, test_ops, 0, (int)(sizeof op_rows / sizeof *op_rows));
  tcase_add_test(tc, test_pow_i64_wraps);
  tcase_add_test(tc, test_bool_load_normalises);
  suite_add_tcase(s, tc);
  tc = tcase_create("kernels");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_w1_vectorizes);
  tcase_add_test(tc, test_wide_math_interleaved);
  tcase_add_test(tc, test_nested_loops);
  tcase_add_test(tc, test_short_rows_not_gathered);
  tcase_add_test(tc, test_sibling_loops_and_sums);
  tcase_add_test(tc, test_half_storage);
  tcase_add_test(tc, test_philox_exact);
  tcase_add_test(tc, test_compile_time);
  tcase_add_test(tc, test_object_files);
  tcase_add_test(tc, test_fatal_error_names_kiln);
  tcase_add_test(tc, test_deep_expression_walks);
  suite_add_tcase(s, tc);
  tc = tcase_create("accuracy");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, test_accuracy_f32, 0, (int)(sizeof acc_rows / sizeof *acc_rows));
  tcase_add_test(tc, test_accuracy_powf);
  suite_add_tcase(s, tc);
  return s;
}

KILN_TEST_MAIN(cpu_codegen_suite)
