/* ref.c: the reference evaluator. Walks a node's graph in plain C, one node
 * at a time, with the semantics written in ir/ops.def: floats in double and
 * rounded to the node's dtype, integers exact in int64 and wrapped to width.
 * It shares no code with the compiler it checks (its own graph walk too). */
#include "ref.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/philox.h"
#include "runtime/rt.h"

/* One element in flight: a float (double) or an exact integer. */
typedef struct { bool isf; double f; int64_t i; } rv;

static rv rv_f(double f) { return (rv){true, f, 0}; }
static rv rv_i(int64_t i) { return (rv){false, 0, i}; }
static double rv_as_double(rv v) { return v.isf ? v.f : (double)v.i; }
static bool rv_truth(rv v) { return v.isf ? v.f != 0 : v.i != 0; }  /* NaN is true */

/* Two's complement wrap to dt's width (bool: nonzero is true). */
static int64_t wrap_int(kiln_dtype dt, uint64_t v) {
  switch (dt) {
  case KILN_BOOL: return v != 0;
  case KILN_U8: return (uint8_t)v;
  case KILN_I8: return (int8_t)v;
  case KILN_I16: return (int16_t)v;
  case KILN_I32: return (int32_t)v;
  default: return (int64_t)v;
  }
}

/* Float -> integer: truncate, saturate at the dtype's range, NaN -> 0. */
static int64_t saturate_int(kiln_dtype dt, double f) {
  if (dt == KILN_BOOL) return f != 0;
  if (isnan(f)) return 0;
  static const double lo[] = {[KILN_U8] = 0, [KILN_I8] = -128, [KILN_I16] = -32768,
                              [KILN_I32] = -2147483648.0, [KILN_I64] = -0x1p63};
  static const double hi[] = {[KILN_U8] = 255, [KILN_I8] = 127, [KILN_I16] = 32767,
                              [KILN_I32] = 2147483647.0, [KILN_I64] = 0x1p63};
  double t = trunc(f);
  if (t <= lo[dt]) return (int64_t)lo[dt];
  if (t >= hi[dt]) return dt == KILN_I64 ? INT64_MAX : (int64_t)hi[dt];
  return (int64_t)t;
}

/* Converts v to dtype dt. Narrow floats are reached through f32, as the
 * compiled code computes them in f32. */
static rv rv_convert(rv v, kiln_dtype dt) {
  if (!ir_is_float(dt)) return rv_i(v.isf ? saturate_int(dt, v.f) : wrap_int(dt, (uint64_t)v.i));
  if (v.isf) return rv_f(ref_round(dt, v.f));
  if (dt == KILN_F64) return rv_f((double)v.i);
  return rv_f(ref_round(dt, (float)v.i));
}

/* A constant: an integral value is an integer, so it wraps into a narrower
 * integer dtype (PyTorch: uint8 tensor + -1 gives 255); any other value
 * converts like a cast. */
static rv const_value(double v) {
  return isfinite(v) && v == trunc(v) && fabs(v) < 0x1p63 ? rv_i((int64_t)v) : rv_f(v);
}

/* ---- ref_tensor ---------------------------------------------------------- */
static ref_tensor *ref_new(const ir_node *n) {
  ref_tensor *r = calloc(1, sizeof *r);
  IR_ASSERT(r);
  r->dtype = n->dtype;
  r->ndim = n->ndim;
  memcpy(r->shape, n->shape, sizeof r->shape);
  r->numel = ir_numel(n->ndim, n->shape);
  size_t count = r->numel > 0 ? (size_t)r->numel : 1;
  if (ir_is_float(n->dtype)) r->f = calloc(count, sizeof *r->f);
  else r->i = calloc(count, sizeof *r->i);
  IR_ASSERT(r->f || r->i);
  return r;
}

void ref_free(ref_tensor *r) {
  if (!r) return;
  free(r->f);
  free(r->i);
  free(r);
}

double ref_get(const ref_tensor *r, int64_t k) { return r->f ? r->f[k] : (double)r->i[k]; }
static rv ref_rv(const ref_tensor *r, int64_t k) { return r->f ? rv_f(r->f[k]) : rv_i(r->i[k]); }

/* Stores v, converted to r's dtype, as element k. */
static void ref_put(ref_tensor *r, int64_t k, rv v) {
  v = rv_convert(v, r->dtype);
  if (r->f) r->f[k] = v.f;
  else r->i[k] = v.i;
}

/* Flat index of output element k in a source of shape (sndim, sshape)
 * broadcast to (ndim, shape): dims align on the right, size-1 dims repeat.
 * With strides it also walks a strided BUFFER view (sshape == shape). */
static int64_t source_index(int ndim, const int64_t *shape, int sndim, const int64_t *sshape,
                            const int64_t *sstrides, int64_t k) {
  int64_t idx = 0, stride = 1;
  for (int d = ndim - 1, s = sndim - 1; d >= 0; d--, s--) {
    int64_t pos = k % shape[d];
    k /= shape[d];
    if (s < 0) continue;
    if (sshape[s] != 1) idx += pos * (sstrides ? sstrides[s] : stride);
    stride *= sshape[s];
  }
  return idx;
}

/* ---- sources ------------------------------------------------------------- */
/* Uniform [0,1) with the dtype's mantissa width, from one Philox block. */
static double rand_uniform(kiln_dtype dt, const uint32_t w[4]) {
  switch (dt) {
  case KILN_F16: return (w[0] >> 21) * 0x1p-11;
  case KILN_BF16: return (w[0] >> 24) * 0x1p-8;
  case KILN_F64: return (double)(((uint64_t)w[0] << 21) + (w[1] >> 11)) * 0x1p-53;
  default: return (w[0] >> 8) * 0x1p-24;
  }
}

/* Box-Muller on one block; u1 > 0 so the log is finite. */
static double rand_normal(kiln_dtype dt, const uint32_t w[4]) {
  double u1, u2;
  if (dt == KILN_F64) {
    u1 = (double)((((uint64_t)w[0] << 21) + (w[1] >> 11)) + 1) * 0x1p-53;
    u2 = (double)(((uint64_t)w[2] << 21) + (w[3] >> 11)) * 0x1p-53;
  } else {
    u1 = ((w[0] >> 8) + 1) * 0x1p-24;
    u2 = (w[1] >> 8) * 0x1p-24;
  }
  return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

static rv source_value(const ir_node *n, int64_t k, int64_t numel) {
  const ir_attr *a = &n->attr;
  uint32_t w[4] = {0};
  if (n->op == IR_RAND || n->op == IR_RANDN || n->op == IR_RANDINT) philox4x32_10(a->seed, a->offset + (uint64_t)k, w);
  switch (n->op) {
  case IR_CONST: return const_value(a->value);
  case IR_ARANGE: return rv_f(a->start + (double)k * a->step);
  case IR_LINSPACE:
    return rv_f(k < numel / 2 ? a->start + (double)k * a->step : a->end - (double)(numel - 1 - k) * a->step);
  case IR_EYE: return rv_i(k / n->shape[1] == k % n->shape[1]);
  case IR_RAND: return rv_f(rand_uniform(n->dtype, w));
  case IR_RANDN: return rv_f(rand_normal(n->dtype, w));
  default: {  /* IR_RANDINT */
    uint64_t bits = ((uint64_t)(w[1] & 0x7fffffffu) << 32) + w[0];
    return rv_i(a->low + (int64_t)(bits % (uint64_t)(a->high - a->low)));
  }
  }
}

/* ---- elementwise --------------------------------------------------------- */
static double fmax_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }
static double fmin_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a < b ? a : b; }
static double sigmoid(double x) { return 1 / (1 + exp(-x)); }
/* x/2 (1 + tanh z) written as x sigmoid(2z), equal in exact arithmetic, so
 * that f64 keeps the tiny results of x << 0 instead of rounding them to 0. */
static double gelu_tanh(double x) { return x * sigmoid(2 * sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)); }

/* One op on float operands (already converted to the compute dtype). */
static rv apply_float(ir_op op, double a, double b, double c) {
  switch (op) {
  case IR_NEG: return rv_f(-a);
  case IR_ABS: return rv_f(fabs(a));
  case IR_EXP: return rv_f(exp(a));
  case IR_LOG: return rv_f(log(a));
  case IR_SQRT: return rv_f(sqrt(a));
  case IR_RSQRT: return rv_f(1 / sqrt(a));
  case IR_SIN: return rv_f(sin(a));
  case IR_COS: return rv_f(cos(a));
  case IR_TANH: return rv_f(tanh(a));
  case IR_SIGMOID: return rv_f(sigmoid(a));
  case IR_RELU: return rv_f(a < 0 ? 0 : a);
  case IR_GELU: return rv_f(a / 2 * (1 + erf(a / M_SQRT2)));
  case IR_GELU_TANH: return rv_f(gelu_tanh(a));
  case IR_SILU: return rv_f(a * sigmoid(a));
  case IR_FLOOR: return rv_f(floor(a));
  case IR_CEIL: return rv_f(ceil(a));
  case IR_ROUND: return rv_f(nearbyint(a));
  case IR_SIGN: return rv_f((0 < a) - (a < 0));
  case IR_RECIPROCAL: return rv_f(1 / a);
  case IR_LOGICAL_NOT: return rv_i(a == 0);
  case IR_ADD: return rv_f(a + b);
  case IR_SUB: return rv_f(a - b);
  case IR_MUL: return rv_f(a * b);
  case IR_DIV: return rv_f(a / b);
  case IR_POW: return rv_f(pow(a, b));
  case IR_MAXIMUM: return rv_f(fmax_nan(a, b));
  case IR_MINIMUM: return rv_f(fmin_nan(a, b));
  case IR_EQ: return rv_i(a == b);
  case IR_NE: return rv_i(a != b);
  case IR_LT: return rv_i(a < b);
  case IR_LE: return rv_i(a <= b);
  case IR_GT: return rv_i(a > b);
  case IR_GE: return rv_i(a >= b);
  case IR_LOGICAL_AND: return rv_i(a != 0 && b != 0);
  case IR_LOGICAL_OR: return rv_i(a != 0 || b != 0);
  case IR_ERF: return rv_f(erf(a));
  case IR_ERFC: return rv_f(erfc(a));
  case IR_EXPM1: return rv_f(expm1(a));
  case IR_LOG1P: return rv_f(log1p(a));
  case IR_LOG2: return rv_f(log2(a));
  case IR_LOG10: return rv_f(log10(a));
  case IR_EXP2: return rv_f(exp2(a));
  case IR_TAN: return rv_f(tan(a));
  case IR_ASIN: return rv_f(asin(a));
  case IR_ACOS: return rv_f(acos(a));
  case IR_ATAN: return rv_f(atan(a));
  case IR_SINH: return rv_f(sinh(a));
  case IR_COSH: return rv_f(cosh(a));
  case IR_ASINH: return rv_f(asinh(a));
  case IR_ACOSH: return rv_f(acosh(a));
  case IR_ATANH: return rv_f(atanh(a));
  case IR_ATAN2: return rv_f(atan2(a, b));
  default: return rv_f(fmin_nan(fmax_nan(a, b), c));  /* IR_CLAMP */
  }
}

/* Exact integer power, wrapping; a negative exponent gives 0 unless |a| = 1. */
static uint64_t int_pow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? (b & 1 ? (uint64_t)-1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  for (; b; b >>= 1, x *= x)
    if (b & 1) r *= x;
  return r;
}

static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

/* One op on integer operands; unsigned arithmetic wraps (mod 2^64), and the
 * store into the node's dtype wraps to its width. */
static rv apply_int(ir_op op, int64_t a, int64_t b, int64_t c) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  switch (op) {
  case IR_NEG: return rv_i((int64_t)(0 - ua));
  case IR_ABS: return rv_i(a < 0 ? (int64_t)(0 - ua) : a);
  case IR_RELU: return rv_i(a < 0 ? 0 : a);
  case IR_FLOOR: case IR_CEIL: case IR_ROUND: return rv_i(a);
  case IR_SIGN: return rv_i((0 < a) - (a < 0));
  case IR_LOGICAL_NOT: return rv_i(a == 0);
  case IR_ADD: return rv_i((int64_t)(ua + ub));
  case IR_SUB: return rv_i((int64_t)(ua - ub));
  case IR_MUL: return rv_i((int64_t)(ua * ub));
  case IR_POW: return rv_i((int64_t)int_pow(a, b));
  case IR_MAXIMUM: return rv_i(imax(a, b));
  case IR_MINIMUM: return rv_i(imin(a, b));
  case IR_EQ: return rv_i(a == b);
  case IR_NE: return rv_i(a != b);
  case IR_LT: return rv_i(a < b);
  case IR_LE: return rv_i(a <= b);
  case IR_GT: return rv_i(a > b);
  case IR_GE: return rv_i(a >= b);
  case IR_LOGICAL_AND: return rv_i(a != 0 && b != 0);
  case IR_LOGICAL_OR: return rv_i(a != 0 || b != 0);
  default: return rv_i(imin(imax(a, b), c));  /* IR_CLAMP */
  }
}

/* ---- the division, bitwise and shift ops: results depend on the compute
 * dtype's width or precision (floats in f32 round at each step, as the
 * kernels compute them) ------------------------------------------------- */
static double rnd(double x, bool single) { return single ? (double)(float)x : x; }

static double div_floor(double a, double b, bool single) {
  if (b == 0) return rnd(a / b, single);
  double mod = fmod(a, b), div = rnd(rnd(a - mod, single) / b, single);
  if (mod != 0 && (b < 0) != (mod < 0)) div = rnd(div - 1, single);
  if (div == 0) return copysign(0, a / b);
  double fl = floor(div);
  return div - fl > 0.5 ? fl + 1 : fl;
}

static rv float_division(ir_op op, double a, double b, bool single) {
  double m = fmod(a, b);
  switch (op) {
  case IR_FLOOR_DIVIDE: return rv_f(div_floor(a, b, single));
  case IR_TRUNC_DIVIDE: return rv_f(trunc(rnd(a / b, single)));
  case IR_REMAINDER: return rv_f(m != 0 && (b < 0) != (m < 0) ? rnd(m + b, single) : m);
  default: return rv_f(m);  /* IR_FMOD */
  }
}

/* Integers: b == -1 negates (wrapping; INT_MIN / -1 is INT_MIN once stored),
 * b == 0 gives 0 (the kernels report it; the value is a stand-in). */
static rv int_division(ir_op op, int64_t a, int64_t b) {
  if (b == 0) return rv_i(0);
  int64_t q = b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b, r = b == -1 ? 0 : a % b;
  bool adjust = r != 0 && (r < 0) != (b < 0);
  switch (op) {
  case IR_FLOOR_DIVIDE: return rv_i(q - adjust);
  case IR_TRUNC_DIVIDE: return rv_i(q);
  case IR_REMAINDER: return rv_i(adjust ? r + b : r);
  default: return rv_i(r);  /* IR_FMOD */
  }
}

static rv bitwise(ir_op op, kiln_dtype t, int64_t a, int64_t b) {
  int bits = 8 * (int)ir_dtypes[t].size;
  bool out = (uint64_t)b >= (uint64_t)bits, sg = ir_dtypes[t].is_signed;
  switch (op) {
  case IR_BITWISE_AND: return rv_i(a & b);
  case IR_BITWISE_OR: return rv_i(a | b);
  case IR_BITWISE_XOR: return rv_i(a ^ b);
  case IR_BITWISE_NOT: return rv_i(t == KILN_BOOL ? !a : ~a);
  case IR_LSHIFT: return rv_i(out ? 0 : (int64_t)((uint64_t)a << b));
  default: return rv_i(out ? (sg && a < 0 ? -1 : 0) : a >> b);  /* IR_RSHIFT; a is sign- or zero-extended */
  }
}

/* The value of those ops, or false for any other op. */
static bool typed_value(ir_op op, kiln_dtype t, const rv *v, rv *out) {
  bool division = op == IR_FLOOR_DIVIDE || op == IR_TRUNC_DIVIDE || op == IR_REMAINDER || op == IR_FMOD;
  if (division && ir_is_float(t)) *out = float_division(op, v[0].f, v[1].f, t != KILN_F64);
  else if (division) *out = int_division(op, v[0].i, v[1].i);
  else if (op == IR_COPYSIGN) *out = rv_f(copysign(rv_as_double(v[0]), rv_as_double(v[1])));
  else if (op == IR_TRUNC) *out = v[0].isf ? rv_f(trunc(v[0].f)) : v[0];
  else if (op == IR_BITWISE_AND || op == IR_BITWISE_OR || op == IR_BITWISE_XOR || op == IR_BITWISE_NOT ||
           op == IR_LSHIFT || op == IR_RSHIFT)
    *out = bitwise(op, t, v[0].i, v[1].i);
  else return false;
  return true;
}

/* Element k of an elementwise node from its sources' values. */
static rv elementwise_value(const ir_node *n, ref_tensor *const *src, int64_t k) {
  rv v[3] = {0};
  for (int s = 0; s < n->nsrc; s++) {
    const ref_tensor *r = src[s];
    v[s] = ref_rv(r, source_index(n->ndim, n->shape, r->ndim, r->shape, NULL, k));
  }
  if (n->op == IR_CAST) return v[0];
  if (n->op == IR_WHERE) return rv_convert(rv_truth(v[0]) ? v[1] : v[2], n->attr.compute);
  for (int s = 0; s < n->nsrc; s++) v[s] = rv_convert(v[s], n->attr.compute);
  rv r;
  if (typed_value(n->op, n->attr.compute, v, &r)) return r;
  if (v[0].isf || ir_ops[n->op].typing == TR_FLOAT)
    return apply_float(n->op, rv_as_double(v[0]), rv_as_double(v[1]), rv_as_double(v[2]));
  return apply_int(n->op, v[0].i, v[1].i, v[2].i);
}

/* ---- movement (gathers) ---------------------------------------------------- */
static void unflatten(int ndim, const int64_t *shape, int64_t k, int64_t *idx) {
  for (int d = ndim - 1; d >= 0; d--) {
    idx[d] = k % shape[d];
    k /= shape[d];
  }
}

static int64_t flatten(int ndim, const int64_t *shape, const int64_t *idx) {
  int64_t k = 0;
  for (int d = 0; d < ndim; d++) k = k * shape[d] + idx[d];
  return k;
}

/* UNFOLD's element (n, g, (c, i, j), (oh, ow)), written out from ops.def:
 * the source element, or 0 where the window reads none. */
static rv unfold_value(const ir_node *n, const ref_tensor *s, const int64_t *idx) {
  const ir_attr *a = &n->attr;
  int64_t cg = s->shape[1] / n->shape[1], taps = a->win.k[0] * a->win.k[1];
  int64_t tap[2] = {idx[2] % taps / a->win.k[1], idx[2] % a->win.k[1]};
  int64_t o[2] = {idx[3] / a->win.out[1], idx[3] % a->win.out[1]};
  int64_t sidx[4] = {idx[0], idx[1] * cg + idx[2] / taps, 0, 0};
  for (int d = 0; d < 2; d++) {
    int64_t at = o[d] * a->win.s[d] + tap[d] * a->win.d[d] - a->win.p[d];
    if (at < 0 || at % a->win.u[d] || at / a->win.u[d] >= s->shape[2 + d]) return const_value(0);
    sidx[2 + d] = at / a->win.u[d];
  }
  return ref_rv(s, flatten(4, s->shape, sidx));
}

/* Element k of a movement node other than EXPAND: the source element it
 * reads (ops.def), or PAD's fill where it reads none. */
static rv movement_value(const ir_node *n, ref_tensor *const *src, int64_t k) {
  const ir_attr *a = &n->attr;
  const ref_tensor *s = src[0];
  int64_t idx[KILN_MAX_DIMS], sidx[KILN_MAX_DIMS];
  if (n->op == IR_RESHAPE) return ref_rv(s, k);
  unflatten(n->ndim, n->shape, k, idx);
  if (n->op == IR_UNFOLD) return unfold_value(n, s, idx);
  memcpy(sidx, idx, sizeof idx);
  if (n->op == IR_SELECT) {
    memmove(sidx + a->dim + 1, idx + a->dim, (size_t)(n->ndim - a->dim) * sizeof *idx);
    sidx[a->dim] = a->index;
  }
  if (n->op == IR_SLICE) sidx[a->dim] = a->index + idx[a->dim] * a->stride;
  if (n->op == IR_CAT && idx[a->dim] >= s->shape[a->dim]) {
    sidx[a->dim] -= s->shape[a->dim];
    s = src[1];
  }
  for (int d = 0; d < n->ndim; d++) {
    if (n->op == IR_PERMUTE) sidx[a->perm[d]] = idx[d];
    if (n->op == IR_FLIP && (a->flip_mask >> d & 1)) sidx[d] = n->shape[d] - 1 - idx[d];
    if (n->op == IR_PAD) sidx[d] = idx[d] - a->pad[d][0];
    if (n->op == IR_PAD && (sidx[d] < 0 || sidx[d] >= s->shape[d])) return const_value(a->value);
  }
  return ref_rv(s, flatten(s->ndim, s->shape, sidx));
}

/* MATMUL ([...,M,K] x [...,K,N], equal batch dims): the row-column dot
 * product of output element k, accumulated in f64. */
static rv matmul_value(const ir_node *n, ref_tensor *const *src, int64_t k) {
  int nd = n->ndim;
  int64_t m = n->shape[nd - 2], nn = n->shape[nd - 1], kd = src[0]->shape[nd - 1];
  int64_t j = k % nn, i = k / nn % m, batch = k / nn / m;
  double acc = 0;
  for (int64_t t = 0; t < kd; t++)
    acc += src[0]->f[(batch * m + i) * kd + t] * src[1]->f[(batch * kd + t) * nn + j];
  return rv_f(acc);
}

/* A reduction (ops.def: reduced dims kept as size 1): folds the source
 * elements of output element k in order, in f64 for floats and exact int64
 * for integers; arg-reductions keep the first extreme, NaN counting as one. */
static rv reduce_value(const ir_node *n, ref_tensor *const *src, int64_t k) {
  const ref_tensor *s = src[0];
  int64_t idx[KILN_MAX_DIMS], cnt = 1;
  unflatten(n->ndim, n->shape, k, idx);
  for (int d = 0; d < s->ndim; d++)
    if (n->attr.axes >> d & 1) cnt *= s->shape[d];
  bool fl = s->f != NULL, found = false;
  double best = 0, acc = n->op == IR_PROD ? 1 : n->op == IR_ALL ? 1 : 0;
  int64_t iacc = n->op == IR_PROD ? 1 : 0, at = 0;
  for (int64_t r = 0; r < cnt; r++) {
    int64_t rem = r;  /* r spread over the reduced dims, last dim fastest */
    for (int d = s->ndim - 1; d >= 0; d--)
      if (n->attr.axes >> d & 1) idx[d] = rem % s->shape[d], rem /= s->shape[d];
    rv v = ref_rv(s, flatten(s->ndim, s->shape, idx));
    double x = rv_as_double(v);
    switch (n->op) {
    case IR_SUM: if (fl) acc += x; else iacc = (int64_t)((uint64_t)iacc + (uint64_t)v.i); break;
    case IR_PROD: if (fl) acc *= x; else iacc = (int64_t)((uint64_t)iacc * (uint64_t)v.i); break;
    case IR_ANY: acc = acc || rv_truth(v); break;
    case IR_ALL: acc = acc && rv_truth(v); break;
    default: {  /* MAX MIN ARGMAX ARGMIN */
      bool mx = n->op == IR_MAX || n->op == IR_ARGMAX;
      bool wins = !found || (isnan(x) && !isnan(best)) || (!isnan(best) && (mx ? x > best : x < best));
      if (wins) best = x, at = r, found = true;
    }
    }
  }
  switch (n->op) {
  case IR_SUM: case IR_PROD: return fl ? rv_f(acc) : rv_i(iacc);
  case IR_ANY: case IR_ALL: return rv_i(acc != 0);
  case IR_ARGMAX: case IR_ARGMIN: return rv_i(at);
  default: return fl ? rv_f(best) : rv_i((int64_t)best);
  }
}

/* ---- indexing ------------------------------------------------------------ */
/* An index value as a position along a dim of `size` (negative from the end);
 * the frontend refused values out of range. */
static int64_t ref_position(int64_t v, int64_t size) { return v < 0 ? v + size : v; }

/* GATHER: the table at k's index with dim replaced by the index's value. */
static rv gather_value(const ir_node *n, ref_tensor *const *src, int64_t k) {
  int64_t idx[KILN_MAX_DIMS];
  const ref_tensor *tab = src[0];
  int dim = n->attr.dim;
  unflatten(n->ndim, n->shape, k, idx);
  idx[dim] = ref_position(src[1]->i[k], tab->shape[dim]);
  return ref_rv(tab, flatten(tab->ndim, tab->shape, idx));
}

/* SCATTER*: r = src0, then each value of src2 in increasing position into
 * (or combined with) r at its index, in r's dtype, as ops.def says. */
static void scatter_values(const ir_node *n, ref_tensor *const *src, ref_tensor *r) {
  const ref_tensor *ix = src[1], *val = src[2];
  for (int64_t k = 0; k < r->numel; k++) ref_put(r, k, ref_rv(src[0], k));
  int64_t idx[KILN_MAX_DIMS];
  for (int64_t j = 0; j < ix->numel; j++) {
    unflatten(ix->ndim, ix->shape, j, idx);
    idx[n->attr.dim] = ref_position(ix->i[j], r->shape[n->attr.dim]);
    int64_t at = flatten(r->ndim, r->shape, idx);
    rv old = rv_convert(ref_rv(r, at), ir_compute_dtype(n->dtype)), v = rv_convert(ref_rv(val, j), ir_compute_dtype(n->dtype));
    ir_op op = n->op == IR_SCATTER_ADD ? IR_ADD : n->op == IR_SCATTER_MUL ? IR_MUL
             : n->op == IR_SCATTER_MAX ? IR_MAXIMUM : n->op == IR_SCATTER_MIN ? IR_MINIMUM : IR_NUM_OPS;
    if (op != IR_NUM_OPS) v = old.isf ? apply_float(op, old.f, v.f, 0) : apply_int(op, old.i, v.i, 0);
    ref_put(r, at, v);
  }
}

/* A scan along the dim of attr.axes, one line at a time in order: sums and
 * products in f64 (floats) or wrapping int64, logcumsumexp as the log of
 * the sum of exp(x - running max) (the sum rescaled when the max grows, so
 * a line of 2^20 costs one pass), cummax/cummin as PyTorch's loop (x takes
 * over when it is nan, or when the best is not and x >= best: ties and nans
 * move to the latest position). */
typedef struct {
  double max, sum;      /* sum of exp(x - max) over the finite x seen */
  bool nan;
} lse_state;

static double lse_add(lse_state *e, double x) {
  if (isnan(x)) e->nan = true;
  else if (x > e->max) e->sum = e->sum * exp(e->max - x) + 1, e->max = x;
  else if (x > -INFINITY && e->max < INFINITY) e->sum += exp(x - e->max);
  return e->nan ? NAN : isinf(e->max) ? e->max : e->max + log(e->sum);
}

static void scan_line(const ir_node *n, const ref_tensor *s, ref_tensor *r, int64_t first, int64_t len, int64_t step) {
  bool fl = s->f != NULL, mx = n->op == IR_CUMMAX || n->op == IR_CUMARGMAX;
  double acc = n->op == IR_CUMPROD ? 1 : 0, best = 0;
  rv bestv = rv_i(0);
  int64_t iacc = n->op == IR_CUMPROD ? 1 : 0, at = 0;
  lse_state lse = {-INFINITY, 0, false};
  for (int64_t j = 0; j < len; j++) {
    int64_t k = first + j * step;
    rv v = ref_rv(s, k);
    double x = rv_as_double(v);
    bool ge = fl ? x >= best : v.i >= bestv.i, le = fl ? x <= best : v.i <= bestv.i;
    bool wins = j == 0 || isnan(x) || (!isnan(best) && (mx ? ge : le));
    if (wins) best = x, bestv = v, at = j;
    switch (n->op) {
    case IR_CUMSUM:
      if (fl) acc += x;
      else iacc = (int64_t)((uint64_t)iacc + (uint64_t)v.i);
      ref_put(r, k, fl ? rv_f(acc) : rv_i(iacc));
      break;
    case IR_CUMPROD:
      if (fl) acc *= x;
      else iacc = (int64_t)((uint64_t)iacc * (uint64_t)v.i);
      ref_put(r, k, fl ? rv_f(acc) : rv_i(iacc));
      break;
    case IR_LOGCUMSUMEXP: ref_put(r, k, rv_f(lse_add(&lse, x))); break;
    case IR_CUMARGMAX: case IR_CUMARGMIN: ref_put(r, k, rv_i(at)); break;
    default: ref_put(r, k, bestv); break;
    }
  }
}

static void scan_eval(const ir_node *n, ref_tensor *const *src, ref_tensor *r) {
  int d = 0;
  while (!(n->attr.axes >> d & 1)) d++;
  int64_t len = n->shape[d], inner = ir_numel(n->ndim - d - 1, n->shape + d + 1);
  if (len == 0 || r->numel == 0) return;
  for (int64_t o = 0; o < r->numel / (len * inner); o++)
    for (int64_t t = 0; t < inner; t++) scan_line(n, src[0], r, o * len * inner + t, len, inner);
}

/* Sorts along the dim of attr.axes, by the plain definition: element a
 * comes before b when it is smaller (larger when descending; nan the
 * largest, -0 == +0), or equal and earlier; the first sort_k are kept. */
typedef struct { rv v; int64_t at; bool desc; } sort_item;

static int sort_cmp(const void *pa, const void *pb) {
  const sort_item *a = pa, *b = pb;
  int c;
  if (a->v.isf) {
    double x = a->v.f, y = b->v.f;
    c = isnan(x) ? (isnan(y) ? 0 : 1) : isnan(y) ? -1 : (x > y) - (x < y);
  } else {
    c = (a->v.i > b->v.i) - (a->v.i < b->v.i);
  }
  if (a->desc) c = -c;
  return c ? c : (a->at > b->at) - (a->at < b->at);
}

static void sort_eval(const ir_node *n, ref_tensor *const *src, ref_tensor *r) {
  const ref_tensor *s = src[0];
  int d = 0;
  while (!(n->attr.axes >> d & 1)) d++;
  int64_t len = s->shape[d], inner = ir_numel(n->ndim - d - 1, n->shape + d + 1), k = n->attr.sort_k;
  if (len == 0 || r->numel == 0) return;
  sort_item *items = malloc(sizeof *items * (size_t)len);
  IR_ASSERT(items);
  bool positions = n->op == IR_ARGSORT || n->op == IR_ARGTOPK;
  for (int64_t o = 0; o < s->numel / (len * inner); o++)
    for (int64_t t = 0; t < inner; t++) {
      for (int64_t j = 0; j < len; j++) items[j] = (sort_item){ref_rv(s, (o * len + j) * inner + t), j, n->attr.descending};
      qsort(items, (size_t)len, sizeof *items, sort_cmp);
      for (int64_t j = 0; j < k; j++) ref_put(r, (o * k + j) * inner + t, positions ? rv_i(items[j].at) : items[j].v);
    }
  free(items);
}

/* Attention in its plain form: per (batch, head) the full L x S matrix of
 * scores q k^T * scale, masked (causal: j > i is -inf; bool: false is -inf;
 * float: added), a row softmax (a row of -inf is nan: -inf - -inf) times v.
 * Key/value head h / group serves query head h. */
static int64_t attn_kv_batch(const ir_node *n, const ir_node *kv, int64_t b) {
  int64_t at = 0, scale = 1;
  for (int d = n->ndim - 3; d >= 0; d--) {
    int64_t i = b % n->shape[d];
    b /= n->shape[d];
    at += (d == n->ndim - 3 ? i / n->attr.group : i) * scale;
    scale *= kv->shape[d];
  }
  return at;
}

static void attention_eval(const ir_node *n, ref_tensor *const *src, ref_tensor *r) {
  int nd = n->ndim;
  int64_t lq = n->shape[nd - 2], ev = n->shape[nd - 1], s = src[1]->shape[nd - 2], e = src[0]->shape[nd - 1];
  double *sc = malloc(sizeof *sc * (size_t)(lq * s));
  IR_ASSERT(sc);
  for (int64_t b = 0; b < ir_numel(nd - 2, n->shape); b++) {
    int64_t kb = attn_kv_batch(n, n->src[1], b), vb = attn_kv_batch(n, n->src[2], b);
    for (int64_t i = 0; i < lq; i++)
      for (int64_t j = 0; j < s; j++) {
        double dot = 0;
        for (int64_t x = 0; x < e; x++) dot += src[0]->f[(b * lq + i) * e + x] * src[1]->f[(kb * s + j) * e + x];
        double v = dot * n->attr.value;
        if (n->attr.causal && j > i) v = -INFINITY;
        if (n->nsrc > 3 && src[3]->f) v += src[3]->f[(b * lq + i) * s + j];
        if (n->nsrc > 3 && !src[3]->f && !src[3]->i[(b * lq + i) * s + j]) v = -INFINITY;
        sc[i * s + j] = v;
      }
    for (int64_t i = 0; i < lq; i++) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < s; j++) mx = fmax(mx, sc[i * s + j]);
      for (int64_t j = 0; j < s; j++) sum += sc[i * s + j] = exp(sc[i * s + j] - mx);
      for (int64_t c = 0; c < ev; c++) {
        double acc = 0;
        for (int64_t j = 0; j < s; j++) acc += sc[i * s + j] / sum * src[2]->f[(vb * s + j) * ev + c];
        ref_put(r, (b * lq + i) * ev + c, rv_f(acc));
      }
    }
  }
  free(sc);
}

static bool op_supported(const ir_node *n) {
  if (n->status != KILN_OK) return false;
  if (n->op == IR_BUFFER)  /* an empty buffer may have no storage */
    return (n->buf || ir_numel(n->ndim, n->shape) == 0) && n->device.type == KILN_CPU;
  return ir_op_has(n->op, IR_SRC | IR_EW | IR_MOVE | IR_CONTRACT | IR_REDUCE | IR_SCAN | IR_SORTING | IR_ATTN) ||
         ir_op_is_indexed(n->op);
}

/* The value of n given the values of its sources. */
static ref_tensor *eval_node(const ir_node *n, ref_tensor *const *src) {
  ref_tensor *r = ref_new(n);
  if (ir_op_is_scatter(n->op)) {
    scatter_values(n, src, r);
    return r;
  }
  if (ir_op_has(n->op, IR_SCAN | IR_SORTING | IR_ATTN)) {
    (ir_op_has(n->op, IR_SCAN) ? scan_eval : ir_op_has(n->op, IR_SORTING) ? sort_eval : attention_eval)(n, src, r);
    return r;
  }
  for (int64_t k = 0; k < r->numel; k++) {
    if (n->op == IR_GATHER) {
      ref_put(r, k, gather_value(n, src, k));
    } else if (n->op == IR_BUFFER) {
      int64_t at = n->offset + source_index(n->ndim, n->shape, n->ndim, n->shape, n->strides, k);
      ref_put(r, k, ir_is_float(n->dtype) ? rv_f(ref_load_f(n->dtype, n->buf->data, at))
                                          : rv_i(ref_load_i(n->dtype, n->buf->data, at)));
    } else if (n->op == IR_EXPAND) {
      ref_put(r, k, ref_rv(src[0], source_index(n->ndim, n->shape, src[0]->ndim, src[0]->shape, NULL, k)));
    } else if (ir_op_has(n->op, IR_MOVE)) {
      ref_put(r, k, movement_value(n, src, k));
    } else if (ir_op_has(n->op, IR_SRC)) {
      ref_put(r, k, source_value(n, k, r->numel));
    } else if (n->op == IR_MATMUL) {
      ref_put(r, k, matmul_value(n, src, k));
    } else if (ir_op_has(n->op, IR_REDUCE)) {
      ref_put(r, k, reduce_value(n, src, k));
    } else {
      ref_put(r, k, elementwise_value(n, src, k));
    }
  }
  return r;
}

/* ---- the walk ------------------------------------------------------------ */
/* Visited nodes and their values. Test graphs are small, so a linear search
 * keeps this independent of the library's own graph walk. */
typedef struct { const ir_node **node; ref_tensor **val; int n, cap; } ref_memo;

static int memo_find(const ref_memo *m, const ir_node *n) {
  for (int i = 0; i < m->n; i++)
    if (m->node[i] == n) return i;
  return -1;
}

static void memo_add(ref_memo *m, const ir_node *n, ref_tensor *v) {
  if (m->n == m->cap) {
    m->cap = m->cap ? 2 * m->cap : 32;
    m->node = realloc(m->node, (size_t)m->cap * sizeof *m->node);
    m->val = realloc(m->val, (size_t)m->cap * sizeof *m->val);
    IR_ASSERT(m->node && m->val);
  }
  m->node[m->n] = n;
  m->val[m->n++] = v;
}

/* Evaluates n after its sources (iterative post-order: deep chains must not
 * overflow the C stack). Returns false on a node the oracle cannot compute. */
static bool memo_eval(ref_memo *m, const ir_node *root) {
  typedef struct { const ir_node *n; int next; } frame;
  int cap = 64, top = 0;
  frame *st = malloc((size_t)cap * sizeof *st);
  IR_ASSERT(st);
  st[top++] = (frame){root, 0};
  bool ok = true;
  while (top > 0 && ok) {
    frame *f = &st[top - 1];
    if (f->next < f->n->nsrc) {
      const ir_node *s = f->n->src[f->next++];
      if (memo_find(m, s) >= 0) continue;
      if (top == cap) {
        st = realloc(st, (size_t)(cap *= 2) * sizeof *st);
        IR_ASSERT(st);
      }
      st[top++] = (frame){s, 0};
      continue;
    }
    const ir_node *n = f->n;
    top--;
    if (memo_find(m, n) >= 0) continue;
    ok = op_supported(n);
    ref_tensor *src[IR_MAX_SRC] = {0};
    for (int s = 0; ok && s < n->nsrc; s++) src[s] = m->val[memo_find(m, n->src[s])];
    if (ok) memo_add(m, n, eval_node(n, src));
  }
  free(st);
  return ok;
}

ref_tensor *ref_eval(kiln_tensor *t) {
  if (!t) return NULL;
  ref_memo m = {0};
  ref_tensor *out = NULL;
  if (memo_eval(&m, t)) {
    int at = memo_find(&m, t);
    out = m.val[at];
    m.val[at] = NULL;
  }
  for (int i = 0; i < m.n; i++) ref_free(m.val[i]);
  free(m.node);
  free(m.val);
  return out;
}

/* ---- comparison ---------------------------------------------------------- */
static bool float_close(double got, double want, double rtol, double atol) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
  if (isinf(want) || isinf(got)) return got == want;
  return fabs(got - want) <= atol + rtol * fabs(want);
}

/* Values arrive formatted so integers print exactly. */
static void describe(char *why, size_t n, const ref_tensor *e, int64_t k, const char *got, const char *want) {
  ir_str s = {0};
  ir_str_printf(&s, "element %" PRId64 " [", k);
  for (int d = 0, first = 1; d < e->ndim; d++, first = 0) {
    int64_t inner = 1;
    for (int j = d + 1; j < e->ndim; j++) inner *= e->shape[j];
    ir_str_printf(&s, first ? "%" PRId64 : ",%" PRId64, k / inner % e->shape[d]);
  }
  ir_str_printf(&s, "]: got %s, expected %s (%s, shape ", got, want, ir_dtypes[e->dtype].name);
  ir_str_shape(&s, e->ndim, e->shape);
  ir_str_printf(&s, ")");
  snprintf(why, n, "%s", s.s);
  ir_str_free(&s);
}

/* Same dtype and shape; otherwise says what differs. */
static bool same_type(const ref_tensor *e, kiln_tensor *t, char *why, size_t n) {
  bool ok = kiln_dtype_of(t) == e->dtype && kiln_ndim(t) == e->ndim &&
            memcmp(kiln_shape(t), e->shape, (size_t)e->ndim * sizeof(int64_t)) == 0;
  if (!ok) snprintf(why, n, "got %s with %d dims, expected %s with %d dims",
                    ir_dtypes[kiln_dtype_of(t)].name, kiln_ndim(t), ir_dtypes[e->dtype].name, e->ndim);
  return ok;
}

/* Compares host data of e's dtype with e; describes the first difference. */
static bool compare_values(const ref_tensor *e, const void *host, double rtol, double atol, char *why, size_t n) {
  char got[64], want[64];
  for (int64_t k = 0; k < e->numel; k++) {
    if (e->f) {
      double g = ref_load_f(e->dtype, host, k);
      if (float_close(g, e->f[k], rtol, atol)) continue;
      snprintf(got, sizeof got, "%.17g", g);
      snprintf(want, sizeof want, "%.17g", e->f[k]);
    } else {
      int64_t g = ref_load_i(e->dtype, host, k);
      if (g == e->i[k]) continue;
      snprintf(got, sizeof got, "%" PRId64, g);
      snprintf(want, sizeof want, "%" PRId64, e->i[k]);
    }
    describe(why, n, e, k, got, want);
    return false;
  }
  return true;
}

bool ref_check_data(const ref_tensor *e, const void *data, double rtol, double atol, char *why, size_t n) {
  return compare_values(e, data, rtol, atol, why, n);
}

bool ref_check(ref_tensor *e, kiln_tensor *t, double rtol, double atol, char *why, size_t n) {
  if (!e) {
    snprintf(why, n, "no expected value (the oracle could not evaluate the graph)");
    return false;
  }
  if (kiln_status_of(t) != KILN_OK) {
    snprintf(why, n, "error: %s", kiln_last_error());
    return false;
  }
  if (!same_type(e, t, why, n)) return false;
  size_t bytes = (size_t)e->numel * ir_dtypes[e->dtype].size;
  void *host = malloc(bytes ? bytes : 1);
  IR_ASSERT(host);
  bool ok = kiln_copy_to_host(t, host, bytes) == KILN_OK;
  if (!ok) snprintf(why, n, "copy_to_host failed: %s", kiln_last_error());
  ok = ok && compare_values(e, host, rtol, atol, why, n);
  free(host);
  return ok;
}
