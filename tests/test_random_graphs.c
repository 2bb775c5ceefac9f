/* test_random_graphs.c: differential testing on random well-typed DAGs that
 * mix elementwise ops (broadcasting, scalar forms, casts, constants, random
 * sources), movement (reshape, permute, transpose, slice with steps, select,
 * flip, expand, squeeze, unsqueeze, pad, cat, index strings, gather), scatter
 * and scatter_add, reductions
 * (sum mean prod max min any all argmax argmin over random dims, with and
 * without keepdim; softmax, log_softmax, layer_norm) and matrix products
 * (matmul, linear, transposed operands), convolutions, pooling and attention
 * (conv1d/conv2d with stride, padding, dilation and groups; max and average
 * pooling; causal or masked scaled_dot_product_attention) over
 * f32/f64/i32/i64/f16/bool, odd
 * shapes (0, 1, primes) and non-contiguous views: every graph is run fused
 * and eager and both are compared with the reference evaluator. A second
 * generator (random_gradients, below) makes smooth f64 graphs whose
 * gradients (kiln_grad) the gradient checker checks, fused and eager.
 *
 * Each graph is a small program (a list of instructions) so it can be built
 * again for the eager run and for the reproduction printed on failure. The
 * generator tracks, per value, its shape, a bound on its magnitude, a bound
 * on how far a correct implementation may drift from the oracle (rounding,
 * f32 intermediates of fused f16 chains, FMA contraction, polynomial
 * transcendentals, the summation order of reductions and products), and
 * whether every implementation must give exact bits.
 * What it leaves out, and why:
 * - pow: amplifies drift without bound and makes NaN of negative bases.
 * - log, log1p, log2, log10, sqrt, rsqrt, reciprocal, div only see operands
 *   >= 1 (built as abs(x) + 1): near a pole or a branch point a rounding
 *   difference of 1e-7 becomes any difference at all. exp, expm1, exp2,
 *   sinh and cosh only see |x| <= 4.
 * - tan, asin, acos, acosh, atanh, atan2: poles, domain edges with infinite
 *   slope, and atan2's jump across the negative x axis (test_math_ops
 *   covers them).
 * - comparisons, logical ops, floor/ceil/round/sign, float->int/bool casts,
 *   any/all and argmax/argmin only see exact values: a drift of one ulp
 *   flips a discontinuous result (or which of two near-equal values wins).
 * - values stay within |x| <= 1000 (ops that would exceed it are not chosen),
 *   so f16 never overflows and the drift bounds stay meaningful; a value
 *   whose drift bound is a large part of its magnitude (a long f16 sum, a
 *   layer_norm of a tiny eps) is not generated, as any answer would pass.
 */
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "util/gradcheck.h"
#include "util/testutil.h"
#ifdef KILN_TEST_CUDA
#include "codegen_cuda/cuda.h"
#include "util/hostplan.h"
#endif

/* One process runs all graphs so that eager kernels (one op on a shape from a
 * small set) come from the kernel cache after the first few graphs. */
enum { GRAPHS = 500, MAX_INSTR = 64, MAX_NUMEL = 2048, MAX_RANK = 5 };
#define MAG_LIMIT 1000.0
#define DRIFT_LIMIT 0.25   /* largest drift bound, relative to the magnitude, worth checking */
#define DEFAULT_SEED 0x6b696c6eu   /* "kiln"; override with KILN_TEST_SEED */

typedef struct { int ndim; int64_t d[KILN_MAX_DIMS]; } shape_t;

typedef enum {
  P_DATA, P_FULL, P_RAND, P_RANDN, P_RANDINT,                                  /* leaves */
  P_UNARY, P_BINARY, P_SCALAR, P_WHERE, P_CLAMP, P_CAST,                       /* elementwise */
  P_RESHAPE, P_PERMUTE, P_TRANSPOSE, P_SLICE, P_SELECT, P_FLIP, P_EXPAND,      /* movement */
  P_SQUEEZE, P_UNSQUEEZE, P_PAD, P_CAT, P_INDEX, P_GATHER, P_SHAPE_OP,
  P_SCATTER,                                                                   /* writes through indices */
  P_REDUCE, P_ARGREDUCE, P_SOFTMAX, P_LOG_SOFTMAX, P_LAYER_NORM,               /* reductions */
  P_SCAN,                                                                      /* scans */
  P_MATMUL, P_LINEAR,                                                          /* products */
  P_CONV, P_POOL, P_ATTENTION,                                                 /* networks */
  P_NUM_KINDS
} pkind;

/* The reductions P_REDUCE draws from (mean is a sum times 1/n, not an op). */
typedef enum { R_SUM, R_MEAN, R_PROD, R_MAX, R_MIN, R_ANY, R_ALL, R_NUM } rkind;
typedef kiln_tensor *(*reduce_fn)(const char *, int, kiln_tensor *, int, const int64_t *, int);
static const reduce_fn reducers[R_NUM] = {kiln_sum_dims_at, kiln_mean_dims_at, kiln_prod_dims_at, kiln_max_dims_at,
                                          kiln_min_dims_at, kiln_any_dims_at, kiln_all_dims_at};

/* The scans P_SCAN draws from (cummax and cummin: values or positions). */
typedef enum { S_CUMSUM, S_CUMPROD, S_LOGCUMSUMEXP, S_CUMMAX, S_CUMMAX_AT, S_CUMMIN, S_CUMMIN_AT, S_NUM_SCANS } skind;

typedef struct {
  pkind kind;
  ir_op op;             /* P_UNARY, P_BINARY, P_SCALAR */
  int a, b, c;          /* operands: earlier instructions (optional ones -1) */
  kiln_dtype dt;        /* leaves: dtype; P_CAST: target */
  shape_t shape;        /* leaves; P_RESHAPE, P_EXPAND: the new shape; P_GATHER, P_SCATTER: the index's */
  int fn;               /* P_REDUCE: rkind; P_ARGREDUCE: 1 for argmin; P_SQUEEZE: 1 for one dim; P_SCAN: skind;
                           P_SCATTER: 1 for scatter_add; P_CONV: 1 for conv2d; P_POOL: 1 for average */
  int dim, keep;        /* dim argument (layer_norm: dims normalized; P_POOL: count_include_pad); keepdim
                           (P_POOL: ceil_mode; P_ATTENTION: is_causal) */
  int mask;             /* P_ATTENTION: the additive mask, or -1 */
  int nv;               /* entries of v */
  int64_t v[2 * KILN_MAX_DIMS];  /* dims, permutation, pads, slice start/stop/step, index, 2nd dim */
  double s, s2;         /* P_SCALAR number, P_FULL and P_PAD value, P_CLAMP bounds, layer_norm eps */
  uint64_t seed;        /* P_DATA; P_GATHER, P_SCATTER: of the index values */
  char index[64];       /* P_INDEX */
} instr;

typedef struct {
  double mag;           /* bound on |value| */
  double err;           /* bound on |implementation - oracle| */
  bool exact;           /* all implementations give these exact bits */
  kiln_dtype dt;
  shape_t shape;
} info;

typedef struct {
  int n;
  instr ins[MAX_INSTR];
  info inf[MAX_INSTR];
  kiln_tensor *t[MAX_INSTR];   /* while generating: the lazy nodes */
  shape_t out;                 /* the shape the first leaves broadcast to */
  uint64_t rng;
} program;

/* ---- building ------------------------------------------------------------- */
/* The views of issue 13 that keep every value (P_SHAPE_OP, in->fn). */
enum { S_REFLECT, S_REPLICATE, S_CIRCULAR, S_ROLL, S_REPEAT, S_TILE, S_INTERLEAVE, S_TRIL, S_TRIU, S_DIAGONAL, S_NUM };

static kiln_tensor *shape_op(const instr *in, kiln_tensor *a) {
  switch (in->fn) {
  case S_REFLECT: return kiln_pad_reflect(a, in->nv, in->v);
  case S_REPLICATE: return kiln_pad_replicate(a, in->nv, in->v);
  case S_CIRCULAR: return kiln_pad_circular(a, in->nv, in->v);
  case S_ROLL: return kiln_roll(a, 1, in->v, in->dim == KILN_MAX_DIMS ? 0 : 1, (int64_t[]){in->dim});
  case S_REPEAT: return kiln_repeat(a, in->nv, in->v);
  case S_TILE: return kiln_tile(a, in->nv, in->v);
  case S_INTERLEAVE: return kiln_repeat_interleave_dim(a, in->v[0], in->dim);
  case S_TRIL: return kiln_tril(a, in->v[0]);
  case S_TRIU: return kiln_triu(a, in->v[0]);
  default: return kiln_diagonal(a, in->v[0], in->dim, (int)in->v[1]);
  }
}

static kiln_tensor *optional(kiln_tensor *const *t, int k) { return k < 0 ? NULL : t[k]; }

/* P_GATHER's int64 index: values in [-size, size) of the gathered dim
 * (v[0]); P_SCATTER's in [0, size) (torch.scatter takes no negative ones). */
static kiln_tensor *gather_index(const instr *in) {
  int64_t v[MAX_NUMEL], n = ir_numel(in->shape.ndim, in->shape.d), size = in->v[0];
  int64_t low = in->kind == P_SCATTER ? 0 : -size;
  uint64_t seed = in->seed;
  for (int64_t k = 0; k < n; k++) v[k] = (int64_t)(tu_next(&seed) % (uint64_t)(size - low)) + low;
  return kiln_from_data(v, KILN_I64, in->shape.ndim, in->shape.d);
}

static kiln_tensor *scan_of(const instr *in, kiln_tensor *a) {
  kiln_tensor *r = NULL;
  switch ((skind)in->fn) {
  case S_CUMSUM: return kiln_cumsum(a, in->dim);
  case S_CUMPROD: return kiln_cumprod(a, in->dim);
  case S_LOGCUMSUMEXP: return kiln_logcumsumexp(a, in->dim);
  case S_CUMMAX: case S_CUMMAX_AT:
    kiln_cummax(a, in->dim, in->fn == S_CUMMAX ? &r : NULL, in->fn == S_CUMMAX ? NULL : &r);
    return r;
  default:
    kiln_cummin(a, in->dim, in->fn == S_CUMMIN ? &r : NULL, in->fn == S_CUMMIN ? NULL : &r);
    return r;
  }
}

static kiln_tensor *instantiate(const instr *in, kiln_tensor *const *t) {
  kiln_tensor *a = in->kind >= P_UNARY ? t[in->a] : NULL;
  switch (in->kind) {
  case P_DATA: return tu_data(in->dt, in->shape.ndim, in->shape.d, in->seed, TU_SMALL);
  case P_FULL: return kiln_full(in->shape.ndim, in->shape.d, in->s, in->dt);
  case P_RAND: return kiln_rand(in->shape.ndim, in->shape.d, in->dt);
  case P_RANDN: return kiln_randn(in->shape.ndim, in->shape.d, in->dt);
  case P_RANDINT: return kiln_randint(-5, 6, in->shape.ndim, in->shape.d, in->dt);
  case P_UNARY: return tu_unary(in->op)(__FILE__, __LINE__, a);
  case P_BINARY: return tu_binary(in->op)(__FILE__, __LINE__, a, t[in->b]);
  case P_SCALAR: return tu_scalar(in->op)(__FILE__, __LINE__, a, in->s);
  case P_WHERE: return kiln_where(a, t[in->b], t[in->c]);
  case P_CLAMP: return kiln_clamp(a, in->s, in->s2);
  case P_CAST: return kiln_cast(a, in->dt);
  case P_RESHAPE: return kiln_reshape(a, in->shape.ndim, in->shape.d);
  case P_PERMUTE: return kiln_permute(a, in->nv, in->v);
  case P_TRANSPOSE: return kiln_transpose(a, in->dim, (int)in->v[0]);
  case P_SLICE: return kiln_slice(a, in->dim, in->v[0], in->v[1], in->v[2]);
  case P_SELECT: return kiln_select(a, in->dim, in->v[0]);
  case P_FLIP: return kiln_flip(a, in->nv, in->v);
  case P_EXPAND: return kiln_expand(a, in->shape.ndim, in->shape.d);
  case P_SQUEEZE: return in->fn ? kiln_squeeze_dim(a, in->dim) : kiln_squeeze(a);
  case P_UNSQUEEZE: return kiln_unsqueeze(a, in->dim);
  case P_PAD: return kiln_pad(a, in->nv, in->v, in->s);
  case P_CAT: return kiln_cat(2, ((kiln_tensor *[]){a, t[in->b]}), in->dim);
  case P_INDEX: return kiln_index(a, in->index);
  case P_GATHER: return kiln_gather(a, in->dim, gather_index(in));
  case P_SHAPE_OP: return shape_op(in, a);
  case P_SCATTER:
    return (in->fn ? kiln_scatter_add_at : kiln_scatter_at)(__FILE__, __LINE__, a, in->dim, gather_index(in), t[in->b]);
  case P_REDUCE: return reducers[in->fn](__FILE__, __LINE__, a, in->nv, in->v, in->keep);
  case P_ARGREDUCE:
    if (in->nv == 0) return in->fn ? kiln_argmin(a) : kiln_argmax(a);
    return in->fn ? kiln_argmin_dim(a, in->v[0], in->keep) : kiln_argmax_dim(a, in->v[0], in->keep);
  case P_SCAN: return scan_of(in, a);
  case P_SOFTMAX: return kiln_softmax(a, in->dim);
  case P_LOG_SOFTMAX: return kiln_log_softmax(a, in->dim);
  case P_LAYER_NORM: return kiln_layer_norm(a, in->dim, optional(t, in->b), optional(t, in->c), in->s);
  case P_MATMUL: return kiln_matmul(a, t[in->b]);
  case P_CONV: {   /* v: stride, padding, dilation (2 each), groups */
    int n = in->fn ? 2 : 1;
    return (in->fn ? kiln_conv2d_at : kiln_conv1d_at)(__FILE__, __LINE__, a, t[in->b], optional(t, in->c), n, in->v,
                                                      n, in->v + 2, n, in->v + 4, in->v[6]);
  }
  case P_POOL:     /* v: kernel, stride, padding, dilation (2 each) */
    if (in->fn) return kiln_avg_pool2d(a, 2, in->v, 2, in->v + 2, 2, in->v + 4, in->keep, in->dim);
    return kiln_max_pool2d(a, 2, in->v, 2, in->v + 2, 2, in->v + 4, 2, in->v + 6, in->keep);
  case P_ATTENTION: return kiln_scaled_dot_product_attention(a, t[in->b], t[in->c], optional(t, in->mask), in->keep, 0, 0);
  default: return kiln_linear(a, t[in->b], optional(t, in->c));
  }
}

/* What a build builds: the program's instructions up to root (the last one,
 * or an earlier value when a failure is narrowed down). */
typedef struct { const program *p; int root; } prefix;

/* tu_build_fn: the instructions again, in order, so random sources draw the
 * same numbers; the result is the root. */
static kiln_tensor *build_prefix(const void *ctx) {
  const prefix *x = ctx;
  kiln_tensor *t[MAX_INSTR];
  for (int k = 0; k <= x->root; k++) t[k] = instantiate(&x->p->ins[k], t);
  return t[x->root];
}

/* ---- drift bounds ----------------------------------------------------------- */
/* Half an ulp relative to the magnitude (0 for integers and bool). */
static double unit(kiln_dtype dt) {
  switch (dt) {
  case KILN_F16: return 0x1p-11;
  case KILN_BF16: return 0x1p-8;
  case KILN_F32: return 0x1p-24;
  case KILN_F64: return 0x1p-53;
  default: return 0;
  }
}

static bool transcendental(ir_op op) {
  return ir_op_has(op, IR_COSTLY);
}

/* Ops that grow like e^x: they only see |x| <= 4. */
static bool exponential(ir_op op) {
  return op == IR_EXP || op == IR_EXPM1 || op == IR_EXP2 || op == IR_SINH || op == IR_COSH;
}

/* Rounding drift of one op's result in half-ulps: a few more for polynomial
 * transcendentals and for results reached through a reciprocal. */
static double rounding_ulps(ir_op op) {
  return transcendental(op) ? 16 : op == IR_SQRT || op == IR_RSQRT || op == IR_RECIPROCAL || op == IR_DIV ? 4 : 2;
}

/* Ops whose result is exact when their operands are. */
static bool keeps_exact(ir_op op) {
  switch (op) {
  case IR_NEG: case IR_ABS: case IR_RELU: case IR_FLOOR: case IR_CEIL: case IR_ROUND: case IR_SIGN:
  case IR_TRUNC: case IR_BITWISE_NOT: case IR_LOGICAL_NOT: case IR_MAXIMUM: case IR_MINIMUM: case IR_EQ: case IR_NE: case IR_LT: case IR_LE:
  case IR_GT: case IR_GE: case IR_LOGICAL_AND: case IR_LOGICAL_OR:
    return true;
  default:
    return false;
  }
}

/* Ops that only take exact operands (their result jumps). */
static bool needs_exact(ir_op op) {
  return op == IR_FLOOR || op == IR_CEIL || op == IR_ROUND || op == IR_SIGN || op == IR_LOGICAL_NOT ||
         op == IR_TRUNC || op == IR_BITWISE_NOT ||
         ir_ops[op].typing == TR_BOOL;
}

/* Magnitude and Lipschitz bound of a unary op on values bounded by m (log,
 * sqrt, rsqrt and reciprocal see operands >= 1). */
static void unary_bounds(ir_op op, double m, double *mag, double *lip) {
  *lip = 1;
  *mag = m;
  switch (op) {
  case IR_EXP: *mag = *lip = exp(m); break;
  case IR_LOG: *mag = log(m); break;
  case IR_SQRT: *mag = sqrt(m), *lip = 0.5; break;
  case IR_RSQRT: *mag = 1, *lip = 0.5; break;
  case IR_SIN: case IR_COS: case IR_TANH: case IR_RECIPROCAL: case IR_LOGICAL_NOT: case IR_SIGN: *mag = 1; break;
  case IR_SIGMOID: *mag = 1, *lip = 0.25; break;
  case IR_GELU: case IR_GELU_TANH: case IR_SILU: *lip = 1.13; break;
  case IR_EXPM1: *mag = *lip = exp(m); break;
  case IR_EXP2: *mag = exp2(m), *lip = M_LN2 * exp2(m); break;
  case IR_SINH: case IR_COSH: *mag = *lip = cosh(m); break;
  case IR_ERF: *mag = 1, *lip = 1.13; break;
  case IR_ERFC: *mag = 2, *lip = 1.13; break;
  case IR_ATAN: *mag = fmin(m, M_PI_2); break;
  case IR_ASINH: *mag = asinh(m); break;
  case IR_LOG1P: *mag = log1p(m), *lip = 0.5; break;
  case IR_LOG2: *mag = log2(m), *lip = 1 / M_LN2; break;
  case IR_LOG10: *mag = log10(m), *lip = 1 / M_LN10; break;
  case IR_FLOOR: case IR_CEIL: case IR_ROUND: case IR_TRUNC: case IR_BITWISE_NOT: *mag = m + 1; break;
  default: break;
  }
}

/* Magnitude and drift of a binary op (b may be a number: err 0). */
static void binary_bounds(ir_op op, const info *a, const info *b, double *mag, double *err) {
  switch (op) {
  case IR_ADD: case IR_SUB: *mag = a->mag + b->mag, *err = a->err + b->err; break;
  case IR_MUL: *mag = a->mag * b->mag, *err = a->err * b->mag + b->err * a->mag + a->err * b->err; break;
  case IR_DIV: *mag = a->mag, *err = a->err + a->mag * b->err; break;   /* |b| >= 1 */
  case IR_MAXIMUM: case IR_MINIMUM: *mag = fmax(a->mag, b->mag), *err = fmax(a->err, b->err); break;
  default: *mag = 1, *err = 0; break;   /* comparisons and logical ops of exact values */
  }
}

/* ---- generation ------------------------------------------------------------- */
static int64_t numel(const shape_t *s) { return ir_numel(s->ndim, s->d); }

/* Appends in, builds it on the lazy graph, records what is known of it:
 * err is the drift inherited from the operands; the op adds its own rounding
 * (ulps half-ulps of the result dtype) plus two for converting operands.
 * exact_if_int: the result is exact when it is an integer or bool. A value
 * whose drift bound would make the comparison meaningless is dropped (-1). */
static int emit(program *p, instr in, double mag, double err, double ulps, bool exact, bool exact_if_int) {
  IR_ASSERT(p->n < MAX_INSTR);
  kiln_tensor *t = instantiate(&in, p->t);
  /* the generator only builds well-typed ops: an error is its own bug */
  ck_assert_msg(kiln_status_of(t) == KILN_OK, "generator built a bad op (kind %d): %s", in.kind, kiln_last_error());
  kiln_dtype dt = kiln_dtype_of(t);
  exact = exact || (exact_if_int && !ir_is_float(dt));
  /* a fused chain may keep a narrow cast in f32: not exact */
  if (in.kind == P_CAST && (dt == KILN_F16 || dt == KILN_BF16)) exact = false;
  err = exact ? 0 : err + (ulps + 2) * unit(dt) * mag;
  if (err > DRIFT_LIMIT * fmax(mag, 1)) return -1;   /* t goes with the generator's scope */
  int k = p->n++;
  p->ins[k] = in;
  p->t[k] = t;
  p->inf[k] = (info){mag, err, exact, dt, {kiln_ndim(t), {0}}};
  memcpy(p->inf[k].shape.d, kiln_shape(t), (size_t)kiln_ndim(t) * sizeof(int64_t));
  return k;
}

static const kiln_dtype leaf_dtypes[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64, KILN_F16, KILN_BOOL};
static const shape_t out_shapes[] = {{1, {1}}, {2, {3, 5}}, {3, {2, 1, 7}}, {2, {0, 3}}, {1, {257}}};

/* A shape that broadcasts to to: leading dims dropped, some dims 1. */
static shape_t sub_shape(program *p, const shape_t *to) {
  shape_t s = {0, {0}};
  int drop = tu_below(&p->rng, 4) || to->ndim == 0 ? 0 : 1 + tu_below(&p->rng, to->ndim);   /* mostly full rank */
  for (int d = drop; d < to->ndim; d++) s.d[s.ndim++] = tu_below(&p->rng, 6) ? to->d[d] : 1;
  return s;
}

/* NumPy broadcasting of a and b into out; false if they do not broadcast. */
static bool broadcast(const shape_t *a, const shape_t *b, shape_t *out) {
  out->ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int d = 0; d < out->ndim; d++) {
    int da = d - (out->ndim - a->ndim), db = d - (out->ndim - b->ndim);
    int64_t x = da >= 0 ? a->d[da] : 1, y = db >= 0 ? b->d[db] : 1;
    if (x != y && x != 1 && y != 1) return false;
    out->d[d] = x == 1 ? y : x;
  }
  return true;
}

/* A leaf that broadcasts to shape to (never dropped: leaves are exact). */
static int gen_leaf(program *p, const shape_t *to) {
  instr in = {.shape = sub_shape(p, to), .seed = tu_next(&p->rng)};
  int pick = tu_below(&p->rng, 10);
  if (pick < 5) {
    in.kind = P_DATA, in.dt = leaf_dtypes[tu_below(&p->rng, 6)];
    return emit(p, in, in.dt == KILN_BOOL ? 1 : 4, 0, 0, true, true);
  }
  if (pick < 7) {
    static const double values[] = {1, -2, 0.5};
    in.kind = P_FULL, in.dt = leaf_dtypes[tu_below(&p->rng, 6)], in.s = values[tu_below(&p->rng, 3)];
    if (!ir_is_float(in.dt)) in.s = trunc(in.s);
    return emit(p, in, fmax(fabs(in.s), 1), 0, 0, true, true);
  }
  if (pick == 7) {
    in.kind = P_RAND, in.dt = (kiln_dtype[]){KILN_F32, KILN_F64, KILN_F16}[tu_below(&p->rng, 3)];
    return emit(p, in, 1, 0, 0, true, true);
  }
  if (pick == 8) {
    in.kind = P_RANDINT, in.dt = tu_below(&p->rng, 2) ? KILN_I32 : KILN_I64;
    return emit(p, in, 5, 0, 0, true, true);
  }
  /* randn: log and cos are polynomials in the kernel; |z| < 9 */
  in.kind = P_RANDN, in.dt = tu_below(&p->rng, 2) ? KILN_F32 : KILN_F64;
  return emit(p, in, 9, 9 * (in.dt == KILN_F32 ? 2e-5 : 1e-12), 0, false, false);
}

/* An operand, usually a recent value so chains grow deep. */
static int pick(program *p) {
  if (tu_below(&p->rng, 10) < 7) return p->n - 1 - tu_below(&p->rng, p->n < 3 ? p->n : 3);
  return tu_below(&p->rng, p->n);
}

/* An operand that broadcasts with shape s: an earlier value if one of a few
 * picks does, a new leaf otherwise. */
static int pick_compatible(program *p, const shape_t *s) {
  shape_t out;
  for (int tries = 0; tries < 8; tries++) {
    int k = pick(p);
    if (broadcast(s, &p->inf[k].shape, &out) && numel(&out) <= MAX_NUMEL) return k;
  }
  return gen_leaf(p, s);
}

/* An exact operand if there is one (-1 otherwise). */
static int pick_exact(program *p) {
  for (int tries = 0; tries < 8; tries++) {
    int k = pick(p);
    if (p->inf[k].exact) return k;
  }
  return -1;
}

static int gen_unary(program *p, ir_op op, int a) {
  const info *x = &p->inf[a];
  double mag, lip;
  unary_bounds(op, x->mag, &mag, &lip);
  if (ir_op_has(op, IR_NOBOOL) && x->dt == KILN_BOOL) return -1;
  if (ir_op_has(op, IR_NOFLOAT) && ir_is_float(x->dt)) return -1;
  if ((exponential(op) && x->mag > 4) || mag > MAG_LIMIT || (needs_exact(op) && !x->exact)) return -1;
  instr in = {.kind = P_UNARY, .op = op, .a = a};
  return emit(p, in, mag, lip * x->err, rounding_ulps(op), x->exact && keeps_exact(op), x->exact);
}

/* |x| + 1 (x is |x| already): an operand >= 1. */
static int add_one(program *p, int a) {
  const info *x = &p->inf[a];
  return emit(p, (instr){.kind = P_SCALAR, .op = IR_ADD, .a = a, .s = 1}, x->mag + 1, x->err,
              rounding_ulps(IR_ADD), false, x->exact);
}

/* f(|x| + 1): log, sqrt, rsqrt, reciprocal away from their poles. */
static int gen_shifted(program *p, ir_op op, int a) {
  if (p->inf[a].dt == KILN_BOOL || p->n + 3 > MAX_INSTR) return -1;
  int abs = gen_unary(p, IR_ABS, a);
  int one = abs < 0 ? -1 : add_one(p, abs);
  return one < 0 ? -1 : gen_unary(p, op, one);
}

static int gen_binary(program *p, ir_op op, int a, int b) {
  const info *x = &p->inf[a], *y = &p->inf[b];
  if (ir_op_has(op, IR_NOBOOL) && (x->dt == KILN_BOOL || y->dt == KILN_BOOL)) return -1;
  if (needs_exact(op) && !(x->exact && y->exact)) return -1;
  double mag, err;
  binary_bounds(op, x, y, &mag, &err);
  if (mag > MAG_LIMIT) return -1;
  bool exact = x->exact && y->exact;
  return emit(p, (instr){.kind = P_BINARY, .op = op, .a = a, .b = b}, mag, err, rounding_ulps(op),
              exact && keeps_exact(op), exact);
}

/* a / (|b| + 1) */
static int gen_div(program *p, int a, int b) {
  if (p->inf[b].dt == KILN_BOOL || p->inf[a].dt == KILN_BOOL || p->n + 3 > MAX_INSTR) return -1;
  int abs = gen_unary(p, IR_ABS, b);
  int one = abs < 0 ? -1 : add_one(p, abs);
  return one < 0 ? -1 : gen_binary(p, IR_DIV, a, one);
}

/* Integer ops on exact integer or bool operands: a division by |b| + 1
 * (never 0), a bitwise op, a shift by 1 or 3. */
static const ir_op int_pool[] = {IR_FLOOR_DIVIDE, IR_TRUNC_DIVIDE, IR_REMAINDER, IR_FMOD, IR_BITWISE_AND,
                                 IR_BITWISE_OR, IR_BITWISE_XOR, IR_LSHIFT, IR_RSHIFT};

static int gen_integer(program *p, ir_op op, int a, int b) {
  const info *x = &p->inf[a], *y = &p->inf[b];
  if (!x->exact || !y->exact || ir_is_float(x->dt) || ir_is_float(y->dt) || p->n + 3 > MAX_INSTR) return -1;
  if (ir_op_has(op, IR_NOBOOL) && (x->dt == KILN_BOOL || y->dt == KILN_BOOL)) return -1;
  if (op == IR_LSHIFT || op == IR_RSHIFT) {
    double s = tu_below(&p->rng, 2) ? 1 : 3, mag = op == IR_LSHIFT ? x->mag * 8 : x->mag;
    if (mag > MAG_LIMIT) return -1;
    return emit(p, (instr){.kind = P_SCALAR, .op = op, .a = a, .s = s}, mag, 0, 0, true, true);
  }
  if (!ir_op_has(op, IR_NOFLOAT)) {   /* a division */
    int abs = gen_unary(p, IR_ABS, b);
    b = abs < 0 ? -1 : add_one(p, abs);
    if (b < 0 || !p->inf[b].exact || ir_is_float(p->inf[b].dt)) return -1;
    y = &p->inf[b];
    x = &p->inf[a];
  }
  double mag = op == IR_REMAINDER || op == IR_FMOD ? y->mag : 2 * fmax(x->mag, y->mag);
  if (mag > MAG_LIMIT) return -1;
  return emit(p, (instr){.kind = P_BINARY, .op = op, .a = a, .b = b}, mag, 0, 0, true, true);
}

static int gen_scalar(program *p, ir_op op, int a) {
  static const double numbers[] = {2, 0.5, -1.5};
  double s = numbers[tu_below(&p->rng, 3)];
  const info *x = &p->inf[a];
  if (ir_op_has(op, IR_NOBOOL) && x->dt == KILN_BOOL) return -1;
  if (needs_exact(op) && !x->exact) return -1;
  info num = {.mag = fabs(s), .exact = true, .dt = tu_number_dtype(s)};
  double mag, err;
  binary_bounds(op, x, &num, &mag, &err);
  if (mag > MAG_LIMIT) return -1;
  return emit(p, (instr){.kind = P_SCALAR, .op = op, .a = a, .s = s}, mag, err, rounding_ulps(op),
              x->exact && keeps_exact(op), x->exact);
}

static int gen_where(program *p) {
  int c = pick_exact(p);
  if (c < 0) return -1;
  if (p->inf[c].dt != KILN_BOOL) {   /* a condition from an exact value */
    c = gen_scalar(p, IR_GT, c);
    if (c < 0) return -1;
  }
  shape_t s;
  int a = pick_compatible(p, &p->inf[c].shape);
  broadcast(&p->inf[c].shape, &p->inf[a].shape, &s);
  int b = pick_compatible(p, &s);
  const info *x = &p->inf[a], *y = &p->inf[b];
  return emit(p, (instr){.kind = P_WHERE, .a = c, .b = a, .c = b}, fmax(x->mag, y->mag),
              fmax(x->err, y->err), 0, x->exact && y->exact, false);
}

static int gen_clamp(program *p, int a) {
  static const double bounds[][2] = {{-2, 2}, {0, 3}, {-1.5, 2.5}};
  const double *bd = bounds[tu_below(&p->rng, 3)];
  const info *x = &p->inf[a];
  if (x->dt == KILN_BOOL) return -1;
  return emit(p, (instr){.kind = P_CLAMP, .a = a, .s = bd[0], .s2 = bd[1]}, fmin(x->mag, 3), x->err, 0,
              x->exact, false);
}

static int gen_cast(program *p, int a) {
  kiln_dtype to = leaf_dtypes[tu_below(&p->rng, 6)];
  const info *x = &p->inf[a];
  if (!ir_is_float(to) && ir_is_float(x->dt) && !x->exact) return -1;
  double mag = to == KILN_BOOL ? 1 : x->mag;
  return emit(p, (instr){.kind = P_CAST, .a = a, .dt = to}, mag, x->err, 0, x->exact, false);
}

static const ir_op unary_pool[] = {IR_NEG, IR_ABS, IR_EXP, IR_SIN, IR_COS, IR_TANH, IR_SIGMOID, IR_RELU,
                                   IR_GELU, IR_GELU_TANH, IR_SILU, IR_FLOOR, IR_CEIL, IR_ROUND, IR_SIGN,
                                   IR_LOGICAL_NOT, IR_TRUNC, IR_BITWISE_NOT, IR_ERF, IR_ERFC, IR_EXPM1, IR_EXP2,
                                   IR_ATAN, IR_SINH, IR_COSH, IR_ASINH};
static const ir_op shifted_pool[] = {IR_LOG, IR_SQRT, IR_RSQRT, IR_RECIPROCAL, IR_LOG1P, IR_LOG2, IR_LOG10};
static const ir_op binary_pool[] = {IR_ADD, IR_SUB, IR_MUL, IR_MAXIMUM, IR_MINIMUM, IR_EQ, IR_NE,
                                    IR_LT, IR_LE, IR_GT, IR_GE, IR_LOGICAL_AND, IR_LOGICAL_OR};
#define POOL(x) x[tu_below(&p->rng, (int)(sizeof x / sizeof *x))]

/* ---- movement ------------------------------------------------------------------ */
/* A dim of a value of rank nd (nd >= 1), as often negative as not. */
static int rand_dim(program *p, int nd) {
  int d = tu_below(&p->rng, nd);
  return tu_below(&p->rng, 2) ? d - nd : d;
}

/* Views keep their source's values: same bounds, same exactness. */
static int emit_view(program *p, instr in) {
  const info *x = &p->inf[in.a];
  return emit(p, in, x->mag, x->err, 0, x->exact, false);
}

/* The same elements as a new shape: flattened, dims reversed (a real
 * reinterpretation), two neighbours merged, or a 1 inserted; one size may
 * be given as -1. A reshape of a permuted or sliced view must copy. */
static int gen_reshape(program *p, int a) {
  const shape_t *s = &p->inf[a].shape;
  instr in = {.kind = P_RESHAPE, .a = a, .shape = {0, {0}}};
  int how = tu_below(&p->rng, 4), at = s->ndim > 1 ? tu_below(&p->rng, s->ndim - 1) : 0;
  if (how == 0 || s->ndim < 2) in.shape.d[in.shape.ndim++] = numel(s);
  for (int d = 0; how > 0 && s->ndim >= 2 && d < s->ndim; d++) {
    if (how == 1) in.shape.d[in.shape.ndim++] = s->d[s->ndim - 1 - d];
    else if (how == 2 && d == at + 1) in.shape.d[in.shape.ndim - 1] *= s->d[d];
    else in.shape.d[in.shape.ndim++] = s->d[d];
    if (how == 3 && d == at && in.shape.ndim < MAX_RANK) in.shape.d[in.shape.ndim++] = 1;
  }
  if (numel(s) > 0 && tu_below(&p->rng, 3) == 0) in.shape.d[tu_below(&p->rng, in.shape.ndim)] = -1;
  return emit_view(p, in);
}

static int gen_permute(program *p, int a) {
  int nd = p->inf[a].shape.ndim;
  if (nd < 2) return -1;
  instr in = {.kind = P_PERMUTE, .a = a, .nv = nd};
  for (int d = 0; d < nd; d++) in.v[d] = d;
  for (int d = nd - 1; d > 0; d--) {   /* Fisher-Yates */
    int j = tu_below(&p->rng, d + 1);
    int64_t x = in.v[d];
    in.v[d] = in.v[j], in.v[j] = x;
  }
  return emit_view(p, in);
}

static int gen_transpose(program *p, int a) {
  int nd = p->inf[a].shape.ndim;
  if (nd < 1) return -1;
  instr in = {.kind = P_TRANSPOSE, .a = a, .dim = rand_dim(p, nd), .v = {rand_dim(p, nd)}};
  return emit_view(p, in);
}

/* Python slice bounds that clamp, count from the end, and step. */
static int gen_slice(program *p, int a) {
  static const int64_t starts[] = {1, -2, -100}, stops[] = {KILN_END, -1, 100}, steps[] = {1, 2};
  int nd = p->inf[a].shape.ndim;
  if (nd < 1) return -1;
  instr in = {.kind = P_SLICE, .a = a, .dim = rand_dim(p, nd), .nv = 3};
  in.v[0] = POOL(starts), in.v[1] = POOL(stops), in.v[2] = POOL(steps);
  return emit_view(p, in);
}

static int gen_select(program *p, int a) {
  const shape_t *s = &p->inf[a].shape;
  if (s->ndim < 1) return -1;
  instr in = {.kind = P_SELECT, .a = a, .dim = rand_dim(p, s->ndim), .nv = 1};
  int64_t size = s->d[in.dim < 0 ? in.dim + s->ndim : in.dim];
  if (size == 0) return -1;
  in.v[0] = (int64_t)tu_below(&p->rng, (int)(2 * size)) - size;   /* [-size, size) */
  return emit_view(p, in);
}

static int gen_flip(program *p, int a) {
  int nd = p->inf[a].shape.ndim;
  instr in = {.kind = P_FLIP, .a = a};
  for (int d = 0; d < nd; d++)
    if (tu_below(&p->rng, 2)) in.v[in.nv++] = tu_below(&p->rng, 2) ? d - nd : d;
  return in.nv ? emit_view(p, in) : -1;
}

/* Size-1 dims grow to 3 and a leading dim of 2 may appear; -1 keeps a size. */
static int gen_expand(program *p, int a) {
  const shape_t *s = &p->inf[a].shape;
  instr in = {.kind = P_EXPAND, .a = a, .shape = {0, {0}}};
  if (tu_below(&p->rng, 2) && s->ndim < MAX_RANK) in.shape.d[in.shape.ndim++] = 2;
  for (int d = 0; d < s->ndim; d++)
    in.shape.d[in.shape.ndim++] = s->d[d] == 1 && tu_below(&p->rng, 2) ? 3 : tu_below(&p->rng, 2) ? -1 : s->d[d];
  shape_t out = in.shape;
  for (int d = 0; d < s->ndim; d++)
    if (out.d[out.ndim - s->ndim + d] == -1) out.d[out.ndim - s->ndim + d] = s->d[d];
  return numel(&out) <= MAX_NUMEL ? emit_view(p, in) : -1;
}

static int gen_squeeze(program *p, int a) {
  int nd = p->inf[a].shape.ndim;
  instr in = {.kind = P_SQUEEZE, .a = a, .fn = nd > 0 && tu_below(&p->rng, 2)};
  if (in.fn) in.dim = rand_dim(p, nd);
  return emit_view(p, in);
}

static int gen_unsqueeze(program *p, int a) {
  int nd = p->inf[a].shape.ndim;
  if (nd >= MAX_RANK) return -1;
  return emit_view(p, (instr){.kind = P_UNSQUEEZE, .a = a, .dim = rand_dim(p, nd + 1)});
}

/* Constant padding of the last one or two dims; negative amounts crop. The
 * value is one the dtype holds exactly. */
static int gen_pad(program *p, int a) {
  static const int64_t amounts[] = {-1, 0, 2};
  const info *x = &p->inf[a];
  const shape_t *s = &x->shape;
  if (s->ndim < 1) return -1;
  instr in = {.kind = P_PAD, .a = a, .nv = s->ndim >= 2 && tu_below(&p->rng, 2) ? 4 : 2};
  for (int i = 0; i < in.nv; i += 2) {
    in.v[i] = POOL(amounts), in.v[i + 1] = POOL(amounts);
    if (s->d[s->ndim - 1 - i / 2] + in.v[i] + in.v[i + 1] < 0) return -1;
  }
  in.s = x->dt == KILN_BOOL ? 1 : ir_is_float(x->dt) ? -1.5 : 3;
  if (tu_below(&p->rng, 2)) in.s = 0;
  shape_t out = *s;
  for (int i = 0; i < in.nv; i += 2) out.d[s->ndim - 1 - i / 2] += in.v[i] + in.v[i + 1];
  if (numel(&out) > MAX_NUMEL) return -1;
  return emit(p, in, fmax(x->mag, fabs(in.s)), x->err, 0, x->exact, false);
}

/* a with itself or with a leaf of any dtype (cat promotes) whose size along
 * dim is 0, 1 or 2. */
static int gen_cat(program *p, int a) {
  const shape_t *s = &p->inf[a].shape;
  if (s->ndim < 1 || 2 * numel(s) > MAX_NUMEL) return -1;
  instr in = {.kind = P_CAT, .a = a, .b = a, .dim = rand_dim(p, s->ndim)};
  if (tu_below(&p->rng, 2)) {
    instr leaf = {.kind = P_DATA, .dt = POOL(leaf_dtypes), .shape = *s, .seed = tu_next(&p->rng)};
    leaf.shape.d[in.dim < 0 ? in.dim + s->ndim : in.dim] = tu_below(&p->rng, 3);
    in.b = emit(p, leaf, leaf.dt == KILN_BOOL ? 1 : 4, 0, 0, true, true);
  }
  const info *x = &p->inf[a], *y = &p->inf[in.b];
  return emit(p, in, fmax(x->mag, y->mag), fmax(x->err, y->err), 0, x->exact && y->exact, false);
}

/* NumPy basic indexing of the leading (or, after "...", trailing) dims, with
 * a None now and then; integer items only where the dim has the element. */
static int gen_index(program *p, int a) {
  static const char *const slices[] = {":", "::2", "1:", "-2::2"};
  static const struct { const char *text; int64_t need; } ints[] = {{"0", 1}, {"-1", 1}, {"1", 2}};
  const shape_t *s = &p->inf[a].shape;
  instr in = {.kind = P_INDEX, .a = a};
  int items = tu_below(&p->rng, s->ndim + 1), trailing = tu_below(&p->rng, 3) == 0, len = 0;
  if (trailing) len += snprintf(in.index + len, sizeof in.index - (size_t)len, "..., ");
  for (int i = 0; i < items; i++) {
    int d = trailing ? s->ndim - items + i : i;
    const char *item = POOL(slices);
    if (tu_below(&p->rng, 3) == 0) {
      int k = tu_below(&p->rng, 3);
      if (s->d[d] >= ints[k].need) item = ints[k].text;
    }
    if (tu_below(&p->rng, 6) == 0 && s->ndim < MAX_RANK) len += snprintf(in.index + len, sizeof in.index - (size_t)len, "None, ");
    len += snprintf(in.index + len, sizeof in.index - (size_t)len, "%s, ", item);
  }
  if (len == 0) snprintf(in.index, sizeof in.index, "...");   /* every dim */
  else in.index[len - 2] = '\0';   /* the last ", " */
  return emit_view(p, in);
}

/* torch.gather along a random dim: 1 to 3 indices there (negative ones
 * too), the other dims kept or cut to 1. */
static int gen_gather(program *p, int a) {
  const shape_t *s = &p->inf[a].shape;
  if (s->ndim < 1) return -1;
  instr in = {.kind = P_GATHER, .a = a, .dim = tu_below(&p->rng, s->ndim), .shape = *s, .nv = 1, .seed = tu_next(&p->rng)};
  in.v[0] = s->d[in.dim];
  if (in.v[0] == 0) return -1;
  for (int d = 0; d < s->ndim; d++)
    if (d == in.dim) in.shape.d[d] = 1 + tu_below(&p->rng, 3);
    else if (tu_below(&p->rng, 4) == 0) in.shape.d[d] = s->d[d] ? 1 : 0;
  return numel(&in.shape) <= MAX_NUMEL ? emit_view(p, in) : -1;
}

/* torch.scatter or scatter_add into a along a random dim: an index of 1 to
 * 3 positions there (repeats likely: the later write wins, or all add up in
 * order), the other dims kept or cut to 1, and values from a leaf of the
 * index's shape. A sum of up to that many values and a's drifts by their
 * roundings; a plain scatter moves values. */
static int gen_scatter(program *p, int a) {
  const info *x = &p->inf[a];
  const shape_t *s = &x->shape;
  if (s->ndim < 1 || x->dt == KILN_BOOL) return -1;
  instr in = {.kind = P_SCATTER, .a = a, .fn = tu_below(&p->rng, 2), .dim = tu_below(&p->rng, s->ndim), .shape = *s,
              .nv = 1, .seed = tu_next(&p->rng)};
  in.v[0] = s->d[in.dim];
  if (in.v[0] == 0) return -1;
  for (int d = 0; d < s->ndim; d++)
    if (d == in.dim) in.shape.d[d] = 1 + tu_below(&p->rng, 3);
    else if (tu_below(&p->rng, 4) == 0) in.shape.d[d] = s->d[d] ? 1 : 0;
  if (numel(&in.shape) > MAX_NUMEL) return -1;
  in.b = emit(p, (instr){.kind = P_DATA, .dt = x->dt, .shape = in.shape, .seed = tu_next(&p->rng)}, 4, 0, 0, true, true);
  if (in.b < 0) return -1;
  double adds = (double)in.shape.d[in.dim];
  if (!in.fn) return emit(p, in, fmax(x->mag, 4), x->err, 0, x->exact, false);
  return emit(p, in, x->mag + 4 * adds, x->err, adds, false, true);
}

/* Pads of the last dim by 0-2 (reflect: below its size), rolls, repeats
 * and tiles of 1-2, tril/triu, diagonals: views that move values, never
 * change them. */
static int gen_shape_op(program *p, int a) {
  const shape_t *s = &p->inf[a].shape;
  if (s->ndim < 1 || 4 * numel(s) > MAX_NUMEL) return -1;
  int64_t last = s->d[s->ndim - 1];
  instr in = {.kind = P_SHAPE_OP, .a = a, .fn = tu_below(&p->rng, S_NUM), .dim = rand_dim(p, s->ndim)};
  int64_t room = in.fn == S_REFLECT ? last - 1 : in.fn == S_CIRCULAR ? last : in.fn == S_REPLICATE && last ? 2 : 0;
  switch (in.fn) {
  case S_REFLECT: case S_REPLICATE: case S_CIRCULAR:
    if (room <= 0) return -1;
    in.nv = 2;
    in.v[0] = tu_below(&p->rng, (int)(room < 2 ? room : 2) + 1), in.v[1] = tu_below(&p->rng, (int)(room < 2 ? room : 2) + 1);
    break;
  case S_ROLL:
    in.v[0] = (int64_t)tu_below(&p->rng, 7) - 3;
    if (tu_below(&p->rng, 3) == 0) in.dim = KILN_MAX_DIMS;   /* the flattened tensor */
    break;
  case S_REPEAT: case S_TILE:
    in.nv = in.fn == S_REPEAT || tu_below(&p->rng, 2) ? s->ndim : 1;
    for (int i = 0; i < in.nv; i++) in.v[i] = 1;
    in.v[tu_below(&p->rng, in.nv)] = 2;
    break;
  case S_INTERLEAVE: in.v[0] = 1 + tu_below(&p->rng, 2); break;
  case S_TRIL: case S_TRIU: if (s->ndim < 2) return -1; in.v[0] = (int64_t)tu_below(&p->rng, 5) - 2; break;
  default:
    if (s->ndim < 2) return -1;
    in.v[0] = (int64_t)tu_below(&p->rng, 5) - 2;
    do in.v[1] = rand_dim(p, s->ndim); while ((in.v[1] - in.dim) % s->ndim == 0);
  }
  return emit_view(p, in);
}

static int (*const movement_gens[])(program *, int) = {
  gen_reshape, gen_permute, gen_transpose, gen_slice, gen_select, gen_flip,
  gen_expand, gen_squeeze, gen_unsqueeze, gen_pad, gen_cat, gen_index, gen_gather, gen_shape_op, gen_scatter,
};

/* ---- reductions ------------------------------------------------------------------ */
/* Random dims of x for a reduction into in->v (none: every dim); returns how
 * many elements each output element folds. */
static int64_t gen_dims(program *p, const shape_t *s, instr *in) {
  in->nv = 0;
  if (s->ndim > 0 && tu_below(&p->rng, 4))
    for (int d = 0; d < s->ndim; d++)
      if (tu_below(&p->rng, 2)) in->v[in->nv++] = tu_below(&p->rng, 2) ? d - s->ndim : d;
  int64_t n = 1;
  for (int d = 0; d < s->ndim; d++) {
    bool reduced = in->nv == 0;
    for (int i = 0; i < in->nv; i++) reduced |= in->v[i] == d || in->v[i] == d - s->ndim;
    if (reduced) n *= s->d[d];
  }
  return n;
}

/* sum, mean, prod, max, min, any, all over random dims. A sum of n values
 * drifts by n times theirs plus n roundings of the result's size (in any
 * order); prod is only drawn where it stays small. */
static int gen_reduce(program *p, int a) {
  const info *x = &p->inf[a];
  instr in = {.kind = P_REDUCE, .a = a, .fn = tu_below(&p->rng, R_NUM), .keep = tu_below(&p->rng, 2)};
  double n = (double)gen_dims(p, &x->shape, &in), m = fmax(x->mag, 1);
  bool fl = ir_is_float(x->dt);
  switch ((rkind)in.fn) {
  case R_SUM: return n * x->mag > MAG_LIMIT ? -1 : emit(p, in, n * x->mag, n * x->err, n, false, true);
  case R_MEAN: return fl ? emit(p, in, x->mag, x->err, n + 2, false, false) : -1;
  case R_PROD:
    if (pow(m, n) > MAG_LIMIT) return -1;
    return emit(p, in, pow(m, n), n * x->err * pow(m, n - 1), n, false, true);
  case R_MAX: case R_MIN: return n == 0 ? -1 : emit(p, in, x->mag, x->err, 0, x->exact, false);
  default: return x->exact ? emit(p, in, 1, 0, 0, true, false) : -1;   /* any, all */
  }
}

/* argmax/argmin over one dim or every element: the first extreme, so only of
 * exact values. */
static int gen_argreduce(program *p, int a) {
  const info *x = &p->inf[a];
  if (!x->exact || x->dt == KILN_BOOL || numel(&x->shape) == 0) return -1;
  instr in = {.kind = P_ARGREDUCE, .a = a, .fn = tu_below(&p->rng, 2), .keep = tu_below(&p->rng, 2)};
  double n = (double)numel(&x->shape);
  if (x->shape.ndim > 0 && tu_below(&p->rng, 3)) {
    int d = tu_below(&p->rng, x->shape.ndim);
    in.nv = 1, in.v[0] = tu_below(&p->rng, 2) ? d - x->shape.ndim : d, n = (double)x->shape.d[d];
  }
  return emit(p, in, n, 0, 0, true, true);
}

/* A scan along a random dim of n elements: a running sum drifts as a sum
 * of n values, a product is drawn only where it stays small, logcumsumexp
 * moves by its input's drift plus n roundings; running extremes are exact
 * when their input is, their positions (ties!) only then. */
static int gen_scan(program *p, int a) {
  const info *x = &p->inf[a];
  int nd = x->shape.ndim;
  instr in = {.kind = P_SCAN, .a = a, .fn = tu_below(&p->rng, S_NUM_SCANS), .dim = rand_dim(p, nd > 0 ? nd : 1)};
  double n = nd == 0 ? 1 : (double)x->shape.d[in.dim < 0 ? in.dim + nd : in.dim], m = fmax(x->mag, 1);
  switch ((skind)in.fn) {
  case S_CUMSUM: return n * x->mag > MAG_LIMIT ? -1 : emit(p, in, n * x->mag, n * x->err, n, false, true);
  case S_CUMPROD:
    if (pow(m, n) > MAG_LIMIT) return -1;
    return emit(p, in, pow(m, n), n * x->err * pow(m, n - 1), n, false, true);
  case S_LOGCUMSUMEXP:
    if (!ir_is_float(x->dt)) return -1;
    return emit(p, in, x->mag + log(n > 1 ? n : 1), x->err, n + 24, false, false);
  case S_CUMMAX: case S_CUMMIN: return emit(p, in, x->mag, x->err, 0, x->exact, false);
  default: return x->exact ? emit(p, in, n, 0, 0, true, true) : -1;
  }
}

/* softmax or log_softmax of a float value along a dim. Each
 * output moves by at most twice the input's drift (softmax by a factor
 * e^(2 err)); roundings: exp, the row sum (n), the division or log. */
static int gen_softmax(program *p, int a) {
  const info *x = &p->inf[a];
  if (!ir_is_float(x->dt)) return -1;
  int nd = x->shape.ndim;
  instr in = {.kind = tu_below(&p->rng, 2) ? P_SOFTMAX : P_LOG_SOFTMAX, .a = a, .dim = rand_dim(p, nd > 0 ? nd : 1)};
  double n = nd == 0 ? 1 : (double)x->shape.d[in.dim < 0 ? in.dim + nd : in.dim];
  double mag = in.kind == P_SOFTMAX ? 1 : 2 * x->mag + log(n > 0 ? n : 1);
  return emit(p, in, mag, 2 * x->err, n + 24, false, false);
}

/* layer_norm over the last one or two dims, with weight and bias leaves of
 * the normalized shape or without. With z = x - mean and s = sqrt(var + eps),
 * |z / s| <= sqrt(n) and a drift e of x moves z/s by at most (2 + 2n) e / s,
 * s >= sqrt(eps): a small eps only passes the drift limit for exact inputs
 * of a wide dtype. */
static int gen_layer_norm(program *p, int a) {
  const info *x = &p->inf[a];
  int nd = x->shape.ndim;
  if (!ir_is_float(x->dt) || nd < 1) return -1;
  instr in = {.kind = P_LAYER_NORM, .a = a, .b = -1, .c = -1, .dim = 1 + tu_below(&p->rng, nd < 2 ? 1 : 2)};
  in.s = tu_below(&p->rng, 2) ? 1e-5 : 1.0;
  shape_t norm = {in.dim, {0}};
  memcpy(norm.d, x->shape.d + nd - in.dim, (size_t)in.dim * sizeof(int64_t));
  double n = (double)numel(&norm);
  if (n == 0) return -1;
  double lip = (2 + 2 * n) / sqrt(in.s), mag = sqrt(n), err = lip * (x->err + (n + 8) * unit(x->dt) * x->mag);
  if (tu_below(&p->rng, 2)) {
    instr leaf = {.kind = P_DATA, .dt = x->dt, .shape = norm, .seed = tu_next(&p->rng)};
    in.b = emit(p, leaf, 4, 0, 0, true, true);
    in.c = tu_below(&p->rng, 2) ? emit(p, (leaf.seed = tu_next(&p->rng), leaf), 4, 0, 0, true, true) : -1;
    err = 4 * err + (in.c >= 0 ? 4 : 2) * unit(x->dt) * 4 * mag;
    mag = 4 * mag + (in.c >= 0 ? 4 : 0);
  }
  return emit(p, in, mag, err, 8, false, false);
}

/* ---- matrix products -------------------------------------------------------------- */
/* A data leaf of x's dtype, either of shape s or of s's last two dims
 * swapped and then transposed back (a non-contiguous operand), sometimes
 * flipped along its last dim. */
static int gen_operand(program *p, kiln_dtype dt, shape_t s) {
  bool swap = s.ndim >= 2 && tu_below(&p->rng, 2);
  if (swap) {
    int64_t t = s.d[s.ndim - 1];
    s.d[s.ndim - 1] = s.d[s.ndim - 2], s.d[s.ndim - 2] = t;
  }
  int k = emit(p, (instr){.kind = P_DATA, .dt = dt, .shape = s, .seed = tu_next(&p->rng)}, 4, 0, 0, true, true);
  if (swap) k = emit_view(p, (instr){.kind = P_TRANSPOSE, .a = k, .dim = -1, .v = {-2}});
  /* reversed rows: a stride of -1 (CUDA copies such an operand first) */
  return tu_below(&p->rng, 4) ? k : emit_view(p, (instr){.kind = P_FLIP, .a = k, .nv = 1, .v = {-1}});
}

/* x @ y with contraction length kd: each output is a dot product of kd
 * terms, drifting like a sum of them. */
static int emit_product(program *p, instr in, double kd, double bias_mag) {
  const info *x = &p->inf[in.a], *y = &p->inf[in.b];
  double mag = kd * x->mag * y->mag + bias_mag;
  if (mag > MAG_LIMIT) return -1;
  double err = kd * (x->err * y->mag + y->err * x->mag + x->err * y->err);
  return emit(p, in, mag, err, kd + 2, false, false);
}

/* matmul of a float value: with a leaf on either side (batch dims
 * broadcast, 1-D operands promoted), with its own transpose (a Gram matrix,
 * or a dot product of a vector with itself), or linear(x, W, b). */
static int gen_matmul(program *p, int a) {
  static const int64_t sizes[] = {1, 3, 5};
  const info *x = &p->inf[a];
  int nd = x->shape.ndim;
  if (!ir_is_float(x->dt) || nd < 1) return -1;
  int64_t k = x->shape.d[nd - 1];
  instr in = {.kind = P_MATMUL, .a = a, .c = -1};
  switch (tu_below(&p->rng, 4)) {
  case 0:   /* x @ [K, N] or x @ [K] */
    in.b = gen_operand(p, x->dt, tu_below(&p->rng, 3) ? (shape_t){2, {k, POOL(sizes)}} : (shape_t){1, {k}});
    break;
  case 1:   /* x @ x^T */
    in.b = nd == 1 ? a : emit_view(p, (instr){.kind = P_TRANSPOSE, .a = a, .dim = -1, .v = {-2}});
    break;
  case 2:   /* [M, K] @ x, K from x's rows (its only dim when 1-D) */
    k = x->shape.d[nd >= 2 ? nd - 2 : 0];
    in.b = a;
    in.a = gen_operand(p, x->dt, (shape_t){2, {POOL(sizes), k}});
    break;
  default: {   /* linear(x, W [N, K], b [N]) */
    int64_t n = POOL(sizes);
    in.kind = P_LINEAR;
    in.b = gen_operand(p, x->dt, (shape_t){2, {n, k}});
    if (tu_below(&p->rng, 2)) in.c = emit(p, (instr){.kind = P_DATA, .dt = x->dt, .shape = {1, {n}}, .seed = tu_next(&p->rng)}, 4, 0, 0, true, true);
  }
  }
  if (in.a < 0 || in.b < 0) return -1;
  return emit_product(p, in, (double)k, in.c >= 0 ? 4 : 0);
}

/* ---- convolution, pooling, attention -------------------------------------------- */
/* a with leading dims of 1 until it has rank r (a view). */
static int at_least_rank(program *p, int a, int r) {
  while (a >= 0 && p->inf[a].shape.ndim < r) a = emit_view(p, (instr){.kind = P_UNSQUEEZE, .a = a, .dim = 0});
  return a;
}

/* A window of kernel k, dilation d, padding pad over n: one of size 1 when
 * the drawn one does not fit even once. */
static void fit_window(int64_t n, int64_t *k, int64_t pad, int64_t *d) {
  if (n + 2 * pad - *d * (*k - 1) - 1 < 0) *k = 1, *d = 1;
}

/* conv1d of (N, C, L) or conv2d of (N, C, H, W) or (C, H, W): a weight leaf,
 * sometimes a bias, groups 1 or depthwise; each output is a dot product of
 * C/groups * kernel taps, drifting like a matrix product of that depth. */
static int gen_conv(program *p, int a) {
  if (!ir_is_float(p->inf[a].dt)) return -1;
  a = at_least_rank(p, a, 3);
  if (a < 0 || p->inf[a].shape.ndim > 4 || numel(&p->inf[a].shape) == 0) return -1;
  const shape_t *x = &p->inf[a].shape;
  int nd = x->ndim, two = nd == 4 || tu_below(&p->rng, 2), sp = two ? 2 : 1;
  int64_t c = x->d[nd - 1 - sp], groups = c > 1 && tu_below(&p->rng, 3) == 0 ? c : 1;
  int64_t out = groups > 1 ? c * (1 + tu_below(&p->rng, 2)) : 1 + tu_below(&p->rng, 3), k[2] = {1, 1};
  instr in = {.kind = P_CONV, .a = a, .c = -1, .fn = two, .v = {[6] = groups}};
  for (int i = 0; i < sp; i++) {
    k[i] = 1 + tu_below(&p->rng, 3);
    in.v[i] = 1 + tu_below(&p->rng, 2), in.v[2 + i] = tu_below(&p->rng, 2), in.v[4 + i] = 1 + tu_below(&p->rng, 2);
    fit_window(x->d[nd - sp + i], &k[i], in.v[2 + i], &in.v[4 + i]);
  }
  shape_t w = {2 + sp, {out, c / groups, k[0], k[1]}};
  in.b = emit(p, (instr){.kind = P_DATA, .dt = p->inf[a].dt, .shape = w, .seed = tu_next(&p->rng)}, 4, 0, 0, true, true);
  if (tu_below(&p->rng, 2))
    in.c = emit(p, (instr){.kind = P_DATA, .dt = p->inf[a].dt, .shape = {1, {out}}, .seed = tu_next(&p->rng)}, 4, 0, 0,
                true, true);
  return emit_product(p, in, (double)(c / groups * k[0] * k[1]), in.c >= 0 ? 4 : 0);
}

/* max_pool2d (dilated) or avg_pool2d (count_include_pad or not) of the last
 * two dims of a float (C, H, W) or (N, C, H, W) value, ceil_mode or not,
 * padding at most half the window as torch requires. A maximum keeps its
 * input's bits; an average drifts by its rounding. */
static int gen_pool(program *p, int a) {
  if (!ir_is_float(p->inf[a].dt)) return -1;
  a = at_least_rank(p, a, 3);
  if (a < 0 || p->inf[a].shape.ndim > 4 || numel(&p->inf[a].shape) == 0) return -1;
  const info *x = &p->inf[a];
  instr in = {.kind = P_POOL, .a = a, .fn = tu_below(&p->rng, 2), .keep = tu_below(&p->rng, 2),
              .dim = tu_below(&p->rng, 2)};
  for (int i = 0; i < 2; i++) {
    int64_t n = x->shape.d[x->shape.ndim - 2 + i], *k = &in.v[i], *d = &in.v[6 + i];
    *k = 1 + tu_below(&p->rng, 3), *d = in.fn ? 1 : 1 + tu_below(&p->rng, 2);
    in.v[2 + i] = tu_below(&p->rng, 2) ? *k : 1 + tu_below(&p->rng, 2);   /* stride */
    in.v[4 + i] = tu_below(&p->rng, (int)(*k / 2 + 1));                   /* padding */
    fit_window(n, k, in.v[4 + i], d);
    if (in.v[4 + i] > *k / 2) in.v[4 + i] = 0;
  }
  if (in.fn) return emit(p, in, x->mag, x->err, (double)(in.v[0] * in.v[1] + 2), false, false);
  return emit(p, in, x->mag, x->err, 0, x->exact, false);
}

/* scaled_dot_product_attention with x as the queries (..., L, E): keys (a
 * possibly transposed or flipped leaf) and values of S positions with x's
 * batch dims; causal, an additive (L, S) mask, or neither. The output is a
 * convex combination of values (|v| <= 4); a drift ds of the scores moves
 * the weights by about 2 ds. */
static int gen_attention(program *p, int a) {
  if (!ir_is_float(p->inf[a].dt)) return -1;
  a = at_least_rank(p, a, 2);
  if (a < 0 || numel(&p->inf[a].shape) == 0) return -1;
  static const int64_t sizes[] = {1, 3, 5};
  const info *x = &p->inf[a];
  int nd = x->shape.ndim;
  int64_t e = x->shape.d[nd - 1], l = x->shape.d[nd - 2], s = POOL(sizes);
  shape_t ks = x->shape, vs = x->shape;
  ks.d[nd - 2] = vs.d[nd - 2] = s;
  vs.d[nd - 1] = POOL(sizes);
  instr in = {.kind = P_ATTENTION, .a = a, .mask = -1, .keep = tu_below(&p->rng, 3) == 0};
  in.b = gen_operand(p, x->dt, ks);
  in.c = emit(p, (instr){.kind = P_DATA, .dt = x->dt, .shape = vs, .seed = tu_next(&p->rng)}, 4, 0, 0, true, true);
  if (!in.keep && tu_below(&p->rng, 2))
    in.mask = emit(p, (instr){.kind = P_DATA, .dt = x->dt, .shape = {2, {l, s}}, .seed = tu_next(&p->rng)}, 4, 0, 0,
                   true, true);
  if (in.b < 0 || in.c < 0) return -1;
  double scores = e * x->mag * 4 / sqrt((double)e) + 4;
  double ds = e * x->err * 4 / sqrt((double)e) + (e + 4) * unit(x->dt) * scores;
  return emit(p, in, 4, 8 * ds, (double)(s + e + 24), false, false);
}

static int gen_network(program *p, int a) {
  switch (tu_below(&p->rng, 3)) {
  case 0: return gen_conv(p, a);
  case 1: return gen_pool(p, a);
  default: return gen_attention(p, a);
  }
}

/* One step: an op on earlier values (or -1 when the pick was not valid):
 * about half elementwise, the rest movement, reductions, products and
 * network layers (convolution, pooling, attention). */
static int gen_step(program *p) {
  switch (tu_below(&p->rng, 20)) {
  case 0: case 1: return gen_unary(p, POOL(unary_pool), pick(p));
  case 2: return gen_shifted(p, POOL(shifted_pool), pick(p));
  case 3: case 4: {
    int a = pick(p);
    return gen_binary(p, POOL(binary_pool), a, pick_compatible(p, &p->inf[a].shape));
  }
  case 5: {
    int a = pick(p), kind = tu_below(&p->rng, 3);
    if (kind == 2) return gen_integer(p, POOL(int_pool), a, pick_compatible(p, &p->inf[a].shape));
    return kind ? gen_div(p, a, pick_compatible(p, &p->inf[a].shape)) : gen_scalar(p, POOL(binary_pool), a);
  }
  case 6: return gen_where(p);
  case 7: return gen_clamp(p, pick(p));
  case 8: return gen_cast(p, pick(p));
  case 9: case 10: case 11: case 12: return POOL(movement_gens)(p, pick(p));
  case 13: case 14: case 15: return gen_reduce(p, pick(p));
  case 16: return tu_below(&p->rng, 2) ? gen_argreduce(p, pick(p)) : gen_scan(p, pick(p));
  case 17: return tu_below(&p->rng, 2) ? gen_softmax(p, pick(p)) : gen_layer_norm(p, pick(p));
  case 18: return gen_network(p, pick(p));
  default: return gen_matmul(p, pick(p));
  }
}

/* A random program; its lazy nodes are released by the caller's scope. */
static void generate(program *p, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->rng = seed;
  p->out = out_shapes[tu_below(&p->rng, (int)(sizeof out_shapes / sizeof *out_shapes))];
  int leaves = 2 + tu_below(&p->rng, 3), steps = 3 + tu_below(&p->rng, 10);
  for (int i = 0; i < leaves; i++) gen_leaf(p, &p->out);
  for (int i = 0, tries = 0; i < steps && tries < 80 && p->n < MAX_INSTR - 8; tries++)
    i += gen_step(p) >= 0;
}

/* ---- the test ------------------------------------------------------------------ */
static uint64_t base_seed(void) {
  const char *s = getenv("KILN_TEST_SEED");
  return s && *s ? strtoull(s, NULL, 0) : DEFAULT_SEED;
}

/* The text of the graph of value root, built again lazily (the checked one
 * was realized). */
static char *graph_text(const program *p, int root) {
  kiln_scope_begin();
  int was = kiln_get_eager();
  kiln_set_eager(0);
  kiln_manual_seed(20240611);
  kiln_tensor *t = build_prefix(&(prefix){p, root});
  ir_node **topo;
  int n = ir_graph_collect(1, &t, &topo);
  ir_str b = {0};
  ir_graph_print(&b, n, topo);
  free(topo);
  kiln_set_eager(was);
  kiln_scope_end();
  return b.s;
}

/* Value root of p, fused and eager, against the oracle within twice its
 * drift bound. */
static bool check_value(const program *p, int root, char *why, size_t n) {
  const info *r = &p->inf[root];
  return tu_check_fused_eager(build_prefix, &(prefix){p, root}, r->dt, (ref_tol){0, 2 * r->err}, why, n);
}

#ifdef KILN_TEST_CUDA
/* Every CUDA_EVERY-th graph, and every graph with an attention (a few in a
 * hundred; their CUDA kernel is lowered apart from the CPU's), is also
 * planned for the CUDA back end (no GPU needed): each kernel must be one it
 * takes (cuda_emit, or cuda_gemm_split for a matrix product), and the plan
 * run on the host (the CPU back end, products included) must agree with the
 * oracle. That checks the graph decisions made for CUDA alone
 * (gemm_operands, fuse's grid reductions, no stash, split_reduce or
 * split_scan, the fused attention's row blocks) on random graphs. */
enum { CUDA_EVERY = 4 };

static bool plan_for_cuda(const program *p, int g) {
  for (int k = 0; k < p->n; k++)
    if (p->ins[k].kind == P_ATTENTION) return true;
  return g % CUDA_EVERY == 0;
}

static bool cuda_takes(kernel *k, char *why, size_t n) {
  char *err = NULL;
  bool ok;
  if (tu_has_gemm(k)) {
    cuda_gemm g;
    ok = cuda_gemm_split(k, &g, &err);
    if (ok) cuda_gemm_free(&g);
  } else {
    ir_str src = {0};
    cuda_launch l;
    ok = cuda_emit(k, &src, &l, &err);
    ir_str_free(&src);
  }
  if (!ok) snprintf(why, n, "the CUDA back end refuses kernel %s: %s", k->name, err ? err : "");
  free(err);
  return ok;
}

static bool check_cuda_plan(const program *p, char *why, size_t n) {
  int root = p->n - 1;
  kiln_scope_begin();
  kiln_tensor *t = build_prefix(&(prefix){p, root});
  ref_tensor *want = ref_eval(t);
  rt_graph_plan plan;
  bool ok = rt_plan_graph(KILN_CUDA, 1, &t, &plan) == KILN_OK;
  if (!ok) snprintf(why, n, "CUDA plan: %s", kiln_last_error());
  for (int i = 0; ok && i < plan.g.ngroups; i++) ok = cuda_takes(plan.kernels[i].k, why, n);
  if (ok && plan.g.ngroups > 0) {  /* none: t is a strided view of its data, as on the CPU */
    tu_stored st = {0};
    tu_run_plan(&plan, &st, NULL, NULL);
    ok = ref_check_data(want, tu_stored_data(&st, t), 0, 2 * p->inf[root].err, why, n);
    tu_stored_free(&st);
  }
  rt_graph_plan_free(&plan);
  ref_free(want);
  kiln_scope_end();
  return ok;
}
#endif

/* Generates, checks fused and eager against the oracle; on failure narrows
 * it down to the first value that differs (whose operands all agree) and
 * prints that value's graph. show: print the graph before checking it. */
static bool check_graph(uint64_t seed, int g, bool show) {
  program *p = malloc(sizeof *p);
  IR_ASSERT(p);
  kiln_scope_begin();
  generate(p, seed);
  kiln_scope_end();
  char why[1200];
  if (show) {
    char *text = graph_text(p, p->n - 1);
    fprintf(stderr, "random graph %d (graph seed %#" PRIx64 "):\n%s\n", g, seed, text ? text : "");
    free(text);
  }
  bool ok = check_value(p, p->n - 1, why, sizeof why);
  if (!ok) {
    int first = 0;
    while (first < p->n - 1 && check_value(p, first, why, sizeof why)) first++;
    if (first == p->n - 1) check_value(p, first, why, sizeof why);
    char *text = graph_text(p, first);
    fprintf(stderr, "random graph %d failed (KILN_TEST_SEED=%#" PRIx64 ", graph seed %#" PRIx64
            "): value %d of %d: %s\nallowed drift %g\n%s\n", g, base_seed(), seed, first, p->n, why,
            2 * p->inf[first].err, text ? text : "");
    free(text);
  }
#ifdef KILN_TEST_CUDA
  if (ok && plan_for_cuda(p, g) && !check_cuda_plan(p, why, sizeof why)) {
    char *text = graph_text(p, p->n - 1);
    fprintf(stderr, "random graph %d planned for CUDA failed (KILN_TEST_SEED=%#" PRIx64 ", graph seed %#" PRIx64
            "): %s\n%s\n", g, base_seed(), seed, why, text ? text : "");
    free(text);
    ok = false;
  }
#endif
  free(p);
  return ok;
}

/* What to say when the library dies inside a graph (an internal assertion's
 * abort, a segfault), where no comparison can print it: which graph, and how
 * to print it. */
static char crash_note[256];

static void on_crash(int sig) {
  ssize_t unused = write(STDERR_FILENO, crash_note, strlen(crash_note));
  (void)unused;
  signal(sig, SIG_DFL);
  raise(sig);
}

/* KILN_TEST_GRAPH=g checks graph g alone and prints it first. */
START_TEST(random_graphs) {
  uint64_t st = base_seed();
  const char *only_env = getenv("KILN_TEST_GRAPH");
  int only = only_env && *only_env ? atoi(only_env) : -1;
  fprintf(stderr, "random graphs: KILN_TEST_SEED=%#" PRIx64 "\n", base_seed());
  signal(SIGABRT, on_crash);
  signal(SIGSEGV, on_crash);
  kiln_reset_stats();
  int failed = 0;
  for (int g = 0; g < GRAPHS; g++) {
    uint64_t seed = tu_next(&st);
    if (only >= 0 && g != only) continue;
    snprintf(crash_note, sizeof crash_note, "random graph %d crashed (KILN_TEST_SEED=%#" PRIx64
             "); KILN_TEST_GRAPH=%d prints it\n", g, base_seed(), g);
    failed += !check_graph(seed, g, g == only);
  }
  fprintf(stderr, "random graphs: %llu kernels compiled\n", (unsigned long long)kiln_stats().compiles);
  ck_assert_msg(failed == 0, "%d of %d random graphs differ (see stderr)", failed, GRAPHS);
}
END_TEST

/* The generator must produce what the header promises, or the differential
 * test checks less than it claims. */
START_TEST(generator_covers_its_pool) {
  uint64_t st = base_seed();
  int kinds[P_NUM_KINDS] = {0}, reductions[R_NUM] = {0}, dtypes[KILN_NUM_DTYPES] = {0}, longest = 0;
  int empty = 0, mixed = 0;
  program *p = malloc(sizeof *p);
  IR_ASSERT(p);
  for (int g = 0; g < 200; g++) {
    kiln_scope_begin();
    generate(p, tu_next(&st));
    kiln_scope_end();
    unsigned classes = 0;   /* elementwise, movement, reduction, product */
    for (int k = 0; k < p->n; k++) {
      const instr *in = &p->ins[k];
      kinds[in->kind]++, dtypes[p->inf[k].dt]++, empty += numel(&p->inf[k].shape) == 0;
      if (in->kind == P_REDUCE) reductions[in->fn]++;
      classes |= in->kind >= P_MATMUL ? 8u : in->kind >= P_REDUCE ? 4u : in->kind >= P_RESHAPE ? 2u : in->kind >= P_UNARY;
    }
    mixed += classes == 15;
    if (p->n > longest) longest = p->n;
  }
  free(p);
  for (int k = 0; k < P_NUM_KINDS; k++) ck_assert_msg(kinds[k] > 0, "instruction kind %d never generated", k);
  for (int r = 0; r < R_NUM; r++) ck_assert_msg(reductions[r] > 0, "reduction %d never generated", r);
  for (size_t d = 0; d < sizeof leaf_dtypes / sizeof *leaf_dtypes; d++)
    ck_assert_msg(dtypes[leaf_dtypes[d]] > 0, "dtype %s never generated", ir_dtypes[leaf_dtypes[d]].name);
  ck_assert_int_ge(longest, 12);
  ck_assert_int_gt(empty, 0);
  ck_assert_int_ge(mixed, 10);   /* graphs with all four classes of op */
}
END_TEST

/* ---- random graphs, differentiated ------------------------------------------ *
 * kiln_grad of random smooth graphs over f64 leaves, each checked by the
 * gradient checker (util/gradcheck.c: central differences, then eager
 * mode): elementwise ops (kept smooth or away from their kinks by what
 * they are given), broadcasting, reductions over random dims with and
 * without keepdim, views (transpose, flip, strided slice, pad, reshape,
 * cat), softmax, log_softmax, layer_norm, scans and matrix products with
 * weights of their own. The generator above makes graphs whose values are
 * exact or bounded, not smooth; this one makes graphs that are. */
enum { GRAD_GRAPHS = 60, GRAD_STEPS = 8, GRAD_LEAVES = 6 };

typedef enum { G_UNARY, G_BINARY, G_REDUCE, G_VIEW, G_ROW, G_SCAN, G_MATMUL, G_KINDS } gkind;
typedef struct { gkind kind; int op, a, b, dim; bool keep; } gstep;
typedef struct {
  int nleaves, nsteps;
  gc_input leaf[GRAD_LEAVES];
  gstep step[GRAD_STEPS];
} gprogram;

static kiln_tensor *g_unary(int op, kiln_tensor *x) {
  switch (op) {
  case 0: return kiln_exp(kiln_muls(x, 0.5));
  case 1: return kiln_tanh(x);
  case 2: return kiln_sigmoid(x);
  case 3: return kiln_sin(x);
  case 4: return kiln_softplus(x, 1, 20);
  case 5: return kiln_gelu(x);
  case 6: return kiln_mul(x, x);
  case 7: return kiln_log(kiln_adds(kiln_mul(x, x), 1));
  default: return kiln_atan(x);
  }
}

static kiln_tensor *g_binary(int op, kiln_tensor *a, kiln_tensor *b) {
  switch (op) {
  case 0: return kiln_add(a, b);
  case 1: return kiln_sub(a, b);
  case 2: return kiln_mul(a, b);
  case 3: return kiln_div(a, kiln_adds(kiln_mul(b, b), 1));
  case 4: return kiln_maximum(a, b);
  default: return kiln_pow(kiln_adds(kiln_mul(a, a), 0.5), kiln_tanh(b));
  }
}

static kiln_tensor *g_view(int op, int dim, kiln_tensor *x) {
  int nd = kiln_ndim(x);
  const int64_t *s = kiln_shape(x);
  switch (op) {
  case 0: return nd >= 2 ? kiln_transpose(x, 0, nd - 1) : kiln_flip(x, 1, (const int64_t[]){0});
  case 1: return kiln_flip(x, 1, (const int64_t[]){dim});
  case 2: return kiln_slice(x, dim, 0, s[dim], 2);
  case 3: return kiln_pad(x, 2, ((const int64_t[]){1, 2}), 0.25);
  case 4: return kiln_flatten(x);
  default: return kiln_cat(2, ((kiln_tensor *[]){x, kiln_muls(x, 2)}), dim);
  }
}

static kiln_tensor *g_build(kiln_tensor *const *x, const void *ctx) {
  const gprogram *p = ctx;
  kiln_tensor *v[GRAD_LEAVES + GRAD_STEPS];
  int n = 0;
  for (int i = 0; i < p->nleaves; i++) v[n++] = x[i];
  for (int k = 0; k < p->nsteps; k++) {
    const gstep *st = &p->step[k];
    kiln_tensor *a = v[st->a], *b = v[st->b];
    int dim = kiln_ndim(a) ? st->dim % kiln_ndim(a) : 0;
    switch (st->kind) {
    case G_UNARY: v[n++] = g_unary(st->op, a); break;
    case G_BINARY: v[n++] = g_binary(st->op, a, b); break;
    case G_REDUCE: {
      const int64_t dims[1] = {dim};
      v[n++] = st->op == 0 ? kiln_sum_dims(a, 1, dims, st->keep) : st->op == 1 ? kiln_mean_dims(a, 1, dims, st->keep)
             : st->op == 2 ? kiln_max_dims(a, 1, dims, st->keep) : st->op == 3 ? kiln_prod_dims(kiln_adds(kiln_sigmoid(a), 0.5), 1, dims, st->keep)
             : kiln_logsumexp(a, 1, dims, st->keep);
      break;
    }
    case G_VIEW: v[n++] = g_view(st->op, dim, a); break;
    case G_ROW:
      v[n++] = st->op == 0 ? kiln_softmax(a, -1) : st->op == 1 ? kiln_log_softmax(a, -1) : kiln_layer_norm(a, 1, NULL, NULL, 1e-5);
      break;
    case G_SCAN: v[n++] = st->op == 0 ? kiln_cumsum(a, dim) : kiln_cumprod(kiln_adds(kiln_sigmoid(a), 0.5), dim); break;
    case G_MATMUL: v[n++] = kiln_matmul(a, b); break;   /* b: a weight leaf made for a */
    default: break;
    }
  }
  return v[n - 1];
}

/* A random smooth program: 2-3 leaves, then steps over earlier values
 * (a binary op's second operand broadcast-compatible with the first, a
 * matrix product's weight a new leaf of the fitting shape). */
static void g_generate(gprogram *p, uint64_t *rng) {
  static const gc_input shapes[] = {{2, {3, 4}, -1.5, 1.5, 0}, {1, {4}, -1.5, 1.5, 0}, {3, {2, 3, 4}, -1.5, 1.5, 0},
                                    {2, {1, 4}, -1.5, 1.5, 0}, {2, {3, 1}, -1.5, 1.5, 0}};
  memset(p, 0, sizeof *p);
  p->nleaves = 2 + tu_below(rng, 2);
  for (int i = 0; i < p->nleaves; i++) p->leaf[i] = shapes[tu_below(rng, 5)];
  int nsteps = 3 + tu_below(rng, GRAD_STEPS - 3);
  for (int k = 0; k < nsteps; k++) {
    int values = p->nleaves + k;
    gstep st = {.kind = (gkind)tu_below(rng, G_KINDS), .op = tu_below(rng, 9), .a = values - 1 - tu_below(rng, values < 3 ? values : 3),
                .b = tu_below(rng, values), .dim = tu_below(rng, 3), .keep = tu_below(rng, 2)};
    p->step[k] = st;   /* a matrix product's weight is made when the shapes are known (g_fix) */
  }
  p->nsteps = nsteps;
}

/* Builds the program once to learn its shapes: a binary step whose
 * operands do not broadcast uses its first operand twice; a matrix
 * product gets a new weight leaf (last dim of a) x 3; false when the
 * program cannot be built at all. */
static bool g_fix(gprogram *p) {
  kiln_scope_begin();
  kiln_tensor *v[GRAD_LEAVES + GRAD_STEPS];
  int n = 0;
  for (int i = 0; i < p->nleaves; i++) v[n++] = kiln_zeros(p->leaf[i].ndim, p->leaf[i].shape, KILN_F64);
  bool ok = true;
  for (int k = 0; ok && k < p->nsteps; k++) {
    gstep *st = &p->step[k];
    if (st->kind == G_MATMUL) {
      int64_t last = kiln_ndim(v[st->a]) ? kiln_shape(v[st->a])[kiln_ndim(v[st->a]) - 1] : 1;
      if (!kiln_ndim(v[st->a]) || p->nleaves == GRAD_LEAVES) {
        st->kind = G_UNARY;
      } else {   /* the new leaf goes after the others: shift every index past them */
        int w = p->nleaves++;
        p->leaf[w] = (gc_input){2, {last, 3}, -1, 1, 0};
        for (int j = 0; j < p->nsteps; j++) {
          p->step[j].a += p->step[j].a >= w;
          p->step[j].b += p->step[j].b >= w;
        }
        st->b = w;
        memmove(v + w + 1, v + w, sizeof *v * (size_t)(n - w));
        v[w] = kiln_zeros(KILN_SHAPE(last, 3), KILN_F64);
        n++;
      }
    }
    if (st->kind == G_BINARY) {
      kiln_tensor *t = kiln_add(v[st->a], v[st->b]);
      if (kiln_status_of(t) != KILN_OK) st->b = st->a;
    }
    kiln_tensor *x[GRAD_LEAVES];
    for (int i = 0; i < p->nleaves; i++) x[i] = v[i];
    int saved = p->nsteps;
    p->nsteps = k + 1;
    kiln_tensor *r = g_build(x, p);
    p->nsteps = saved;
    ok = kiln_status_of(r) == KILN_OK && kiln_numel(r) > 0 && kiln_numel(r) <= 64;
    v[n++] = r;
  }
  kiln_scope_end();
  return ok;
}

START_TEST(random_gradients) {
  uint64_t rng = base_seed() ^ 0x67726164;
  int checked = 0, failed = 0;
  for (int g = 0; g < GRAD_GRAPHS; g++) {
    gprogram p;
    g_generate(&p, &rng);
    if (!g_fix(&p)) continue;
    char why[512];
    checked++;
    if (gc_check(g_build, &p, p.nleaves, p.leaf, GC_F64 | GC_EAGER, rng, NULL, why, sizeof why)) continue;
    failed++;
    fprintf(stderr, "random gradient graph %d (KILN_TEST_SEED=%#" PRIx64 "): %s\n", g, base_seed(), why);
  }
  fprintf(stderr, "random gradients: %d graphs checked\n", checked);
  ck_assert_int_ge(checked, GRAD_GRAPHS / 2);
  ck_assert_msg(failed == 0, "%d of %d random graphs' gradients differ (see stderr)", failed, checked);
}
END_TEST

static Suite *random_graphs_suite(void) {
  Suite *s = suite_create("random_graphs");
  TCase *tc = tcase_create("graphs");
  tcase_set_timeout(tc, 1500);  /* thousands of JIT compiles; ASan on a loaded 2-core machine takes minutes */
  tcase_add_test(tc, generator_covers_its_pool);
  tcase_add_test(tc, random_graphs);
  suite_add_tcase(s, tc);
  tc = tcase_create("gradients");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, random_gradients);
  suite_add_tcase(s, tc);
  return s;
}

KILN_TEST_MAIN(random_graphs_suite)
