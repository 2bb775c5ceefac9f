/* ops.c: the elementwise ops. One builder checks operands (NULL, sticky
 * errors, devices, dtypes), resolves PyTorch's type promotion, broadcasts
 * with EXPAND nodes and builds the node; the public functions are one row
 * each of a per-arity macro that calls it. */
#include "frontend/frontend.h"

#include <math.h>

/* ---- type promotion ----------------------------------------------------- */
/* PyTorch's priority classes: tensors with dims, 0-dim tensors, wrapped
 * numbers (the double of a scalar form such as kiln_adds). */
enum { CLS_DIM, CLS_ZERO, CLS_WRAPPED, NUM_CLS };
#define UNDEF (-1)   /* no operand in that class */

static int promote_undef(int a, kiln_dtype b) { return a == UNDEF ? (int)b : (int)ir_promote(a, b); }

/* PyTorch's combine_categories: the higher class decides unless the lower
 * one reaches a higher category (int over bool, float over int). */
static int combine(int higher, int lower) {
  if (higher == UNDEF) return lower;
  if (lower == UNDEF || ir_is_float(higher)) return higher;
  if (higher == KILN_BOOL || ir_is_float(lower)) return ir_promote(higher, lower);
  return higher;
}

/* A wrapped number is int64 when integral (C cannot tell 10 from 10.0, so
 * 10.0 counts as an int) and within int64's range, else float32 (PyTorch's
 * default float). */
static kiln_dtype wrapped_dtype(double v) {
  return isfinite(v) && v == trunc(v) && fabs(v) < 0x1p63 ? KILN_I64 : KILN_F32;
}

static kiln_dtype result_type(int nt, ir_node *const *t, int nw, const double *w) {
  int cls[NUM_CLS] = {UNDEF, UNDEF, UNDEF};
  for (int i = 0; i < nt; i++) {
    int c = t[i]->ndim ? CLS_DIM : CLS_ZERO;
    cls[c] = promote_undef(cls[c], t[i]->dtype);
  }
  for (int i = 0; i < nw; i++) cls[CLS_WRAPPED] = promote_undef(cls[CLS_WRAPPED], wrapped_dtype(w[i]));
  return (kiln_dtype)combine(cls[CLS_DIM], combine(cls[CLS_ZERO], cls[CLS_WRAPPED]));
}

/* ---- checks ------------------------------------------------------------- */
/* "(2,3) and (4,)", or with dtypes "bool (3,) and float32 (3,)". */
static void list_operands(ir_str *b, int nt, ir_node *const *t, bool dtypes) {
  for (int i = 0; i < nt; i++) {
    if (i) ir_str_printf(b, i == nt - 1 ? " and " : ", ");
    if (dtypes) fe_describe(b, t[i]);
    else ir_str_shape(b, t[i]->ndim, t[i]->shape);
  }
}

/* NULL arguments and error operands (sticky), in argument order, then devices. */
ir_node *fe_check_args(const char *f, int l, const char *name, int nt, ir_node *const *t) {
  for (int i = 0; i < nt; i++) {
    ir_node *e = fe_check_arg(f, l, name, t[i], i + 1);
    if (e) return e;
  }
  for (int i = 1; i < nt; i++) {
    kiln_device a = t[0]->device, b = t[i]->device;
    if (a.type == b.type && a.index == b.index) continue;
    char x[24], y[24];
    return fe_error(KILN_ERR_DEVICE, f, l, "%s: expected all tensors on one device, found %s and %s", name,
                    fe_device_name(a, x), fe_device_name(b, y));
  }
  return NULL;
}

/* NumPy rules, dims aligned to the right. On a mismatch returns the result
 * dim and the two sizes that clash. */
static bool broadcast(int nt, ir_node *const *t, int *ndim, int64_t *shape, int64_t clash[3]) {
  *ndim = 0;
  for (int i = 0; i < nt; i++)
    if (t[i]->ndim > *ndim) *ndim = t[i]->ndim;
  for (int d = 0; d < *ndim; d++) {
    shape[d] = 1;
    for (int i = 0; i < nt; i++) {
      int j = d - (*ndim - t[i]->ndim);
      int64_t s = j >= 0 ? t[i]->shape[j] : 1;
      if (s == shape[d] || s == 1) continue;
      if (shape[d] != 1) {
        clash[0] = d, clash[1] = shape[d], clash[2] = s;
        return false;
      }
      shape[d] = s;
    }
  }
  return true;
}

static ir_node *broadcast_error(const char *f, int l, const char *name, int nt, ir_node *const *t,
                                const int64_t clash[3]) {
  ir_str b = {0};
  list_operands(&b, nt, t, false);
  ir_node *e = fe_error(KILN_ERR_SHAPE, f, l, "%s: shapes %s cannot be broadcast (dim %lld: %lld vs %lld)", name,
                        b.s, (long long)clash[0], (long long)clash[1], (long long)clash[2]);
  ir_str_free(&b);
  return e;
}

/* IR_NOBOOL ops, with PyTorch's advice where it gives some. Subtraction
 * refuses any bool operand (as PyTorch does); the others a bool compute type. */
static ir_node *check_bool(const char *f, int l, ir_op op, int nt, ir_node *const *t, kiln_dtype compute) {
  int nbool = 0;
  for (int i = 0; i < nt; i++) nbool += t[i]->dtype == KILN_BOOL;
  if (!ir_op_has(op, IR_NOBOOL) || (op == IR_SUB ? nbool == 0 : compute != KILN_BOOL)) return NULL;
  const char *name = ir_ops[op].name;
  ir_str b = {0};
  list_operands(&b, nt, t, true);
  ir_node *e;
  if (op == IR_SUB && nbool == 2)
    e = fe_error(KILN_ERR_DTYPE, f, l, "sub: subtraction of two bool tensors is not supported (%s); use logical_xor or logical_not", b.s);
  else if (op == IR_SUB)
    e = fe_error(KILN_ERR_DTYPE, f, l, "sub: subtraction with a bool tensor is not supported (%s); to invert a mask use logical_not", b.s);
  else if (op == IR_NEG)
    e = fe_error(KILN_ERR_DTYPE, f, l, "neg: negation of a bool tensor is not supported (%s); to invert a mask use logical_not", b.s);
  else
    e = fe_error(KILN_ERR_DTYPE, f, l, "%s: not supported for bool tensors (%s)", name, b.s);
  ir_str_free(&b);
  return e;
}

/* IR_NOFLOAT ops (bitwise): integer and bool operands only, as PyTorch. */
static ir_node *check_float(const char *f, int l, ir_op op, int nt, ir_node *const *t, kiln_dtype compute) {
  if (!ir_op_has(op, IR_NOFLOAT) || !ir_is_float(compute)) return NULL;
  ir_str b = {0};
  list_operands(&b, nt, t, true);
  ir_node *e = fe_error(KILN_ERR_DTYPE, f, l, "%s: only integer and bool tensors are supported, got %s", ir_ops[op].name, b.s);
  ir_str_free(&b);
  return e;
}

/* NumPy 2's rule: an integer scalar must be a value of the integer dtype it
 * is computed in (int32 * 3e9 raises OverflowError there; a C conversion
 * would wrap); an integer division by the number 0 is PyTorch's
 * ZeroDivisionError at once, and so is its refusal of an integer to a
 * negative integral number (an exponent tensor's negative values give
 * PyTorch's integer results instead: 0, or 1 or -1 for a base of 1 or -1).
 * clamp's bounds are exempt: a bound past the dtype's range clamps nothing. */
static ir_node *check_numbers(const char *f, int l, ir_op op, int nw, const double *w, kiln_dtype compute) {
  if (op == IR_CLAMP || ir_is_float(compute) || compute == KILN_BOOL) return NULL;
  bool divides = op == IR_FLOOR_DIVIDE || op == IR_TRUNC_DIVIDE || op == IR_REMAINDER || op == IR_FMOD;
  if (divides && nw == 1 && w[0] == 0)  /* a divisor tensor holding 0 is the kernel's check (ir/kernel.h) */
    return fe_error(KILN_ERR_VALUE, f, l, "%s: integer division by zero (ZeroDivisionError)", ir_ops[op].name);
  if (op == IR_POW && nw == 1 && w[0] < 0)
    return fe_error(KILN_ERR_VALUE, f, l, "pow: Integers to negative integer powers are not allowed");
  for (int i = 0; i < nw; i++)
    if (!fe_int_fits(w[i], compute))
      return fe_error(KILN_ERR_ARG, f, l, "%s: integer %.17g is out of bounds for %s", ir_ops[op].name, w[i],
                      ir_dtypes[compute].name);
  return NULL;
}

/* ---- building ----------------------------------------------------------- */
/* n seen with the given shape: n itself or an EXPAND of it, taking the
 * caller's reference to n (NULL, n released, when out of memory). */
static ir_node *expand_to(ir_node *n, int ndim, const int64_t *shape, const char *f, int l) {
  bool same = n->ndim == ndim;
  for (int d = 0; d < ndim && same; d++) same = n->shape[d] == shape[d];
  if (same) return n;
  kiln_dtype dt = n->dtype;
  ir_node *x = ir_node_new_taking(IR_EXPAND, dt, ndim, shape, 1, &n, f, l);
  if (x) x->attr.compute = dt;
  return x;
}

/* A wrapped number: a 0-dim CONST of the op's operand dtype, broadcast. */
static ir_node *wrapped_const(double v, kiln_dtype dt, kiln_device dev, int ndim, const int64_t *shape,
                              const char *f, int l) {
  ir_node *c = ir_node_new(IR_CONST, dt, 0, NULL, 0, NULL, f, l);
  if (!c) return NULL;
  c->attr.value = v;
  c->device = dev;
  return expand_to(c, ndim, shape, f, l);
}

static kiln_dtype result_dtype(ir_typing typing, kiln_dtype compute) {
  return typing == TR_BOOL ? KILN_BOOL : compute;
}

/* The one builder: nt tensor operands first, then nw wrapped numbers. */
static ir_node *elementwise(const char *f, int l, ir_op op, int nt, ir_node *const *t, int nw, const double *w) {
  IR_ASSERT(nt >= 1 && nt + nw == ir_ops[op].arity);
  const char *name = ir_ops[op].name;
  ir_typing typing = ir_ops[op].typing;
  ir_node *e = fe_check_args(f, l, name, nt, t);
  if (e) return e;
  int skip = typing == TR_WHERE;   /* where's condition takes no part in promotion */
  if (skip && t[0]->dtype != KILN_BOOL) {
    ir_str b = {0};
    fe_describe(&b, t[0]);
    e = fe_error(KILN_ERR_DTYPE, f, l, "where: condition must be bool, got %s", b.s);
    ir_str_free(&b);
    return e;
  }
  kiln_dtype compute = result_type(nt - skip, t + skip, nw, w);
  if (typing == TR_FLOAT && !ir_is_float(compute)) compute = KILN_F32;
  int ndim;
  int64_t shape[KILN_MAX_DIMS], clash[3];
  if (!broadcast(nt, t, &ndim, shape, clash)) return broadcast_error(f, l, name, nt, t, clash);
  if ((e = fe_check_numel(f, l, name, ndim, shape)) || (e = check_numbers(f, l, op, nw, w, compute)) || (e = check_bool(f, l, op, nt, t, compute)) ||
      (e = check_float(f, l, op, nt, t, compute))) return e;
  ir_node *src[3];
  for (int i = 0; i < nt; i++) {
    ir_node_retain(t[i]);   /* the new node's reference, which expand_to takes */
    src[i] = expand_to(t[i], ndim, shape, f, l);
  }
  for (int i = 0; i < nw; i++) src[nt + i] = wrapped_const(w[i], compute, t[0]->device, ndim, shape, f, l);
  bool built = true;
  for (int i = 0; i < nt + nw; i++) built &= src[i] != NULL;
  for (int i = 0; i < nt + nw && !built; i++) ir_node_release(src[i]);
  ir_node *n = built ? ir_node_new_taking(op, result_dtype(typing, compute), ndim, shape, nt + nw, src, f, l) : NULL;
  if (n) n->attr.compute = compute;
  return fe_finish(n);
}

/* ---- the public ops ----------------------------------------------------- */
#define UNARY(E, name) \
  kiln_tensor *kiln_##name##_at(const char *f, int l, kiln_tensor *a) { \
    return elementwise(f, l, IR_##E, 1, &a, 0, NULL); \
  }
#define BINARY(E, name) \
  kiln_tensor *kiln_##name##_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b) { \
    return elementwise(f, l, IR_##E, 2, (ir_node *[]){a, b}, 0, NULL); \
  } \
  kiln_tensor *kiln_##name##s_at(const char *f, int l, kiln_tensor *a, double b) { \
    return elementwise(f, l, IR_##E, 1, &a, 1, &b); \
  }

UNARY(NEG, neg) UNARY(ABS, abs) UNARY(EXP, exp) UNARY(LOG, log) UNARY(SQRT, sqrt)
UNARY(RSQRT, rsqrt) UNARY(SIN, sin) UNARY(COS, cos) UNARY(TANH, tanh) UNARY(SIGMOID, sigmoid)
UNARY(RELU, relu) UNARY(GELU, gelu) UNARY(GELU_TANH, gelu_tanh) UNARY(SILU, silu) UNARY(FLOOR, floor)
UNARY(CEIL, ceil) UNARY(ROUND, round) UNARY(SIGN, sign) UNARY(RECIPROCAL, reciprocal) UNARY(LOGICAL_NOT, logical_not)
BINARY(ADD, add) BINARY(SUB, sub) BINARY(MUL, mul) BINARY(DIV, div) BINARY(POW, pow)
BINARY(MAXIMUM, maximum) BINARY(MINIMUM, minimum) BINARY(EQ, eq) BINARY(NE, ne)
BINARY(LT, lt) BINARY(LE, le) BINARY(GT, gt) BINARY(GE, ge)
BINARY(LOGICAL_AND, logical_and) BINARY(LOGICAL_OR, logical_or)
UNARY(TRUNC, trunc) UNARY(BITWISE_NOT, bitwise_not)
BINARY(FLOOR_DIVIDE, floor_divide) BINARY(TRUNC_DIVIDE, trunc_divide) BINARY(REMAINDER, remainder)
BINARY(FMOD, fmod) BINARY(COPYSIGN, copysign) BINARY(BITWISE_AND, bitwise_and) BINARY(BITWISE_OR, bitwise_or)
BINARY(BITWISE_XOR, bitwise_xor) BINARY(LSHIFT, bitwise_left_shift) BINARY(RSHIFT, bitwise_right_shift)
/* elementwise math (issue 13) */
UNARY(ERF, erf) UNARY(ERFC, erfc) UNARY(EXPM1, expm1) UNARY(LOG1P, log1p) UNARY(LOG2, log2)
UNARY(LOG10, log10) UNARY(EXP2, exp2) UNARY(TAN, tan) UNARY(ASIN, asin) UNARY(ACOS, acos)
UNARY(ATAN, atan) UNARY(SINH, sinh) UNARY(COSH, cosh) UNARY(ASINH, asinh) UNARY(ACOSH, acosh)
UNARY(ATANH, atanh) BINARY(ATAN2, atan2)

kiln_tensor *kiln_where_at(const char *f, int l, kiln_tensor *cond, kiln_tensor *a, kiln_tensor *b) {
  return elementwise(f, l, IR_WHERE, 3, (ir_node *[]){cond, a, b}, 0, NULL);
}

/* lo and hi act like PyTorch's Python numbers: they never widen x's kind. */
kiln_tensor *kiln_clamp_at(const char *f, int l, kiln_tensor *a, double lo, double hi) {
  return elementwise(f, l, IR_CLAMP, 1, &a, 2, (double[]){lo, hi});
}

/* A cast to a's own dtype is a's value: a new reference, no node. */
kiln_tensor *kiln_cast_at(const char *f, int l, kiln_tensor *a, kiln_dtype dt) {
  ir_node *e = fe_check_arg(f, l, "cast", a, 1);
  if (e) return e;
  if (!ir_dtype_valid(dt)) return fe_error(KILN_ERR_ARG, f, l, "cast: invalid dtype %d", (int)dt);
  if (a->dtype == dt) return fe_same(a);
  ir_node *n = ir_node_new(IR_CAST, dt, a->ndim, a->shape, 1, &a, f, l);
  if (!n) return fe_nomem();
  n->attr.to = dt;
  n->attr.compute = dt;
  return fe_finish(n);
}
