/* grad.c: reverse-mode gradients as a graph transform. kiln_grad walks the
 * graph from y back to the requested inputs (through realized tensors'
 * histories, ir/graph.h) and builds each node's vector-Jacobian product
 * with kiln's own ops by the node's rule in ir/grad.def: the gradients are
 * ordinary lazy tensors, fused and compiled like any graph. */
#include "frontend/frontend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- what a rule sees --------------------------------------------------- */
typedef struct {
  const char *f;
  int l;                        /* the kiln_grad call: every node a rule builds is located there */
  ir_node *y, *g;               /* the node's value and its cotangent */
  ir_op op;                     /* how the node was computed: its op (its history's once realized) */
  const ir_attr *a;             /* and that op's attributes */
  ir_node *x[IR_MAX_SRC];       /* its sources */
  bool want[IR_MAX_SRC];        /* the sources that take a gradient */
  ir_node *d[IR_MAX_SRC];       /* the rule's result: each wanted source's part */
} gr_ctx;

#define K(op, ...) kiln_##op##_at(c->f, c->l, __VA_ARGS__)
#define G (c->g)
#define Y (c->y)
#define X0 (c->x[0])
#define X1 (c->x[1])
#define X2 (c->x[2])
#define A (*c->a)
#define D(i, e) if (c->want[i]) c->d[i] = (e);

/* The dtype cotangents of a dt node are summed in: f32 for f16/bf16. */
static kiln_dtype acc_dtype(kiln_dtype dt) { return ir_compute_dtype(dt); }

static ir_node *zeros(gr_ctx *c, ir_node *like) { return K(zeros_like, like); }
static ir_node *one_minus(gr_ctx *c, ir_node *a) { return K(adds, K(neg, a), 1); }
static ir_node *filled(gr_ctx *c, ir_node *like, double v) { return K(adds, zeros(c, like), v); }
static ir_node *as(gr_ctx *c, ir_node *t, kiln_dtype dt) { return K(cast, t, dt); }

/* Whether t is its source with the last two dims swapped (linear's w^T). */
static bool transposed(const ir_node *t) {
  int nd = t->ndim;
  if (t->op != IR_PERMUTE || nd < 2 || t->attr.perm[nd - 2] != nd - 1 || t->attr.perm[nd - 1] != nd - 2) return false;
  for (int d = 0; d < nd - 2; d++)
    if (t->attr.perm[d] != d) return false;
  return true;
}

/* The one dim of a scan's or a sort's axes. */
static int axis(const gr_ctx *c) { return __builtin_ctz(A.axes); }

/* The dims of mask as a list for the reductions; their count. */
static int dims_of(unsigned mask, int ndim, int64_t *dims) {
  int n = 0;
  for (int d = 0; d < ndim; d++)
    if (mask >> d & 1) dims[n++] = d;
  return n;
}

/* t padded by pad[d] = {before, after} along each dim d (negative crops),
 * with zeros: kiln_pad's list runs from the last dim. */
static ir_node *pad_dims(gr_ctx *c, ir_node *t, const int64_t (*pad)[2]) {
  int64_t list[2 * KILN_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) {
    list[2 * (t->ndim - 1 - d)] = pad[d][0];
    list[2 * (t->ndim - 1 - d) + 1] = pad[d][1];
  }
  return K(pad, t, 2 * t->ndim, list, 0);
}

static ir_node *pad_dim(gr_ctx *c, ir_node *t, int dim, int64_t before, int64_t after) {
  int64_t pad[KILN_MAX_DIMS][2] = {{0}};
  pad[dim][0] = before;
  pad[dim][1] = after;
  return pad_dims(c, t, pad);
}

/* ---- movement: each adjoint is a view ------------------------------------- */
/* The broadcast's cotangent summed over the dims it repeated (leading ones
 * and size-1 ones), then seen in x's shape. */
static ir_node *unbroadcast(gr_ctx *c, ir_node *g, const ir_node *x) {
  int lead = g->ndim - x->ndim, n = 0;
  int64_t dims[KILN_MAX_DIMS];
  for (int d = 0; d < g->ndim; d++)
    if (d < lead || (x->shape[d - lead] == 1 && g->shape[d] != 1)) dims[n++] = d;
  ir_node *s = n ? K(sum_dims, g, n, dims, 1) : g;
  return K(reshape, s, x->ndim, x->shape);
}

static ir_node *unpermute(gr_ctx *c, ir_node *g) {
  int64_t inv[KILN_MAX_DIMS];
  for (int d = 0; d < g->ndim; d++) inv[A.perm[d]] = d;
  return K(permute, g, g->ndim, inv);
}

/* A slice's cotangent in place, zeros elsewhere: a step of s spreads it
 * (each element followed by s - 1 zeros), then it is moved to the slice's
 * start and padded (or cropped) to x's length. */
static ir_node *unslice(gr_ctx *c, ir_node *g, const ir_node *x) {
  int dim = A.dim;
  int64_t len = g->shape[dim], step = A.stride, n = x->shape[dim];
  ir_node *t = g;
  if (step > 1) {
    int64_t spread[KILN_MAX_DIMS];
    memcpy(spread, g->shape, sizeof spread);
    spread[dim] = len * step;
    t = K(reshape, pad_dim(c, K(unsqueeze, g, dim + 1), dim + 1, 0, step - 1), g->ndim, spread);
  }
  return pad_dim(c, t, dim, A.index, n - A.index - len * step);
}

static ir_node *unselect(gr_ctx *c, ir_node *g, const ir_node *x) {
  return pad_dim(c, K(unsqueeze, g, A.dim), A.dim, A.index, x->shape[A.dim] - A.index - 1);
}

static ir_node *flipped(gr_ctx *c, ir_node *g) {
  int64_t dims[KILN_MAX_DIMS];
  return K(flip, g, dims_of(A.flip_mask, g->ndim, dims), dims);
}

static ir_node *unpad(gr_ctx *c, ir_node *g) {
  int64_t pad[KILN_MAX_DIMS][2];
  for (int d = 0; d < g->ndim; d++) pad[d][0] = -A.pad[d][0], pad[d][1] = -A.pad[d][1];
  return pad_dims(c, g, pad);
}

/* Elements [start, start + len) of g along cat's dim. */
static ir_node *part(gr_ctx *c, ir_node *g, int64_t start, int64_t len) {
  return K(slice, g, A.dim, start, start + len, 1);
}

/* ---- elementwise ------------------------------------------------------------ */
/* Phi(x) + x phi(x): the exact gelu's slope. */
static ir_node *gelu_slope(gr_ctx *c, ir_node *x) {
  ir_node *cdf = K(muls, K(adds, K(erf, K(muls, x, M_SQRT1_2)), 1), 0.5);
  ir_node *pdf = K(muls, K(exp, K(muls, K(mul, x, x), -0.5)), 0.5 * M_2_SQRTPI * M_SQRT1_2);
  return K(add, cdf, K(mul, x, pdf));
}

/* PyTorch's derivative of the tanh approximation. */
static ir_node *gelu_tanh_slope(gr_ctx *c, ir_node *x) {
  const double beta = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
  ir_node *x2 = K(mul, x, x);
  ir_node *t = K(tanh, K(muls, K(add, x, K(muls, K(mul, x2, x), kappa)), beta));
  ir_node *left = K(muls, K(adds, t, 1), 0.5);
  ir_node *right = K(mul, K(mul, K(muls, x, 0.5), one_minus(c, K(mul, t, t))), K(muls, K(adds, K(muls, x2, 3 * kappa), 1), beta));
  return K(add, left, right);
}

static ir_node *silu_slope(gr_ctx *c, ir_node *x) {
  ir_node *s = K(sigmoid, x);
  return K(mul, s, K(adds, K(mul, x, one_minus(c, s)), 1));
}

/* d/da a^b = b a^(b-1), 0 where b = 0 (PyTorch). */
static ir_node *pow_base(gr_ctx *c) {
  ir_node *v = K(mul, G, K(mul, X1, K(pow, X0, K(adds, X1, -1))));
  return K(where, K(eqs, X1, 0), zeros(c, v), v);
}

/* d/db a^b = a^b log a, 0 where a = 0 and b >= 0 (PyTorch). */
static ir_node *pow_exponent(gr_ctx *c) {
  ir_node *v = K(mul, G, K(mul, Y, K(log, X0)));
  return K(where, K(logical_and, K(eqs, X0, 0), K(ges, X1, 0)), zeros(c, v), v);
}

/* maximum's or minimum's part for b, where a would win over b: none where
 * a beats b, half on a tie. */
static ir_node *extreme_part(gr_ctx *c, ir_node *a, ir_node *b) {
  ir_node *half = K(where, K(eq, a, b), K(muls, G, 0.5), G);
  return K(where, K(gt, a, b), zeros(c, G), half);
}

/* clamp(x, lo, hi) = minimum(maximum(x, lo), hi): x's part inside the
 * bounds and at them; a bound's where it is taken (hi wins when lo > hi). */
static void clamp_parts(gr_ctx *c) {
  ir_node *zero = zeros(c, G);
  D(0, K(where, K(logical_and, K(ge, X0, X1), K(le, X0, X2)), G, zero))
  D(1, K(where, K(logical_and, K(lt, X0, X1), K(lt, X1, X2)), G, zero))
  D(2, K(where, K(logical_or, K(gt, X0, X2), K(lt, X2, X1)), G, zero))
}

static ir_node *hypot2(gr_ctx *c) { return K(add, K(mul, X0, X0), K(mul, X1, X1)); }

/* |a| with b's sign: y / a, 0 where a = 0. */
static ir_node *copysign_part(gr_ctx *c) {
  ir_node *v = K(mul, G, K(div, Y, X0));
  return K(where, K(eqs, X0, 0), zeros(c, v), v);
}

/* ---- reductions --------------------------------------------------------------- */
/* Each element's part of prod: y / x without zeros; with one zero in its
 * group, the zero's part is the product of the others; with more, none. */
static ir_node *prod_part(gr_ctx *c) {
  int64_t dims[KILN_MAX_DIMS];
  int nd = dims_of(A.axes, X0->ndim, dims);
  const int64_t *shape = X0->shape;
  int ndim = X0->ndim;
  ir_node *zero = K(eqs, X0, 0);
  ir_node *count = K(expand, K(sum_dims, zero, nd, dims, 1), ndim, shape);
  ir_node *others = K(expand, K(prod_dims, K(where, zero, K(ones_like, X0), X0), nd, dims, 1), ndim, shape);
  ir_node *g = K(expand, G, ndim, shape);
  ir_node *none = K(div, K(mul, g, K(expand, Y, ndim, shape)), X0);
  ir_node *single = K(where, K(logical_and, K(eqs, count, 1), zero), K(mul, g, others), zeros(c, g));
  return K(where, K(eqs, count, 0), none, single);
}

/* max/min: the cotangent split evenly among the elements equal to the
 * result (NaN counting as equal to a NaN result). */
static ir_node *tied_part(gr_ctx *c) {
  int64_t dims[KILN_MAX_DIMS];
  int nd = dims_of(A.axes, X0->ndim, dims);
  ir_node *y = K(expand, Y, X0->ndim, X0->shape);
  ir_node *tie = K(logical_or, K(eq, X0, y), K(logical_and, K(isnan, X0), K(isnan, y)));
  ir_node *count = K(sum_dims, as(c, tie, G->dtype), nd, dims, 1);
  ir_node *share = K(expand, K(div, G, count), X0->ndim, X0->shape);
  return K(where, tie, share, zeros(c, share));
}

/* ---- products ------------------------------------------------------------------- */
/* y = a b: da = g b^T, db = a^T g, the transposes views the GEMM reads in
 * place. An operand that is itself a transpose (linear's weight) gets the
 * transpose of the other product, (b g^T)^T or (g^T a)^T: its source's
 * gradient is then the product itself, stored as computed, where a^T g
 * would be stored and copied into the weight's layout. */
static ir_node *t(gr_ctx *c, ir_node *m) { return K(transpose, m, -2, -1); }

static void matmul_parts(gr_ctx *c) {
  kiln_dtype dt = G->dtype;
  ir_node *a = as(c, X0, dt), *b = as(c, X1, dt);
  D(0, transposed(X0) ? t(c, K(matmul, b, t(c, G))) : K(matmul, G, t(c, b)))
  D(1, transposed(X1) ? t(c, K(matmul, t(c, G), a)) : K(matmul, t(c, a), G))
}

/* ---- indexing ------------------------------------------------------------------------ */
/* gather's adjoint, duplicates accumulating: a scatter_add into zeros;
 * where each line reads one element (an index of size 1 along the dim and
 * the source's size along the others: cross_entropy's pick of the target
 * class) no two reads meet, and the adjoint is elementwise: the cotangent
 * where the position along the dim is the index, 0 elsewhere (a one-hot,
 * fused into its consumers, no scatter kernel). */
static ir_node *ungather(gr_ctx *c) {
  const ir_node *x = X0, *ix = X1;
  int dim = A.dim;
  bool single = ix->shape[dim] == 1;
  for (int d = 0; d < x->ndim && single; d++) single = d == dim || ix->shape[d] == x->shape[d];
  if (!single) return K(scatter_add, zeros(c, X0), dim, X1, G);
  int64_t n = x->shape[dim], at[KILN_MAX_DIMS];
  for (int d = 0; d < x->ndim; d++) at[d] = d == dim ? n : 1;
  ir_node *pos = K(reshape, K(arange, 0, (double)n, 1), x->ndim, at);
  ir_node *wrapped = K(where, K(lts, X1, 0), K(adds, X1, (double)n), X1);   /* negative indices count from the end */
  ir_node *hit = K(eq, K(expand, pos, x->ndim, x->shape), K(expand, wrapped, x->ndim, x->shape));
  ir_node *g = K(expand, G, x->ndim, x->shape);
  return K(where, hit, g, zeros(c, g));
}

/* scatter_reduce(prod) with self included, PyTorch's rule: zeros in the
 * destination or among the scattered values are taken out of the products
 * they would zero. */
static void scatter_mul_parts(gr_ctx *c) {
  ir_node *t = X0, *ix = X1, *src = X2;
  int dim = A.dim;
  if (c->want[0]) {
    ir_node *masked = K(where, K(eqs, t, 0), K(ones_like, t), t);
    ir_node *result = K(scatter_reduce, masked, dim, ix, src, "prod", 1);
    c->d[0] = K(div, K(mul, G, result), masked);
  }
  if (c->want[2]) {
    ir_node *src_zero = K(eqs, src, 0);
    ir_node *zeros_at = K(gather, K(scatter_add, K(zeros_like, t), dim, ix, as(c, src_zero, t->dtype)), dim, ix);
    ir_node *single = K(logical_and, src_zero, K(eqs, zeros_at, 1));
    ir_node *masked = K(where, single, K(ones_like, src), src);
    ir_node *without = K(scatter_reduce, t, dim, ix, masked, "prod", 1);
    ir_node *gy = K(gather, K(mul, G, Y), dim, ix);
    ir_node *other = K(div, gy, K(where, src_zero, K(ones_like, src), src));
    c->d[2] = K(where, single, K(gather, K(mul, G, without), dim, ix), other);
  }
}

/* scatter_reduce(amax/amin) with self included: the cotangent split evenly
 * among the destination and scattered values equal to the result. */
static void scatter_extreme_parts(gr_ctx *c) {
  ir_node *t = X0, *ix = X1, *src = X2;
  int dim = A.dim;
  ir_node *value = K(gather, Y, dim, ix);
  ir_node *self_is = as(c, K(eq, t, Y), G->dtype), *src_is = as(c, K(eq, src, value), G->dtype);
  ir_node *share = K(div, G, K(scatter_add, self_is, dim, ix, src_is));
  D(0, K(mul, self_is, share))
  D(2, K(mul, src_is, K(gather, share, dim, ix)))
}

/* ---- scans and sorting ------------------------------------------------------------- */
static ir_node *reverse_cumsum(gr_ctx *c, ir_node *g) {
  int64_t d = axis(c);
  return K(flip, K(cumsum, K(flip, g, 1, &d), d), 1, &d);
}

/* Before a line's first zero, sum_{i>=k} g_i y_i / x_k; at it, the same sum
 * over the products with that zero taken as 1; after it, nothing. */
static ir_node *cumprod_part(gr_ctx *c) {
  int64_t d = axis(c);
  ir_node *zero = K(eqs, X0, 0), *seen = K(cumsum, zero, d);
  ir_node *before = K(eqs, seen, 0), *first = K(logical_and, zero, K(eqs, seen, 1));
  ir_node *open = K(div, reverse_cumsum(c, K(mul, G, Y)), X0);
  ir_node *at = reverse_cumsum(c, K(mul, G, K(cumprod, K(where, first, K(ones_like, X0), X0), d)));
  return K(where, before, open, K(where, first, at, zeros(c, at)));
}

/* sum_{i>=k} g_i exp(x_k - y_i), with the positive and negative cotangents
 * summed apart in log space (PyTorch's stable form). */
static ir_node *logcumsumexp_part(gr_ctx *c) {
  int64_t d = axis(c);
  ir_node *lowest = filled(c, G, -INFINITY), *log_abs = K(log, K(abs, G));
  ir_node *out[2];
  for (int s = 0; s < 2; s++) {
    ir_node *lg = K(where, s ? K(lts, G, 0) : K(gts, G, 0), log_abs, lowest);
    ir_node *r = K(flip, K(logcumsumexp, K(flip, K(sub, lg, Y), 1, &d), d), 1, &d);
    out[s] = K(exp, K(add, r, X0));
  }
  return K(sub, out[0], out[1]);
}

/* The cotangent sent back to the positions the op took its values from:
 * the index op of the same attributes (argsort for sort, cumargmax for
 * cummax), through a scatter_add. */
static ir_node *through_positions(gr_ctx *c, ir_op positions) {
  ir_node *ix = ir_node_new(positions, KILN_I64, Y->ndim, Y->shape, 1, &c->x[0], c->f, c->l);
  if (!ix) return fe_nomem();
  ix->attr = A;
  ix->device = X0->device;
  ix = fe_finish(ix);
  return K(scatter_add, zeros(c, X0), axis(c), ix, G);
}

/* ---- windows ------------------------------------------------------------------------------ */
/* Along one spatial dim, tap t's cotangent rows put back where the tap read
 * them: output o read source position h where u h = o s + off (off = t d -
 * p), so the rows are spread s apart, shifted by off, and every u-th of the
 * first u H positions kept. Views only. */
static ir_node *tap_back(gr_ctx *c, ir_node *t, int k, int64_t off, int64_t in) {
  int dim = 2 + k;
  const int64_t s = A.win.s[k], u = A.win.u[k];
  if (s > 1) {
    int64_t shape[4];
    memcpy(shape, t->shape, sizeof shape);
    shape[dim] *= s;
    t = K(reshape, pad_dim(c, K(unsqueeze, t, dim + 1), dim + 1, 0, s - 1), 4, shape);
  }
  t = pad_dim(c, t, dim, off, u * in - off - t->shape[dim]);
  return u > 1 ? K(slice, t, dim, 0, u * in, u) : t;
}

/* The input gradient of a convolution y = w U (U the window, x's UNFOLD),
 * whose window cotangent is w^T gy (matmul_parts): folding that product
 * back is itself a convolution of gy, with the kernel flipped and its
 * input and output channels swapped, over a window of gy that steps u
 * (the forward window's spread) and reads gy spread s apart, padded d (k -
 * 1) - p: the GEMM reads that window in place, as the forward's, and
 * w^T gy (an im2col-sized matrix) is never made. NULL when g is not that
 * product. */
static ir_node *conv_input_grad(gr_ctx *c, ir_node *g) {
  if (g->op != IR_MATMUL || !transposed(g->src[0])) return NULL;
  const ir_node *x = X0;
  ir_node *a = g->src[0]->src[0], *gy = g->src[1];
  if (a->op == IR_EXPAND) a = a->src[0];   /* the weights broadcast over the batch */
  int nd = a->ndim;
  int64_t n = x->shape[0], ch = x->shape[1], groups = g->shape[1], kh = A.win.k[0], kw = A.win.k[1];
  int64_t cg = ch / groups, og = a->shape[nd - 2], oh = A.win.out[0], ow = A.win.out[1];
  /* w'[g, c, (o, i, j)] = w[g, o, (c, kh-1-i, kw-1-j)] */
  int64_t split[KILN_MAX_DIMS], perm[KILN_MAX_DIMS], flat[KILN_MAX_DIMS], taps[2] = {nd, nd + 1};
  memcpy(split, a->shape, sizeof(int64_t) * (size_t)(nd - 1));
  split[nd - 1] = cg, split[nd] = kh, split[nd + 1] = kw;
  for (int d = 0; d < nd + 2; d++) perm[d] = d;
  perm[nd - 2] = nd - 1, perm[nd - 1] = nd - 2;
  memcpy(flat, a->shape, sizeof(int64_t) * (size_t)(nd - 2));
  flat[nd - 2] = cg, flat[nd - 1] = og * kh * kw;
  ir_node *wf = K(reshape, K(permute, K(flip, K(reshape, a, nd + 2, split), 2, taps), nd + 2, perm), nd, flat);
  ir_node *g4 = K(reshape, gy, 4, (int64_t[]){n, groups * og, oh, ow});
  if (g4->status != KILN_OK) return g4;
  int64_t shape[4] = {n, groups, og * kh * kw, x->shape[2] * x->shape[3]};
  ir_node *u = ir_node_new(IR_UNFOLD, g4->dtype, 4, shape, 1, &g4, c->f, c->l);
  if (!u) return fe_nomem();
  u->device = g4->device;
  u->attr.compute = g4->dtype;
  for (int i = 0; i < 2; i++) {
    u->attr.win.k[i] = A.win.k[i];
    u->attr.win.s[i] = A.win.u[i];
    u->attr.win.p[i] = A.win.d[i] * (A.win.k[i] - 1) - A.win.p[i];
    u->attr.win.d[i] = A.win.d[i];
    u->attr.win.u[i] = A.win.s[i];
    u->attr.win.out[i] = x->shape[2 + i];
  }
  return K(reshape, K(matmul, wf, fe_finish_view(u)), 4, x->shape);
}

/* UNFOLD's adjoint: a convolution's input gradient (above), or each tap's
 * rows of the cotangent put back in place, summed over the taps (one
 * elementwise kernel, no scatter). */
static ir_node *fold(gr_ctx *c, ir_node *g) {
  ir_node *direct = conv_input_grad(c, g);
  if (direct) return direct;
  const ir_node *x = X0;
  int64_t n = x->shape[0], ch = x->shape[1], groups = g->shape[1], kh = A.win.k[0], kw = A.win.k[1];
  int64_t oh = A.win.out[0], ow = A.win.out[1];
  ir_node *g7 = K(reshape, g, 7, (int64_t[]){n, groups, ch / groups, kh, kw, oh, ow}), *sum = NULL;
  for (int64_t i = 0; i < kh; i++)
    for (int64_t j = 0; j < kw; j++) {
      ir_node *t = K(reshape, K(select, K(select, g7, 3, i), 3, j), 4, (int64_t[]){n, ch, oh, ow});
      t = tap_back(c, t, 0, i * A.win.d[0] - A.win.p[0], x->shape[2]);
      t = tap_back(c, t, 1, j * A.win.d[1] - A.win.p[1], x->shape[3]);
      sum = sum ? K(add, sum, t) : t;
    }
  return sum;
}

/* ---- attention ------------------------------------------------------------------------------ */
/* softmax(q k^T * scale + mask) v's parts, from the probabilities computed
 * again (the forward kernel keeps no S x S matrix): dv = p^T g,
 * ds = p (g v^T - rowsum(g v^T p)), dq = ds k * scale, dk = ds^T q * scale,
 * a float mask's part ds; key/value heads shared by a group of query heads
 * sum their group's parts. */
static ir_node *heads(gr_ctx *c, ir_node *t, int64_t group, bool sum) {
  int nd = t->ndim;
  if (group == 1) return t;
  int64_t split[KILN_MAX_DIMS + 1], shape[KILN_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  if (sum) {   /* [..., Hq, S, E] -> [..., Hq / group, S, E] */
    memcpy(split, t->shape, (size_t)(nd - 3) * sizeof *split);
    split[nd - 3] = t->shape[nd - 3] / group;
    split[nd - 2] = group;
    split[nd - 1] = t->shape[nd - 2];
    split[nd] = t->shape[nd - 1];
    shape[nd - 3] /= group;
    int64_t gd = nd - 2;
    return K(reshape, K(sum_dims, K(reshape, t, nd + 1, split), 1, &gd, 0), nd, shape);
  }
  memcpy(split, t->shape, (size_t)(nd - 2) * sizeof *split);   /* [..., Hkv, S, E] -> [..., Hkv * group, S, E] */
  split[nd - 2] = 1;
  split[nd - 1] = t->shape[nd - 2];
  split[nd] = t->shape[nd - 1];
  ir_node *u = K(reshape, t, nd + 1, split);
  split[nd - 2] = group;
  shape[nd - 3] *= group;
  return K(reshape, K(expand, u, nd + 1, split), nd, shape);
}

static void attention_parts(gr_ctx *c) {
  ir_node *q = X0, *k = heads(c, X1, A.group, false), *v = heads(c, X2, A.group, false);
  double scale = A.value;
  ir_node *s = K(muls, K(matmul, q, K(transpose, k, -2, -1)), scale);
  if (c->op == IR_ATTENTION_MASKED) {
    ir_node *mask = c->x[3];
    s = mask->dtype == KILN_BOOL ? K(where, mask, s, filled(c, s, -INFINITY)) : K(add, s, mask);
  }
  if (A.causal) {
    int64_t l = s->shape[s->ndim - 2], n = s->shape[s->ndim - 1];
    ir_node *row = K(reshape, K(arange, 0, (double)l, 1), 2, (int64_t[]){l, 1});
    s = K(where, K(le, K(arange, 0, (double)n, 1), row), s, filled(c, s, -INFINITY));
  }
  ir_node *p = K(softmax, s, -1);
  ir_node *dp = K(matmul, G, K(transpose, v, -2, -1));
  int64_t last = -1;
  ir_node *ds = K(mul, p, K(sub, dp, K(sum_dims, K(mul, dp, p), 1, &last, 1)));
  D(0, K(muls, K(matmul, ds, k), scale))
  D(1, heads(c, K(muls, K(matmul, K(transpose, ds, -2, -1), q), scale), A.group, true))
  D(2, heads(c, K(matmul, K(transpose, p, -2, -1), G), A.group, true))
  if (c->op == IR_ATTENTION_MASKED) D(3, ds)
}

/* ---- the table --------------------------------------------------------------------------- */
typedef enum { GR_NONE, GR_LEAF, GR_ZERO, GR_RULE } gr_kind;

#define R(E, body) static void rule_##E(gr_ctx *c) { body; }
#define LEAF(E)
#define ZERO(E)
#define NONE(E)
#include "ir/grad.def"
#undef R
#undef LEAF
#undef ZERO
#undef NONE

/* One row per op, in ops.def's order: a missing or extra row fails here. */
enum {
#define R(E, body) GR_ROW_##E,
#define LEAF(E) GR_ROW_##E,
#define ZERO(E) GR_ROW_##E,
#define NONE(E) GR_ROW_##E,
#include "ir/grad.def"
#undef R
#undef LEAF
#undef ZERO
#undef NONE
  GR_ROWS
};
_Static_assert((int)GR_ROWS == (int)IR_NUM_OPS, "ir/grad.def needs one row per op of ir/ops.def");
#define R(E, body) _Static_assert((int)GR_ROW_##E == (int)IR_##E, "ir/grad.def's rows follow ops.def's order: " #E);
#define LEAF(E) R(E, )
#define ZERO(E) R(E, )
#define NONE(E) R(E, )
#include "ir/grad.def"
#undef R
#undef LEAF
#undef ZERO
#undef NONE

static const struct {
  gr_kind kind;
  void (*rule)(gr_ctx *c);
} rules[IR_NUM_OPS] = {
#define R(E, body) [IR_##E] = {GR_RULE, rule_##E},
#define LEAF(E) [IR_##E] = {GR_LEAF, NULL},
#define ZERO(E) [IR_##E] = {GR_ZERO, NULL},
#define NONE(E) [IR_##E] = {GR_NONE, NULL},
#include "ir/grad.def"
#undef R
#undef LEAF
#undef ZERO
#undef NONE
};

bool fe_grad_has_rule(ir_op op, bool *flows) {
  *flows = rules[op].kind == GR_RULE;
  return rules[op].kind != GR_NONE || ir_ops[op].typing == TR_BOOL || ir_op_has(op, IR_NOFLOAT) ||
         op == IR_ARGMAX || op == IR_ARGMIN || op == IR_ANY || op == IR_ALL || op == IR_CUMARGMAX ||
         op == IR_CUMARGMIN || op == IR_ARGSORT || op == IR_ARGTOPK;
}

/* ---- the walk ------------------------------------------------------------------------------ */
/* A node as the walk met it. How it was computed is copied: building the
 * backward may realize nodes of the forward (eager mode, bounded laziness,
 * ops that read data), which turns them into buffers of the same value. */
typedef struct {
  ir_node *n;                   /* its value (held) */
  bool computed;                /* false: data, or kiln_detach's stop: nothing below */
  ir_op op;                     /* how it was computed */
  ir_attr attr;
  int nsrc;
  int src[IR_MAX_SRC];          /* the sources' positions */
  bool wrt, wanted;             /* asked for; a wrt at or below it */
  bool cut;                     /* realized, its history not kept: what it came from is unknown */
  ir_node *cot;                 /* its cotangent so far */
} gr_node;

typedef struct {
  gr_node *v;
  size_t n, cap;
  int *topo;                    /* positions, sources first */
  size_t ntopo, topo_cap;
  ir_ptrmap at;                 /* every node by address */
  ir_ptrmap buf_at;             /* buffers by id too: an alias (ir_node_alias) is the tensor it aliases */
} gr_graph;

/* What a node was computed as: itself while pending, its history once
 * realized; NULL for data and for kiln_detach's stop. */
static const ir_node *computed_as(const ir_node *n) {
  const ir_node *h = n->op == IR_BUFFER ? n->hist : n;
  return h && !(h->op == IR_RESHAPE && h->attr.detached) ? h : NULL;
}

static const void *id_key(const ir_node *n) { return (const void *)(uintptr_t)((n->id + 1) << 4); }

static int find(const gr_graph *g, const ir_node *n) {
  int i = ir_ptrmap_get(&g->at, n);
  return i >= 0 || n->op != IR_BUFFER ? i : ir_ptrmap_get(&g->buf_at, id_key(n));
}

/* n's position, added (unvisited, its sources' positions unknown) when new;
 * -1 when out of memory. */
static int add(gr_graph *g, ir_node *n) {
  int i = find(g, n);
  if (i >= 0) return i;
  if (!ir_grow((void **)&g->v, &g->cap, g->n, g->n + 1, sizeof *g->v, NULL)) return -1;
  i = (int)g->n;
  if (!ir_ptrmap_put(&g->at, n, i) || (n->op == IR_BUFFER && !ir_ptrmap_put(&g->buf_at, id_key(n), i))) return -1;
  const ir_node *h = computed_as(n);
  gr_node *v = &g->v[g->n++];
  *v = (gr_node){.n = n, .computed = h, .cut = n->op == IR_BUFFER && n->hist_cut};
  if (h) v->op = h->op, v->attr = h->attr, v->nsrc = h->nsrc;
  ir_node_retain(n);
  return i;
}

static bool push_topo(gr_graph *g, int i) {
  if (!ir_grow((void **)&g->topo, &g->topo_cap, g->ntopo, g->ntopo + 1, sizeof *g->topo, NULL)) return false;
  g->topo[g->ntopo++] = i;
  return true;
}

/* Every node y was computed from, through histories, in post-order (an
 * explicit stack: any depth). Nothing is realized meanwhile. */
static bool collect(gr_graph *g, ir_node *y) {
  typedef struct { int i, next; } open_node;
  open_node *open = NULL;
  size_t nopen = 0, cap = 0;
  int root = add(g, y);
  bool ok = root >= 0 && ir_grow((void **)&open, &cap, 0, 1, sizeof *open, NULL);
  if (ok) open[nopen++] = (open_node){root, 0};
  while (ok && nopen) {
    open_node *o = &open[nopen - 1];
    int i = o->i;
    if (o->next < g->v[i].nsrc) {
      int s = o->next++;
      size_t before = g->n;
      int j = add(g, computed_as(g->v[i].n)->src[s]);
      ok = j >= 0;
      if (ok) g->v[i].src[s] = j;
      if (ok && g->n > before) {
        ok = ir_grow((void **)&open, &cap, nopen, nopen + 1, sizeof *open, NULL);
        if (ok) open[nopen++] = (open_node){j, 0};
      }
      continue;
    }
    nopen--;
    ok = push_topo(g, i);
  }
  free(open);
  return ok;
}

/* Sources first: a node is wanted when it is floating and a wrt is at or below it. */
static void mark_wanted(gr_graph *g) {
  for (size_t t = 0; t < g->ntopo; t++) {
    gr_node *v = &g->v[g->topo[t]];
    bool below = false;
    for (int s = 0; s < v->nsrc; s++) below |= g->v[v->src[s]].wanted;
    v->wanted = ir_is_float(v->n->dtype) && (v->wrt || below);
  }
}

/* Adds part (cast to the dtype cotangents of x are summed in) to x's
 * cotangent. */
static void accumulate(gr_ctx *c, gr_node *x, ir_node *part) {
  part = as(c, part, acc_dtype(x->n->dtype));
  IR_ASSERT(part->status != KILN_OK || (part->ndim == x->n->ndim &&
            !memcmp(part->shape, x->n->shape, sizeof(int64_t) * (size_t)part->ndim)));   /* a rule's shape */
  x->cot = x->cot ? K(add, x->cot, part) : part;
}

/* From y down, each wanted node's rule turns its cotangent into its
 * sources'. */
static void propagate(gr_graph *g, const char *f, int l) {
  for (size_t t = g->ntopo; t-- > 0;) {
    gr_node *v = &g->v[g->topo[t]];
    if (!v->cot || !v->wanted || !v->computed || rules[v->op].kind != GR_RULE) continue;
    gr_ctx ctx = {.f = f, .l = l, .y = v->n, .g = v->cot, .op = v->op, .a = &v->attr}, *c = &ctx;
    bool any = false;
    for (int s = 0; s < v->nsrc; s++) {
      c->x[s] = g->v[v->src[s]].n;
      any |= c->want[s] = g->v[v->src[s]].wanted;
    }
    if (!any) continue;
    rules[v->op].rule(c);
    for (int s = 0; s < v->nsrc; s++) {
      if (!c->want[s]) continue;
      IR_ASSERT(c->d[s]);   /* every rule gives each wanted floating source its part */
      accumulate(c, &g->v[v->src[s]], c->d[s]);
    }
  }
}

/* ---- the public functions -------------------------------------------------------------- */
static kiln_status grad_fail(const char *f, int l, kiln_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static kiln_status grad_fail(const char *f, int l, kiln_status st, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ir_error_setf("%s:%d: grad: %s", f, l, msg);
  return st;
}

/* "float32 (2,3) built at model.c:12" */
static void name_tensor(ir_str *b, const ir_node *t) {
  fe_describe(b, t);
  if (t->file) ir_str_printf(b, " built at %s:%d", t->file, t->line);
}

static kiln_status check_tensor(const char *f, int l, const char *what, ir_node *t) {
  if (!t) return grad_fail(f, l, KILN_ERR_ARG, "%s is NULL", what);
  if (!ir_node_live(t)) return grad_fail(f, l, KILN_ERR_ARG, "%s " FE_FREED_MSG, what);
  if (t->status != KILN_OK) {
    ir_error_set(ir_node_msg(t));   /* errors are sticky */
    return t->status;
  }
  if (ir_is_float(t->dtype)) return KILN_OK;
  ir_str b = {0};
  name_tensor(&b, t);
  kiln_status st = grad_fail(f, l, KILN_ERR_DTYPE, "%s is %s: only floating tensors have gradients", what, b.s ? b.s : "?");
  ir_str_free(&b);
  return st;
}

static kiln_status check_grad(const char *f, int l, ir_node *y, ir_node *dy, int n, kiln_tensor *const *wrt,
                              kiln_tensor **grads) {
  kiln_status st = check_tensor(f, l, "y", y);
  if (st != KILN_OK) return st;
  if (n < 0 || (n && (!wrt || !grads)))
    return grad_fail(f, l, KILN_ERR_ARG, n < 0 ? "the number of inputs is negative (%d)" : !wrt ? "wrt is NULL with %d inputs"
                                                                                           : "grads is NULL with %d inputs", n);
  for (int i = 0; i < n; i++) {
    char what[32];
    snprintf(what, sizeof what, "wrt[%d]", i);
    if ((st = check_tensor(f, l, what, wrt[i])) != KILN_OK) return st;
  }
  if (!dy) {
    int64_t numel = ir_numel(y->ndim, y->shape);
    return numel == 1 ? KILN_OK : grad_fail(f, l, KILN_ERR_ARG, "dy is NULL, but y has %lld elements: give the cotangent "
                                                                "of y (its shape and dtype)", (long long)numel);
  }
  if ((st = check_tensor(f, l, "dy", dy)) != KILN_OK) return st;
  bool same = dy->dtype == y->dtype && dy->ndim == y->ndim && !memcmp(dy->shape, y->shape, sizeof(int64_t) * (size_t)y->ndim) &&
              dy->device.type == y->device.type && dy->device.index == y->device.index;
  if (same) return KILN_OK;
  ir_str a = {0}, b = {0};
  fe_describe(&a, dy);
  fe_describe(&b, y);
  st = grad_fail(f, l, KILN_ERR_SHAPE, "dy is %s, but y is %s: the cotangent has y's shape, dtype and device", a.s ? a.s : "?",
                 b.s ? b.s : "?");
  ir_str_free(&a);
  ir_str_free(&b);
  return st;
}

/* A realized tensor met whose history was not kept: what y reads through
 * it is unknown, so no wrt may be below it. An error unless it is itself
 * the one place a wrt is. */
static kiln_status check_cuts(const char *f, int l, const gr_graph *g, int n, kiln_tensor *const *wrt) {
  bool unreached = false;
  for (int i = 0; i < n; i++) unreached |= find(g, wrt[i]) < 0;
  for (size_t i = 0; i < g->n; i++) {
    const gr_node *v = &g->v[i];
    if (!v->cut || (v->wrt && !unreached)) continue;
    ir_str b = {0};
    name_tensor(&b, v->n);
    kiln_status st = grad_fail(f, l, KILN_ERR_ARG, "y was computed from the tensor %s, whose history was not kept (it "
                               "reaches back over more than KILN_GRAD_HISTORY_MB of realized data): realize the "
                               "gradients with y, raise KILN_GRAD_HISTORY_MB, or kiln_detach what is a constant",
                               b.s ? b.s : "?");
    ir_str_free(&b);
    return st;
  }
  return KILN_OK;
}

static kiln_status grad(const char *f, int l, ir_node *y, ir_node *dy, int n, kiln_tensor *const *wrt, kiln_tensor **grads) {
  gr_graph g = {0};
  g.at = (ir_ptrmap){0};
  g.buf_at = (ir_ptrmap){0};
  kiln_status st = collect(&g, y) ? KILN_OK : grad_fail(f, l, KILN_ERR_MEMORY, "out of memory");
  for (int i = 0; st == KILN_OK && i < n; i++) {
    int at = find(&g, wrt[i]);
    if (at >= 0) g.v[at].wrt = true;
  }
  if (st == KILN_OK) st = check_cuts(f, l, &g, n, wrt);
  if (st == KILN_OK) {
    mark_wanted(&g);
    gr_ctx ctx = {.f = f, .l = l}, *c = &ctx;
    gr_node *root = &g.v[g.topo[g.ntopo - 1]];
    root->cot = as(c, dy ? dy : K(ones_like, y), acc_dtype(y->dtype));
    propagate(&g, f, l);
    for (int i = 0; i < n; i++) {
      int at = find(&g, wrt[i]);
      ir_node *cot = at >= 0 ? g.v[at].cot : NULL;
      grads[i] = cot ? as(c, cot, wrt[i]->dtype) : K(zeros_like, wrt[i]);
      if (grads[i]->status != KILN_OK && st == KILN_OK) {
        ir_error_set(ir_node_msg(grads[i]));
        st = grads[i]->status;
      }
    }
  }
  for (size_t i = 0; i < g.n; i++) ir_node_release(g.v[i].n);
  free(g.v);
  free(g.topo);
  ir_ptrmap_free(&g.at);
  ir_ptrmap_free(&g.buf_at);
  return st;
}

kiln_status kiln_grad_at(const char *f, int l, kiln_tensor *y, kiln_tensor *dy, int n, kiln_tensor *const *wrt,
                         kiln_tensor **grads) {
  kiln_status st = check_grad(f, l, y, dy, n, wrt, grads);
  for (int i = 0; st != KILN_OK && i < n && grads; i++) grads[i] = NULL;
  if (st != KILN_OK) return st;
  kiln_scope_begin();
  const char *prev = ir_api_push("grad");
  st = grad(f, l, y, dy, n, wrt, grads);
  ir_api_pop(prev);
  for (int i = 0; i < n; i++) grads[i] = st == KILN_OK ? fe_same(grads[i]) : NULL;   /* each its own handle */
  for (int i = 0; i < n; i++) grads[i] = kiln_keep(grads[i]);
  kiln_scope_end();
  return st;
}

/* The same value, which kiln_grad does not see through: a realized t's
 * storage as a new tensor that holds nothing else (not t's history); a
 * pending t read through a RESHAPE to its own shape, marked, which costs
 * nothing when it runs. */
kiln_tensor *kiln_detach_at(const char *f, int l, kiln_tensor *t) {
  ir_node *e = fe_check_arg(f, l, "detach", t, 1);
  if (e) return e;
  if (t->op == IR_BUFFER) {
    ir_node *d = ir_node_detached(t);
    return d ? fe_register(d) : fe_nomem();
  }
  ir_node *n = ir_node_new(IR_RESHAPE, t->dtype, t->ndim, t->shape, 1, &t, f, l);
  if (!n) return fe_nomem();
  n->attr.compute = t->dtype;
  n->attr.detached = true;
  return fe_finish_view(n);
}
