/* reduce.c: reductions (sum mean prod max min argmax argmin any all var std
 * var_mean std_mean)
 * and the compositions built from them (softmax, log_softmax, layer_norm).
 * A reduction node keeps reduced dims as size 1; keepdim=false is a reshape
 * view on top, so the fuser sees one node kind whatever the caller asked. */
#include "frontend/frontend.h"
#include "runtime/rt.h"

#include <math.h>
#include <string.h>

/* ---- dims --------------------------------------------------------------- */
/* The reduced-dims mask of dims[0..ndims) (ndims 0: every dim). NULL, or the
 * error node to return. */
static ir_node *dims_mask(const char *f, int l, const char *op, ir_node *t, int ndims, const int64_t *dims,
                          unsigned *mask) {
  if (ndims < 0) return fe_error(KILN_ERR_ARG, f, l, "%s: the number of dims is negative (%d)", op, ndims);
  if (ndims > 0 && !dims) return fe_error(KILN_ERR_ARG, f, l, "%s: the dims list is NULL with %d dims", op, ndims);
  *mask = ndims == 0 ? (1u << t->ndim) - 1 : 0;
  int n = t->ndim > 0 ? t->ndim : 1;
  for (int i = 0; i < ndims; i++) {
    int64_t d = dims[i];
    if (d < -n || d >= n)
      return fe_error(KILN_ERR_ARG, f, l, "%s: Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                      op, -n, n - 1, (long long)d);
    int w = (int)(d < 0 ? d + n : d);
    if (t->ndim == 0) continue;  /* a 0-dim tensor takes dim 0 / -1 and reduces nothing */
    if (*mask & (1u << w)) return fe_error(KILN_ERR_ARG, f, l, "%s: dim %d appears multiple times in the list of dims", op, w);
    *mask |= 1u << w;
  }
  return NULL;
}

static int64_t reduced_count(const ir_node *t, unsigned mask) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    if (mask & (1u << d)) n *= t->shape[d];
  return n;
}

/* The count of elements mask reduces, when it follows a placeholder's
 * dynamic size (kiln_fn): known only at each size the function runs, so a
 * sum of ones in acc there (the variant's shapes give it its size), kept
 * dims as 1; NULL when reduced_count is the count. */
static ir_node *dynamic_count(const char *f, int l, const ir_node *t, int ndims, const int64_t *dims, unsigned mask,
                              kiln_dtype acc) {
  bool dynamic = false;
  for (int d = 0; d < t->ndim; d++) dynamic |= (mask >> d & 1) && t->shape[d] && t->shape[d] % KILN_DYN == 0;
  if (!dynamic) return NULL;
  ir_node *ones = kiln_full_at(f, l, t->ndim, t->shape, 1, acc);
  return fe_done(kiln_sum_dims_at(f, l, ones, ndims, dims, 1), 1, &ones);
}

/* ---- the one builder ---------------------------------------------------- */
static kiln_dtype reduce_dtype(ir_op op, kiln_dtype in) {
  switch (op) {
  case IR_SUM: case IR_PROD: return ir_is_float(in) ? in : KILN_I64;
  case IR_ARGMAX: case IR_ARGMIN: return KILN_I64;
  case IR_ANY: case IR_ALL: return KILN_BOOL;
  default: return in;
  }
}

/* Errors PyTorch gives before reducing: bool argmax, empty max/min/arg*. */
static ir_node *reduce_check(const char *f, int l, ir_op op, ir_node *t, unsigned mask) {
  bool arg = op == IR_ARGMAX || op == IR_ARGMIN, extreme = arg || op == IR_MAX || op == IR_MIN;
  bool bool_arg = arg && t->dtype == KILN_BOOL;
  if (!bool_arg && !(extreme && reduced_count(t, mask) == 0 && ir_numel(t->ndim, t->shape) == 0)) return NULL;
  const char *name = ir_ops[op].name;
  ir_str b = {0};
  fe_describe(&b, t);   /* only on failure: a cached realize builds ops in its hot path */
  ir_node *e = bool_arg ? fe_error(KILN_ERR_DTYPE, f, l, "%s: not implemented for bool (input: %s)", name, b.s)
                        : fe_error(KILN_ERR_SHAPE, f, l, "%s: cannot reduce over an empty dimension (input: %s); it has no identity", name, b.s);
  ir_str_free(&b);
  return e;
}

/* t's shape without the dims of mask in kept; their number. */
static int kept_shape(const ir_node *t, unsigned mask, int64_t *kept) {
  int nkept = 0;
  for (int d = 0; d < t->ndim; d++)
    if (!(mask & (1u << d))) kept[nkept++] = t->shape[d];
  return nkept;
}

/* NULL, or the error when t reduced over mask (keepdim or not) has more
 * elements than int64 can count: an empty input may reduce to a result too
 * big to count ((0, 2^62, 8) over dim 0). */
static ir_node *check_result(const char *f, int l, const char *op, const ir_node *t, unsigned mask, bool keepdim) {
  int64_t shape[KILN_MAX_DIMS];
  int n = keepdim ? t->ndim : kept_shape(t, mask, shape);
  for (int d = 0; keepdim && d < t->ndim; d++) shape[d] = mask & (1u << d) ? 1 : t->shape[d];
  return fe_check_numel(f, l, op, n, shape);
}

/* n (t reduced over mask, reduced dims kept as 1) without them unless
 * keepdim; takes n's reference. */
static ir_node *drop_reduced(const char *f, int l, ir_node *n, const ir_node *t, unsigned mask, bool keepdim) {
  int64_t kept[KILN_MAX_DIMS];
  int nkept = kept_shape(t, mask, kept);
  if (keepdim || nkept == t->ndim) return n;
  ir_node *r = kiln_reshape_at(f, l, n, nkept, kept);
  fe_drop(n);
  return r;
}

/* Keeps the reduced dims as size 1 (keepdim) or drops them with a view. */
static ir_node *reduce(const char *f, int l, ir_op op, ir_node *t, int ndims, const int64_t *dims, bool keepdim) {
  const char *name = ir_ops[op].name;
  unsigned mask;
  ir_node *e = fe_check_arg(f, l, name, t, 1);
  if (e || (e = dims_mask(f, l, name, t, ndims, dims, &mask)) || (e = reduce_check(f, l, op, t, mask)) ||
      (e = check_result(f, l, name, t, mask, keepdim)))
    return e;
  int64_t shape[KILN_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) shape[d] = mask & (1u << d) ? 1 : t->shape[d];
  ir_node *n = ir_node_new(op, reduce_dtype(op, t->dtype), t->ndim, shape, 1, &t, f, l);
  if (!n) return fe_nomem();
  n->attr.axes = mask;
  n->attr.compute = op == IR_SUM || op == IR_PROD ? n->dtype : t->dtype;  /* the accumulated values' dtype */
  return drop_reduced(f, l, fe_finish(n), t, mask, keepdim);
}

#define REDUCE(E, name) \
  kiln_tensor *kiln_##name##_at(const char *f, int l, kiln_tensor *t) { return reduce(f, l, IR_##E, t, 0, NULL, false); } \
  kiln_tensor *kiln_##name##_dims_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int keepdim) { \
    return reduce(f, l, IR_##E, t, ndims, dims, keepdim); \
  }
REDUCE(SUM, sum) REDUCE(PROD, prod) REDUCE(MAX, max) REDUCE(MIN, min) REDUCE(ANY, any) REDUCE(ALL, all)
#undef REDUCE

kiln_tensor *kiln_argmax_at(const char *f, int l, kiln_tensor *t) { return reduce(f, l, IR_ARGMAX, t, 0, NULL, false); }
kiln_tensor *kiln_argmin_at(const char *f, int l, kiln_tensor *t) { return reduce(f, l, IR_ARGMIN, t, 0, NULL, false); }
kiln_tensor *kiln_argmax_dim_at(const char *f, int l, kiln_tensor *t, int64_t dim, int keepdim) {
  return reduce(f, l, IR_ARGMAX, t, 1, &dim, keepdim);
}
kiln_tensor *kiln_argmin_dim_at(const char *f, int l, kiln_tensor *t, int64_t dim, int keepdim) {
  return reduce(f, l, IR_ARGMIN, t, 1, &dim, keepdim);
}

/* ---- compositions ------------------------------------------------------- */
/* PyTorch's message for mean/var/std of an integer or bool tensor. */
static ir_node *float_only(const char *f, int l, const char *op, ir_node *t) {
  ir_node *e = fe_check_arg(f, l, op, t, 1);
  if (e || ir_is_float(t->dtype)) return e;
  return fe_error(KILN_ERR_DTYPE, f, l,
                  "%s(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. "
                  "Got: %s",
                  op, ir_dtypes[t->dtype].name);
}

/* sum(t) over dims, its elements converted to acc first, keepdim. */
static ir_node *sum_in(const char *f, int l, ir_node *t, int ndims, const int64_t *dims, kiln_dtype acc) {
  ir_node *c = kiln_cast_at(f, l, t, acc);
  return fe_done(reduce(f, l, IR_SUM, c, ndims, dims, true), 1, &c);
}

/* The mean over mask's dims (dims) summed in acc, keepdim, in t's dtype.
 * kiln_mean sums float data in f64, as a hand-written loop does: exact sums
 * of f32 data, and the very sum(f64(t)) node that var builds, which CSE
 * makes one, so the fuser reads t once for both (W6's
 * (x - x.mean(0)) / x.std(0)). layer_norm's short rows sum in their own
 * precision: they stay in cache, and f64 would halve the vector width. */
static ir_node *mean_in(const char *f, int l, ir_node *t, int ndims, const int64_t *dims, unsigned mask,
                        kiln_dtype acc) {
  fe_temps s = {0};
  ir_node *count = dynamic_count(f, l, t, ndims, dims, mask, acc), *sum = fe_keep(&s, sum_in(f, l, t, ndims, dims, acc));
  if (count) fe_keep(&s, count);
  ir_node *m = fe_keep(&s, count ? kiln_div_at(f, l, sum, count) : kiln_muls_at(f, l, sum, 1.0 / (double)reduced_count(t, mask)));
  return fe_temps_done(&s, kiln_cast_at(f, l, m, t->dtype));
}

static ir_node *mean(const char *f, int l, ir_node *t, int ndims, const int64_t *dims, bool keepdim) {
  unsigned mask;
  ir_node *e = float_only(f, l, "mean", t);
  if (e || (e = dims_mask(f, l, "mean", t, ndims, dims, &mask)) || (e = check_result(f, l, "mean", t, mask, keepdim)))
    return e;
  return drop_reduced(f, l, mean_in(f, l, t, ndims, dims, mask, KILN_F64), t, mask, keepdim);
}

kiln_tensor *kiln_mean_at(const char *f, int l, kiln_tensor *t) { FE_AS("mean", mean(f, l, t, 0, NULL, false)); }
kiln_tensor *kiln_mean_dims_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int keepdim) {
  FE_AS("mean", mean(f, l, t, ndims, dims, keepdim));
}

/* The values var sums, in f64: f64(t) for narrower floats (sums of f32
 * data in f64 leave the cancellation far below f32's precision); for f64
 * data, which has no wider type, t - s with the shift s t's first element
 * along mask's dims (a view), which keeps the cancellation to about one
 * standard deviation. */
static ir_node *deviations(const char *f, int l, ir_node *t, unsigned mask) {
  if (t->dtype != KILN_F64) return kiln_cast_at(f, l, t, KILN_F64);
  ir_node *shift = fe_same(t);
  for (int d = 0; d < t->ndim; d++) {
    if (!(mask & (1u << d))) continue;
    ir_node *v = kiln_slice_at(f, l, shift, d, 0, 1, 1);
    fe_drop(shift);
    shift = v;
  }
  /* expanded: a view of t read by every element, not a small tensor
   * broadcast over leading dims (which fuse would store) */
  ir_node *full = kiln_expand_at(f, l, shift, t->ndim, t->shape);
  fe_drop(shift);
  return fe_done(kiln_sub_at(f, l, t, full), 1, &full);
}

/* One pass over t: var = (sum(d^2) - sum(d)^2 / n) / max(0, n - correction),
 * clamped at 0, d = deviations(t); sum(d) is the sum a mean over the same
 * dims shares. */
static ir_node *var(const char *f, int l, const char *op, ir_node *t, int ndims, const int64_t *dims, double correction,
                    bool keepdim) {
  unsigned mask;
  ir_node *e = float_only(f, l, op, t);
  if (e || (e = dims_mask(f, l, op, t, ndims, dims, &mask)) || (e = check_result(f, l, op, t, mask, keepdim))) return e;
  double count = (double)reduced_count(t, mask), divisor = count - correction;
  fe_temps s = {0};
  ir_node *n = dynamic_count(f, l, t, ndims, dims, mask, KILN_F64);   /* the count, when it is dynamic */
  if (n) fe_keep(&s, n);
  ir_node *d = fe_keep(&s, deviations(f, l, t, mask));
  ir_node *sum = fe_keep(&s, sum_in(f, l, d, ndims, dims, KILN_F64));
  ir_node *sq = fe_keep(&s, sum_in(f, l, fe_keep(&s, kiln_mul_at(f, l, d, d)), ndims, dims, KILN_F64));
  ir_node *sum2 = fe_keep(&s, kiln_mul_at(f, l, sum, sum));
  ir_node *shift = fe_keep(&s, n ? kiln_div_at(f, l, sum2, n) : kiln_divs_at(f, l, sum2, count));
  ir_node *m2 = fe_keep(&s, kiln_maximums_at(f, l, fe_keep(&s, kiln_sub_at(f, l, sq, shift)), 0.0));
  /* a divisor of 0 gives inf or nan, as torch */
  ir_node *v = fe_keep(&s, n ? kiln_div_at(f, l, m2, fe_keep(&s, kiln_maximums_at(f, l, fe_keep(&s, kiln_adds_at(f, l, n, -correction)), 0.0)))
                             : kiln_divs_at(f, l, m2, divisor > 0 ? divisor : 0.0));
  return drop_reduced(f, l, fe_temps_done(&s, kiln_cast_at(f, l, v, t->dtype)), t, mask, keepdim);
}

static ir_node *std(const char *f, int l, const char *op, ir_node *t, int ndims, const int64_t *dims, double correction,
                    bool keepdim) {
  ir_node *v = var(f, l, op, t, ndims, dims, correction, keepdim);
  return fe_done(kiln_sqrt_at(f, l, v), 1, &v);
}

/* unbiased is a flag: PyTorch's other corrections have a function of their own. */
static ir_node *check_unbiased(const char *f, int l, const char *op, int unbiased) {
  if (unbiased == 0 || unbiased == 1) return NULL;
  return fe_error(KILN_ERR_ARG, f, l, "%s: unbiased must be 0 or 1, got %d; for another correction use kiln_%s_correction",
                  op, unbiased, op);
}

static ir_node *var_flag(const char *f, int l, const char *op, ir_node *t, int ndims, const int64_t *dims, int unbiased,
                         bool keepdim, bool sqrt) {
  ir_node *e = check_unbiased(f, l, op, unbiased);
  if (e) return e;
  return sqrt ? std(f, l, op, t, ndims, dims, unbiased, keepdim) : var(f, l, op, t, ndims, dims, unbiased, keepdim);
}

kiln_tensor *kiln_var_at(const char *f, int l, kiln_tensor *t, int unbiased) {
  FE_AS("var", var_flag(f, l, "var", t, 0, NULL, unbiased, false, false));
}
kiln_tensor *kiln_var_dims_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int unbiased,
                              int keepdim) {
  FE_AS("var", var_flag(f, l, "var", t, ndims, dims, unbiased, keepdim, false));
}
kiln_tensor *kiln_std_at(const char *f, int l, kiln_tensor *t, int unbiased) {
  FE_AS("std", var_flag(f, l, "std", t, 0, NULL, unbiased, false, true));
}
kiln_tensor *kiln_std_dims_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int unbiased,
                              int keepdim) {
  FE_AS("std", var_flag(f, l, "std", t, ndims, dims, unbiased, keepdim, true));
}
kiln_tensor *kiln_var_correction_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims,
                                    double correction, int keepdim) {
  FE_AS("var", var(f, l, "var", t, ndims, dims, correction, keepdim));
}
kiln_tensor *kiln_std_correction_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims,
                                    double correction, int keepdim) {
  FE_AS("std", std(f, l, "std", t, ndims, dims, correction, keepdim));
}

/* Both results of one graph: var's sum(d) is the mean's sum for every dtype
 * but f64 (CSE makes them one node), so one kernel reads t for both. */
static void var_mean(const char *f, int l, const char *op, ir_node *t, int ndims, const int64_t *dims,
                     double correction, bool keepdim, bool sqrt, kiln_tensor **v, kiln_tensor **m) {
  const char *prev = ir_api_push(op);
  ir_node *x = sqrt ? std(f, l, op, t, ndims, dims, correction, keepdim) : var(f, l, op, t, ndims, dims, correction, keepdim);
  ir_node *y = x->status == KILN_OK ? mean(f, l, t, ndims, dims, keepdim) : fe_same(x);
  ir_api_pop(prev);
  if (v) *v = x;
  else fe_drop(x);
  if (m) *m = y;
  else fe_drop(y);
}

void kiln_var_mean_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, double correction,
                      int keepdim, kiln_tensor **var, kiln_tensor **mean) {
  var_mean(f, l, "var_mean", t, ndims, dims, correction, keepdim, false, var, mean);
}
void kiln_std_mean_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, double correction,
                      int keepdim, kiln_tensor **std, kiln_tensor **mean) {
  var_mean(f, l, "std_mean", t, ndims, dims, correction, keepdim, true, std, mean);
}

/* x - max(x): the shifted input both softmaxes start from (no overflow).
 * The max is detached: a softmax does not change with the shift, so its
 * gradient through the max is zero, which kiln_grad need not compute (as
 * JAX's softmax does). */
static ir_node *shifted(const char *f, int l, const char *op, ir_node *t, int64_t dim) {
  ir_node *e = float_only(f, l, op, t);
  if (e) return e;
  if (ir_numel(t->ndim, t->shape) == 0) return fe_same(t);  /* no row has a max; the result is empty */
  ir_node *m[2];
  m[0] = reduce(f, l, IR_MAX, t, 1, &dim, true);
  m[1] = kiln_detach_at(f, l, m[0]);
  return fe_done(kiln_sub_at(f, l, t, m[1]), 2, m);
}

static ir_node *softmax(const char *f, int l, ir_node *t, int64_t dim) {
  ir_node *tmp[3];
  tmp[0] = shifted(f, l, "softmax", t, dim);
  tmp[1] = kiln_exp_at(f, l, tmp[0]);
  tmp[2] = reduce(f, l, IR_SUM, tmp[1], 1, &dim, true);
  return fe_done(kiln_div_at(f, l, tmp[1], tmp[2]), 3, tmp);
}

static ir_node *log_softmax(const char *f, int l, ir_node *t, int64_t dim) {
  ir_node *tmp[4];
  tmp[0] = shifted(f, l, "log_softmax", t, dim);
  tmp[1] = kiln_exp_at(f, l, tmp[0]);
  tmp[2] = reduce(f, l, IR_SUM, tmp[1], 1, &dim, true);
  tmp[3] = kiln_log_at(f, l, tmp[2]);
  return fe_done(kiln_sub_at(f, l, tmp[0], tmp[3]), 4, tmp);
}

/* (x - mean) / sqrt(var + eps) over the last nlast dims (biased var), then
 * * weight + bias when given. */
static ir_node *layer_norm(const char *f, int l, ir_node *x, int nlast, ir_node *weight, ir_node *bias,
                           double eps) {
  ir_node *e = float_only(f, l, "layer_norm", x);
  if (e) return e;
  if (nlast < 1 || nlast > x->ndim)
    return fe_error(KILN_ERR_ARG, f, l, "layer_norm: cannot normalize the last %d dims of a %d-dim tensor", nlast, x->ndim);
  int64_t dims[KILN_MAX_DIMS];
  unsigned mask = 0;
  for (int i = 0; i < nlast; i++) {
    dims[i] = x->ndim - nlast + i;
    mask |= 1u << dims[i];
  }
  ir_node *tmp[8];
  int n = 0;
  tmp[n++] = mean_in(f, l, x, nlast, dims, mask, x->dtype);
  tmp[n++] = kiln_sub_at(f, l, x, tmp[0]);
  tmp[n++] = kiln_mul_at(f, l, tmp[1], tmp[1]);
  tmp[n++] = mean_in(f, l, tmp[2], nlast, dims, mask, tmp[2]->dtype);
  tmp[n++] = kiln_adds_at(f, l, tmp[3], eps);
  tmp[n++] = kiln_rsqrt_at(f, l, tmp[4]);
  ir_node *y = kiln_mul_at(f, l, tmp[1], tmp[5]);
  if (weight) tmp[n++] = y, y = kiln_mul_at(f, l, y, weight);
  if (bias) tmp[n++] = y, y = kiln_add_at(f, l, y, bias);
  return fe_done(y, n, tmp);
}

kiln_tensor *kiln_softmax_at(const char *f, int l, kiln_tensor *t, int64_t dim) {
  FE_AS("softmax", softmax(f, l, t, dim));
}
kiln_tensor *kiln_log_softmax_at(const char *f, int l, kiln_tensor *t, int64_t dim) {
  FE_AS("log_softmax", log_softmax(f, l, t, dim));
}
kiln_tensor *kiln_layer_norm_at(const char *f, int l, kiln_tensor *x, int nlast, kiln_tensor *weight,
                                kiln_tensor *bias, double eps) {
  FE_AS("layer_norm", layer_norm(f, l, x, nlast, weight, bias, eps));
}
