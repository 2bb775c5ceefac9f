/* test_ops.c: every elementwise op of ir/ops.def through its public function,
 * on every dtype it accepts, with promotion, broadcasting, scalar forms, odd
 * sizes and casts between all dtypes: each result is compared with the
 * reference evaluator, fused and eager. */
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "util/testutil.h"

/* Every elementwise op with a public function of one or two operands, and
 * its input range: sin and cos of huge arguments and pow of huge operands
 * measure argument reduction and overflow paths no kernel library promises. */
static const struct { ir_op op; tu_range range; } unary_ops[] = {
  {IR_NEG, TU_FULL},     {IR_ABS, TU_FULL},      {IR_EXP, TU_FULL},       {IR_LOG, TU_FULL},
  {IR_SQRT, TU_FULL},    {IR_RSQRT, TU_FULL},    {IR_SIN, TU_MODERATE},   {IR_COS, TU_MODERATE},
  {IR_TANH, TU_FULL},    {IR_SIGMOID, TU_FULL},  {IR_RELU, TU_FULL},      {IR_GELU, TU_FULL},
  {IR_GELU_TANH, TU_FULL}, {IR_SILU, TU_FULL},  {IR_FLOOR, TU_FULL},     {IR_CEIL, TU_FULL},
  {IR_ROUND, TU_FULL},   {IR_SIGN, TU_FULL},     {IR_RECIPROCAL, TU_FULL}, {IR_LOGICAL_NOT, TU_FULL},
  {IR_ERF, TU_FULL},     {IR_ERFC, TU_FULL},     {IR_EXPM1, TU_FULL},     {IR_LOG1P, TU_FULL},
  {IR_LOG2, TU_FULL},    {IR_LOG10, TU_FULL},    {IR_EXP2, TU_FULL},      {IR_TAN, TU_MODERATE},
  {IR_ASIN, TU_FULL},    {IR_ACOS, TU_FULL},     {IR_ATAN, TU_FULL},      {IR_SINH, TU_FULL},
  {IR_COSH, TU_FULL},    {IR_ASINH, TU_FULL},    {IR_ACOSH, TU_FULL},     {IR_ATANH, TU_FULL},
};
enum { NUNARY = sizeof unary_ops / sizeof *unary_ops };

static const struct { ir_op op; tu_range range; } binary_ops[] = {
  {IR_ADD, TU_FULL}, {IR_SUB, TU_FULL}, {IR_MUL, TU_FULL}, {IR_DIV, TU_FULL},
  {IR_POW, TU_MODERATE}, {IR_MAXIMUM, TU_FULL}, {IR_MINIMUM, TU_FULL}, {IR_EQ, TU_FULL},
  {IR_NE, TU_FULL}, {IR_LT, TU_FULL}, {IR_LE, TU_FULL}, {IR_GT, TU_FULL}, {IR_GE, TU_FULL},
  {IR_LOGICAL_AND, TU_FULL}, {IR_LOGICAL_OR, TU_FULL}, {IR_ATAN2, TU_FULL},
};
enum { NBINARY = sizeof binary_ops / sizeof *binary_ops };

/* ---- one case: an op, its operands' dtypes and shapes --------------------- */
typedef enum { F_UNARY, F_BINARY, F_SCALAR, F_WHERE, F_CLAMP, F_CAST } form;
typedef struct { int ndim; int64_t d[KILN_MAX_DIMS]; } shape_t;

typedef struct {
  form form;
  int row;              /* unary_ops / binary_ops row */
  int nt;               /* tensor operands */
  kiln_dtype dt[3];
  shape_t shape[3];
  double s[2];          /* scalar operand; clamp's lo, hi */
  kiln_dtype to;        /* cast target */
  tu_range range;
} op_case;

#define SHAPE(...) ((shape_t){KILN_NARGS_(__VA_ARGS__), {__VA_ARGS__}})
static const shape_t main_shape = {2, {11, 97}};   /* 1067 elements: not a multiple of any vector width */

static ir_op case_op(const op_case *c) {
  switch (c->form) {
  case F_UNARY: return unary_ops[c->row].op;
  case F_BINARY: case F_SCALAR: return binary_ops[c->row].op;
  case F_WHERE: return IR_WHERE;
  case F_CLAMP: return IR_CLAMP;
  default: return IR_CAST;
  }
}

static kiln_tensor *build_case(const void *ctx) {
  const op_case *c = ctx;
  kiln_tensor *t[3];
  for (int i = 0; i < c->nt; i++) t[i] = tu_data(c->dt[i], c->shape[i].ndim, c->shape[i].d, (uint64_t)i + 1, c->range);
  switch (c->form) {
  case F_UNARY: return tu_unary(unary_ops[c->row].op)(__FILE__, __LINE__, t[0]);
  case F_BINARY: return tu_binary(binary_ops[c->row].op)(__FILE__, __LINE__, t[0], t[1]);
  case F_SCALAR: return tu_scalar(binary_ops[c->row].op)(__FILE__, __LINE__, t[0], c->s[0]);
  case F_WHERE: return kiln_where(t[0], t[1], t[2]);
  case F_CLAMP: return kiln_clamp(t[0], c->s[0], c->s[1]);
  default: return kiln_cast(t[0], c->to);
  }
}

/* The result dtype by PyTorch's rules, computed here, not by the frontend. */
static kiln_dtype case_dtype(const op_case *c) {
  if (c->form == F_CAST) return c->to;
  kiln_dtype dt[4];
  tu_rank rank[4];
  int n = 0, first = c->form == F_WHERE;   /* where's condition is not promoted */
  for (int i = first; i < c->nt; i++, n++) {
    dt[n] = c->dt[i];
    rank[n] = c->shape[i].ndim ? TU_TENSOR : TU_ZERO_DIM;
  }
  for (int i = 0; i < (c->form == F_SCALAR ? 1 : c->form == F_CLAMP ? 2 : 0); i++, n++) {
    dt[n] = tu_number_dtype(c->s[i]);
    rank[n] = TU_NUMBER;
  }
  return tu_op_dtype(case_op(c), tu_result_type(n, dt, rank));
}

static void describe_case(const op_case *c, char *out, size_t n) {
  ir_str b = {0};
  ir_str_printf(&b, "%s(", ir_ops[case_op(c)].name);
  for (int i = 0; i < c->nt; i++) {
    ir_str_printf(&b, "%s%s ", i ? ", " : "", ir_dtypes[c->dt[i]].short_name);
    ir_str_shape(&b, c->shape[i].ndim, c->shape[i].d);
  }
  if (c->form == F_SCALAR || c->form == F_CLAMP) ir_str_printf(&b, ", %g", c->s[0]);
  if (c->form == F_CLAMP) ir_str_printf(&b, ", %g", c->s[1]);
  if (c->form == F_CAST) ir_str_printf(&b, " -> %s", ir_dtypes[c->to].short_name);
  ir_str_printf(&b, ")");
  snprintf(out, n, "%s", b.s);
  ir_str_free(&b);
}

static void run_case(const op_case *c) {
  kiln_dtype want = case_dtype(c);
  char why[1200], what[200];
  bool ok = tu_check_fused_eager(build_case, c, want, ref_tol_op(case_op(c), want), why, sizeof why);
  describe_case(c, what, sizeof what);
  ck_assert_msg(ok, "%s: %s", what, why);
}

static op_case unary_case(int row, kiln_dtype dt, shape_t s) {
  return (op_case){F_UNARY, row, 1, {dt}, {s}, {0}, 0, unary_ops[row].range};
}

static op_case binary_case(int row, kiln_dtype a, shape_t sa, kiln_dtype b, shape_t sb) {
  return (op_case){F_BINARY, row, 2, {a, b}, {sa, sb}, {0}, 0, binary_ops[row].range};
}

static int unary_row(ir_op op) {
  for (int r = 0; r < NUNARY; r++)
    if (unary_ops[r].op == op) return r;
  ck_abort_msg("no unary row for %s", ir_ops[op].name);
  return -1;
}

static int binary_row(ir_op op) {
  for (int r = 0; r < NBINARY; r++)
    if (binary_ops[r].op == op) return r;
  ck_abort_msg("no binary row for %s", ir_ops[op].name);
  return -1;
}

/* ---- the table covers the op table ------------------------------------ */
static bool tested(ir_op op) {
  for (int r = 0; r < NUNARY; r++)
    if (unary_ops[r].op == op) return true;
  for (int r = 0; r < NBINARY; r++)
    if (binary_ops[r].op == op) return true;
  static const ir_op in_ew_ops[] = {  /* tests/test_ew_ops.c: their divisors and dtypes need care */
    IR_FLOOR_DIVIDE, IR_TRUNC_DIVIDE, IR_REMAINDER, IR_FMOD, IR_COPYSIGN, IR_BITWISE_AND, IR_BITWISE_OR,
    IR_BITWISE_XOR, IR_LSHIFT, IR_RSHIFT, IR_TRUNC, IR_BITWISE_NOT};
  for (size_t r = 0; r < sizeof in_ew_ops / sizeof *in_ew_ops; r++)
    if (in_ew_ops[r] == op) return true;
  return op == IR_WHERE || op == IR_CLAMP || op == IR_CAST;
}

START_TEST(every_elementwise_op_is_tested) {
  for (int op = 0; op < IR_NUM_OPS; op++)
    if (ir_op_has(op, IR_EW)) ck_assert_msg(tested(op), "op %s has no row in test_ops.c", ir_ops[op].name);
  for (int r = 0; r < NUNARY; r++) ck_assert_ptr_nonnull(tu_unary(unary_ops[r].op));
  for (int r = 0; r < NBINARY; r++) {
    ck_assert_ptr_nonnull(tu_binary(binary_ops[r].op));
    ck_assert_ptr_nonnull(tu_scalar(binary_ops[r].op));
  }
}
END_TEST

/* ---- each op on each dtype it accepts --------------------------------- */
START_TEST(unary_every_dtype) {
  for (kiln_dtype dt = 0; dt < KILN_NUM_DTYPES; dt++) {
    if (dt == KILN_BOOL && ir_op_has(unary_ops[_i].op, IR_NOBOOL)) continue;
    op_case c = unary_case(_i, dt, main_shape);
    run_case(&c);
  }
}
END_TEST

START_TEST(binary_every_dtype) {
  for (kiln_dtype dt = 0; dt < KILN_NUM_DTYPES; dt++) {
    if (dt == KILN_BOOL && ir_op_has(binary_ops[_i].op, IR_NOBOOL)) continue;
    op_case c = binary_case(_i, dt, main_shape, dt, main_shape);
    run_case(&c);
  }
}
END_TEST

/* Scalar forms: an integral number keeps an integer tensor integer (a bool
 * tensor becomes int64), a fractional one makes it float32. */
START_TEST(scalar_forms_every_dtype) {
  static const double numbers[] = {3.0, -1.5};
  for (kiln_dtype dt = 0; dt < KILN_NUM_DTYPES; dt++) {
    if (dt == KILN_BOOL && ir_op_has(binary_ops[_i].op, IR_NOBOOL)) continue;
    for (int k = 0; k < 2; k++) {
      op_case c = {F_SCALAR, _i, 1, {dt}, {main_shape}, {numbers[k]}, 0, binary_ops[_i].range};
      run_case(&c);
    }
  }
}
END_TEST

/* i64 tensor with scalars: the number never widens or narrows it. */
START_TEST(int64_tensor_with_scalars) {
  static const double numbers[] = {0.0, 7.0, -3.0, 2.5, 1e10};
  static const ir_op ops[] = {IR_ADD, IR_MUL, IR_SUB, IR_MAXIMUM, IR_LT, IR_EQ, IR_DIV};
  for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
    for (size_t k = 0; k < sizeof numbers / sizeof *numbers; k++) {
      op_case c = {F_SCALAR, binary_row(ops[o]), 1, {KILN_I64}, {main_shape}, {numbers[k]}, 0, TU_FULL};
      run_case(&c);
    }
}
END_TEST

START_TEST(where_every_dtype) {
  for (kiln_dtype dt = 0; dt < KILN_NUM_DTYPES; dt++) {
    op_case c = {F_WHERE, 0, 3, {KILN_BOOL, dt, dt}, {main_shape, main_shape, main_shape}, {0}, 0, TU_FULL};
    run_case(&c);
  }
}
END_TEST

START_TEST(clamp_every_dtype) {
  for (kiln_dtype dt = KILN_U8; dt < KILN_NUM_DTYPES; dt++) {
    op_case c = {F_CLAMP, 0, 1, {dt}, {main_shape}, {-7, 100}, 0, TU_FULL};
    run_case(&c);
    if (!ir_is_float(dt)) continue;
    c.s[0] = -2.5, c.s[1] = 3.75;
    run_case(&c);
  }
  /* fractional bounds make an integer tensor float32, as in PyTorch */
  op_case c = {F_CLAMP, 0, 1, {KILN_I32}, {main_shape}, {-2.5, 3.5}, 0, TU_FULL};
  run_case(&c);
}
END_TEST

/* Every pair, full range: saturation, NaN -> 0, wrapping, rounding. */
START_TEST(cast_every_pair) {
  for (kiln_dtype to = 0; to < KILN_NUM_DTYPES; to++) {
    op_case c = {F_CAST, 0, 1, {(kiln_dtype)_i}, {main_shape}, {0}, to, TU_FULL};
    run_case(&c);
  }
}
END_TEST

/* ---- promotion ------------------------------------------------------------ */
START_TEST(promotion_pairs) {
  static const kiln_dtype pairs[][2] = {
    {KILN_I32, KILN_F16}, {KILN_U8, KILN_I8}, {KILN_BOOL, KILN_BOOL}, {KILN_I8, KILN_U8},
    {KILN_F16, KILN_BF16}, {KILN_I64, KILN_F32}, {KILN_BOOL, KILN_F64}, {KILN_U8, KILN_I64},
    {KILN_BOOL, KILN_I16}, {KILN_F32, KILN_F64}, {KILN_BF16, KILN_I32}, {KILN_I16, KILN_U8},
  };
  static const ir_op ops[] = {IR_ADD, IR_MUL, IR_MAXIMUM, IR_LT, IR_DIV};
  for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++)
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
      op_case c = binary_case(binary_row(ops[o]), pairs[p][0], main_shape, pairs[p][1], main_shape);
      run_case(&c);
    }
}
END_TEST

/* A 0-dim tensor only decides the dtype when it is of a higher category. */
START_TEST(promotion_zero_dim) {
  static const kiln_dtype pairs[][2] = {
    {KILN_I32, KILN_F64}, {KILN_F32, KILN_F64}, {KILN_U8, KILN_I8}, {KILN_I16, KILN_I64},
    {KILN_BOOL, KILN_I32}, {KILN_F16, KILN_F32}, {KILN_I8, KILN_BOOL},
  };
  for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++) {
    op_case c = binary_case(binary_row(IR_ADD), pairs[p][0], SHAPE(5), pairs[p][1], (shape_t){0, {0}});
    run_case(&c);
    c = binary_case(binary_row(IR_MUL), pairs[p][1], (shape_t){0, {0}}, pairs[p][0], SHAPE(5));
    run_case(&c);
  }
}
END_TEST

/* Mixed where: the two values are promoted, the condition is not. */
START_TEST(where_promotes_values) {
  op_case c = {F_WHERE, 0, 3, {KILN_BOOL, KILN_I32, KILN_F16}, {main_shape, main_shape, main_shape}, {0}, 0, TU_FULL};
  run_case(&c);
  c.dt[1] = KILN_U8, c.dt[2] = KILN_I8;
  run_case(&c);
}
END_TEST

/* ---- broadcasting --------------------------------------------------------- */
static const shape_t bcast_pairs[][2] = {
  {{2, {3, 1}}, {2, {1, 4}}},
  {{1, {4}}, {3, {2, 3, 4}}},
  {{0, {0}}, {1, {5}}},
  {{1, {1}}, {1, {0}}},
  {{3, {1, 1, 5}}, {2, {3, 5}}},
  {{3, {2, 1, 3}}, {3, {2, 4, 1}}},
  {{2, {0, 3}}, {2, {1, 3}}},
  {{4, {1, 2, 1, 3}}, {1, {3}}},
};
enum { NBCAST = sizeof bcast_pairs / sizeof *bcast_pairs };

START_TEST(broadcast_binary) {
  static const ir_op ops[] = {IR_ADD, IR_MUL, IR_LT, IR_MAXIMUM, IR_DIV};
  static const kiln_dtype dts[] = {KILN_F32, KILN_I32, KILN_F16};
  for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
      op_case c = binary_case(binary_row(ops[o]), dts[d], bcast_pairs[_i][0], dts[d], bcast_pairs[_i][1]);
      run_case(&c);
      c = binary_case(binary_row(ops[o]), dts[d], bcast_pairs[_i][1], dts[d], bcast_pairs[_i][0]);
      run_case(&c);
    }
}
END_TEST

/* Three operands broadcast together: condition, values of two shapes. */
START_TEST(broadcast_where) {
  op_case c = {F_WHERE, 0, 3, {KILN_BOOL, KILN_F32, KILN_F32},
               {bcast_pairs[_i][0], bcast_pairs[_i][1], bcast_pairs[_i][0]}, {0}, 0, TU_FULL};
  run_case(&c);
  c.shape[0] = bcast_pairs[_i][1], c.shape[2] = (shape_t){0, {0}};
  c.dt[1] = KILN_I64;
  run_case(&c);
}
END_TEST

/* ---- odd sizes ------------------------------------------------------------ */
START_TEST(odd_sizes) {
  static const int64_t sizes[] = {0, 1, 7, 1000003};
  shape_t s = SHAPE(sizes[_i]);
  op_case cases[] = {
    binary_case(binary_row(IR_ADD), KILN_F32, s, KILN_F32, s),
    binary_case(binary_row(IR_MUL), KILN_I64, s, KILN_I32, s),
    binary_case(binary_row(IR_GE), KILN_F16, s, KILN_F16, s),
    unary_case(unary_row(IR_EXP), KILN_F32, s),
    unary_case(unary_row(IR_GELU), KILN_F64, s),
    unary_case(unary_row(IR_GELU_TANH), KILN_F32, s),
    {F_WHERE, 0, 3, {KILN_BOOL, KILN_F32, KILN_F32}, {s, s, SHAPE(1)}, {0}, 0, TU_FULL},
    {F_CAST, 0, 1, {KILN_F32}, {s}, {0}, KILN_I32, TU_FULL},
    {F_CAST, 0, 1, {KILN_F64}, {s}, {0}, KILN_BF16, TU_FULL},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) run_case(&cases[k]);
}
END_TEST

/* ---- chained expressions (W1) --------------------------------------------- */
typedef struct { shape_t ab, c; kiln_dtype dt; tu_range range; } w1_case;

/* relu(a*b + c) * sigmoid(a), c broadcast. */
static kiln_tensor *build_w1(const void *ctx) {
  const w1_case *w = ctx;
  kiln_tensor *a = tu_data(w->dt, w->ab.ndim, w->ab.d, 1, w->range);
  kiln_tensor *b = tu_data(w->dt, w->ab.ndim, w->ab.d, 2, w->range);
  kiln_tensor *c = tu_data(w->dt, w->c.ndim, w->c.d, 3, w->range);
  return kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(a));
}

START_TEST(chain_w1) {
  const w1_case cases[] = {
    {SHAPE(1000003), SHAPE(1), KILN_F32, TU_MODERATE},
    {SHAPE(1001, 999), SHAPE(999), KILN_F32, TU_MODERATE},
    {SHAPE(37, 41), SHAPE(41), KILN_F64, TU_MODERATE},
  };
  const w1_case *w = &cases[_i];
  /* sigmoid's tolerance, plus half an ulp of |a*b| <= 1e4: a kernel may
   * contract a*b + c into an FMA and skip that rounding. */
  ref_tol tol = ref_tol_op(IR_SIGMOID, w->dt);
  tol.atol += w->dt == KILN_F32 ? 1e-3 : 1e-11;
  char why[1200];
  ck_assert_msg(tu_check_fused_eager(build_w1, w, w->dt, tol, why, sizeof why), "W1 case %d: %s", _i, why);
}
END_TEST

/* Narrow floats through a chain: fused keeps f32 intermediates, eager
 * rounds after each op as the oracle does; both stay within a few ulps. */
START_TEST(chain_narrow_floats) {
  w1_case w = {SHAPE(7, 149), SHAPE(149), _i ? KILN_BF16 : KILN_F16, TU_SMALL};
  ref_tol tol = ref_tol_dtype(w.dt);
  tol.atol = 16 * tol.rtol;   /* an ulp or two of |a*b| <= 16, lost to cancellation in a*b + c */
  tol.rtol *= 4;
  char why[1200];
  ck_assert_msg(tu_check_fused_eager(build_w1, &w, w.dt, tol, why, sizeof why), "%s: %s",
                ir_dtypes[w.dt].name, why);
}
END_TEST

static Suite *ops_suite(void) {
  Suite *s = suite_create("ops");
  tcase_add_test(tu_tcase(s, "coverage"), every_elementwise_op_is_tested);
  tcase_add_loop_test(tu_tcase(s, "unary"), unary_every_dtype, 0, NUNARY);
  tcase_add_loop_test(tu_tcase(s, "binary"), binary_every_dtype, 0, NBINARY);
  TCase *tc = tu_tcase(s, "scalar");
  tcase_add_loop_test(tc, scalar_forms_every_dtype, 0, NBINARY);
  tcase_add_test(tc, int64_tensor_with_scalars);
  tc = tu_tcase(s, "ternary");
  tcase_add_test(tc, where_every_dtype);
  tcase_add_test(tc, where_promotes_values);
  tcase_add_test(tc, clamp_every_dtype);
  tcase_add_loop_test(tu_tcase(s, "cast"), cast_every_pair, 0, KILN_NUM_DTYPES);
  tc = tu_tcase(s, "promotion");
  tcase_add_test(tc, promotion_pairs);
  tcase_add_test(tc, promotion_zero_dim);
  tc = tu_tcase(s, "broadcast");
  tcase_add_loop_test(tc, broadcast_binary, 0, NBCAST);
  tcase_add_loop_test(tc, broadcast_where, 0, NBCAST);
  tcase_add_loop_test(tu_tcase(s, "sizes"), odd_sizes, 0, 4);
  tc = tu_tcase(s, "chains");
  tcase_add_loop_test(tc, chain_w1, 0, 3);
  tcase_add_loop_test(tc, chain_narrow_floats, 0, 2);
  return s;
}

KILN_TEST_MAIN(ops_suite)
