/* norms.c: reductions composed of the reduction ops: logsumexp, aminmax,
 * vector_norm, matrix_norm, normalize, cosine_similarity and trace. Each is
 * a few reductions the fuser places in the kernel that reads the rows. */
#include "frontend/frontend.h"

#include <math.h>
#include <string.h>

/* t as a float tensor: integers and bool become float32 (torch's default). */
static ir_node *as_float(const char *f, int l, ir_node *t) {
  return ir_is_float(t->dtype) ? fe_same(t) : kiln_cast_at(f, l, t, KILN_F32);
}

/* n (reduced with keepdim) reshaped as like, the same reduction without it. */
static ir_node *shaped_as(const char *f, int l, ir_node *n, const ir_node *like) {
  return kiln_reshape_at(f, l, n, like->ndim, like->shape);
}

/* ---- logsumexp -------------------------------------------------------------- */
/* log(sum(exp(x - m))) + m with m the max over the dims (0 where it is
 * infinite, so that rows of -inf give -inf, not nan): a max and a sum over
 * each row, one kernel as softmax is. */
static ir_node *logsumexp(const char *f, int l, ir_node *t, int ndims, const int64_t *dims, bool keepdim) {
  ir_node *e = fe_check_arg(f, l, "logsumexp", t, 1);
  if (e) return e;
  ir_node *tmp[10];
  int n = 0;
  ir_node *x = tmp[n++] = as_float(f, l, t);
  if (ir_numel(x->ndim, x->shape) == 0) {   /* nothing to shift by: log(0) = -inf, or an empty result */
    tmp[n++] = kiln_exp_at(f, l, x);
    tmp[n++] = kiln_sum_dims_at(f, l, tmp[1], ndims, dims, keepdim);
    return fe_done(kiln_log_at(f, l, tmp[2]), n, tmp);
  }
  ir_node *m = tmp[n++] = kiln_max_dims_at(f, l, x, ndims, dims, 1);
  tmp[n++] = kiln_abs_at(f, l, m);
  tmp[n++] = kiln_eqs_at(f, l, tmp[2], INFINITY);
  tmp[n++] = kiln_zeros_like_at(f, l, m);
  /* detached: the result does not change with the shift (kiln_grad need
   * not differentiate through the max) */
  tmp[n++] = kiln_where_at(f, l, tmp[3], tmp[4], m);
  ir_node *shift = tmp[n++] = kiln_detach_at(f, l, tmp[5]);
  tmp[n++] = kiln_sub_at(f, l, x, shift);
  tmp[n++] = kiln_exp_at(f, l, tmp[7]);
  ir_node *s = tmp[n++] = kiln_sum_dims_at(f, l, tmp[8], ndims, dims, keepdim);
  ir_node *logs = kiln_log_at(f, l, s);
  ir_node *add = keepdim ? fe_same(shift) : shaped_as(f, l, shift, s);
  ir_node *r = kiln_add_at(f, l, logs, add);
  fe_drop(logs);
  fe_drop(add);
  return fe_done(r, n, tmp);
}

kiln_tensor *kiln_logsumexp_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims, int keepdim) {
  FE_AS("logsumexp", logsumexp(f, l, t, ndims, dims, keepdim));
}

/* ---- aminmax ---------------------------------------------------------------- */
/* Hands out (or releases) the two results; an error in one is both's. */
static void two_results(ir_node *a, ir_node *b, kiln_tensor **oa, kiln_tensor **ob) {
  if (a->status != KILN_OK && b->status == KILN_OK) {
    fe_drop(b);
    b = fe_same(a);
  }
  if (oa) *oa = a;
  else fe_drop(a);
  if (ob) *ob = b;
  else fe_drop(b);
}

void kiln_aminmax_at(const char *f, int l, kiln_tensor *t, kiln_tensor **min, kiln_tensor **max) {
  const char *prev = ir_api_push("aminmax");
  two_results(kiln_min_at(f, l, t), kiln_max_at(f, l, t), min, max);
  ir_api_pop(prev);
}

void kiln_aminmax_dim_at(const char *f, int l, kiln_tensor *t, int64_t dim, int keepdim, kiln_tensor **min,
                         kiln_tensor **max) {
  const char *prev = ir_api_push("aminmax");
  two_results(kiln_min_dims_at(f, l, t, 1, &dim, keepdim), kiln_max_dims_at(f, l, t, 1, &dim, keepdim), min, max);
  ir_api_pop(prev);
}

/* ---- vector_norm, matrix_norm ----------------------------------------------- */
static ir_node *float_input(const char *f, int l, const char *op, ir_node *t) {
  ir_node *e = fe_check_arg(f, l, op, t, 1);
  if (e || ir_is_float(t->dtype)) return e;
  return fe_fail(f, l, KILN_ERR_DTYPE, t, "%s: Expected a floating point tensor as input. Got %s", op,
                 ir_dtypes[t->dtype].name);
}

/* sum(|x|^ord)^(1/ord) over the dims; ord 0 counts nonzeros, +-inf is the
 * largest/smallest |x|, 1 and 2 skip the powers. */
static ir_node *vector_norm(const char *f, int l, ir_node *t, double ord, int ndims, const int64_t *dims, bool keepdim) {
  ir_node *e = float_input(f, l, "vector_norm", t);
  if (e) return e;
  if (isnan(ord)) return fe_fail(f, l, KILN_ERR_ARG, t, "vector_norm: ord must not be nan");
  ir_node *tmp[3];
  if (ord == 0) {
    tmp[0] = kiln_nes_at(f, l, t, 0);
    tmp[1] = kiln_cast_at(f, l, tmp[0], t->dtype);
    return fe_done(kiln_sum_dims_at(f, l, tmp[1], ndims, dims, keepdim), 2, tmp);
  }
  if (ord == 2) {
    tmp[0] = kiln_mul_at(f, l, t, t);
    tmp[1] = kiln_sum_dims_at(f, l, tmp[0], ndims, dims, keepdim);
    return fe_done(kiln_sqrt_at(f, l, tmp[1]), 2, tmp);
  }
  tmp[0] = kiln_abs_at(f, l, t);
  if (isinf(ord))
    return fe_done(ord > 0 ? kiln_max_dims_at(f, l, tmp[0], ndims, dims, keepdim)
                           : kiln_min_dims_at(f, l, tmp[0], ndims, dims, keepdim), 1, tmp);
  if (ord == 1) return fe_done(kiln_sum_dims_at(f, l, tmp[0], ndims, dims, keepdim), 1, tmp);
  tmp[1] = kiln_pows_at(f, l, tmp[0], ord);
  tmp[2] = kiln_sum_dims_at(f, l, tmp[1], ndims, dims, keepdim);
  return fe_done(kiln_pows_at(f, l, tmp[2], 1.0 / ord), 3, tmp);
}

kiln_tensor *kiln_vector_norm_at(const char *f, int l, kiln_tensor *t, double ord, int ndims, const int64_t *dims,
                                 int keepdim) {
  FE_AS("vector_norm", vector_norm(f, l, t, ord, ndims, dims, keepdim));
}

/* The matrix norms that are a reduction of a reduction: the largest or
 * smallest absolute column sum ("1", "-1") or row sum ("inf", "-inf"). */
static ir_node *sum_then_extreme(const char *f, int l, ir_node *t, int64_t sum_dim, int64_t ext_dim, bool largest) {
  ir_node *tmp[2];
  tmp[0] = kiln_abs_at(f, l, t);
  tmp[1] = kiln_sum_dims_at(f, l, tmp[0], 1, &sum_dim, 1);
  return fe_done(largest ? kiln_max_dims_at(f, l, tmp[1], 1, &ext_dim, 1) : kiln_min_dims_at(f, l, tmp[1], 1, &ext_dim, 1),
                 2, tmp);
}

#define MATRIX_ORDS "'fro', '1', '-1', 'inf', '-inf'"

static ir_node *matrix_norm(const char *f, int l, ir_node *t, const char *ord, int dim0, int dim1, bool keepdim) {
  int a = 0, b = 0;
  ir_node *e = float_input(f, l, "matrix_norm", t);
  if (e) return e;
  if (t->ndim < 2)
    return fe_fail(f, l, KILN_ERR_ARG, t, "matrix_norm: The input tensor A must have at least 2 dimensions.");
  if ((e = fe_wrap_dim(f, l, "matrix_norm", t, t->ndim, dim0, &a)) || (e = fe_wrap_dim(f, l, "matrix_norm", t, t->ndim, dim1, &b)))
    return e;
  if (a == b) return fe_fail(f, l, KILN_ERR_ARG, t, "matrix_norm: dims must be different. Got (%d, %d)", dim0, dim1);
  if (!ord) ord = "fro";
  ir_node *r;
  if (!strcmp(ord, "fro")) r = vector_norm(f, l, t, 2, 2, (int64_t[]){a, b}, true);
  else if (!strcmp(ord, "1") || !strcmp(ord, "-1")) r = sum_then_extreme(f, l, t, a, b, ord[0] != '-');
  else if (!strcmp(ord, "inf") || !strcmp(ord, "-inf")) r = sum_then_extreme(f, l, t, b, a, ord[0] != '-');
  else if (!strcmp(ord, "nuc") || !strcmp(ord, "2") || !strcmp(ord, "-2"))
    return fe_fail(f, l, KILN_ERR_ARG, t, "matrix_norm: ord '%s' needs singular values (an SVD), which kiln does not "
                   "support; supported: " MATRIX_ORDS, ord);
  else
    return fe_fail(f, l, KILN_ERR_ARG, t, "matrix_norm: invalid ord '%s'; expected one of " MATRIX_ORDS
                   ", 'nuc', '2', '-2'", ord);
  if (keepdim) return r;
  int64_t shape[KILN_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < t->ndim; d++)
    if (d != a && d != b) shape[n++] = t->shape[d];
  return fe_done(kiln_reshape_at(f, l, r, n, shape), 1, &r);
}

kiln_tensor *kiln_matrix_norm_at(const char *f, int l, kiln_tensor *t, const char *ord, int dim0, int dim1, int keepdim) {
  FE_AS("matrix_norm", matrix_norm(f, l, t, ord, dim0, dim1, keepdim));
}

/* ---- normalize, cosine_similarity, trace ------------------------------------- */
/* F.normalize: t / max(||t||_p along dim, eps). */
static ir_node *normalize(const char *f, int l, ir_node *t, double p, int64_t dim, double eps) {
  ir_node *tmp[2];
  tmp[0] = vector_norm(f, l, t, p, 1, &dim, true);
  tmp[1] = kiln_maximums_at(f, l, tmp[0], eps);
  return fe_done(kiln_div_at(f, l, t, tmp[1]), 2, tmp);
}

kiln_tensor *kiln_normalize_at(const char *f, int l, kiln_tensor *t, double p, int64_t dim, double eps) {
  FE_AS("normalize", normalize(f, l, t, p, dim, eps));
}

/* torch's form: sum(a / max(||a||, eps) * b / max(||b||, eps)) along dim,
 * after broadcasting a and b to one shape. */
static ir_node *cosine_similarity(const char *f, int l, ir_node *a, ir_node *b, int64_t dim, double eps) {
  ir_node *e = fe_check_args(f, l, "cosine_similarity", 2, (ir_node *[]){a, b});
  if (e) return e;
  ir_node *tmp[6];
  tmp[0] = kiln_add_at(f, l, a, b);   /* the broadcast shape, or the shape error */
  if (tmp[0]->status != KILN_OK) return tmp[0];
  tmp[1] = kiln_expand_at(f, l, a, tmp[0]->ndim, tmp[0]->shape);
  tmp[2] = kiln_expand_at(f, l, b, tmp[0]->ndim, tmp[0]->shape);
  tmp[3] = normalize(f, l, tmp[1], 2, dim, eps);
  tmp[4] = normalize(f, l, tmp[2], 2, dim, eps);
  tmp[5] = kiln_mul_at(f, l, tmp[3], tmp[4]);
  return fe_done(kiln_sum_dims_at(f, l, tmp[5], 1, &dim, 0), 6, tmp);
}

kiln_tensor *kiln_cosine_similarity_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b, int64_t dim, double eps) {
  FE_AS("cosine_similarity", cosine_similarity(f, l, a, b, dim, eps));
}

/* The sum of the main diagonal: a sum over a strided view. */
static ir_node *trace(const char *f, int l, ir_node *t) {
  ir_node *e = fe_check_arg(f, l, "trace", t, 1);
  if (e) return e;
  if (t->ndim != 2) return fe_fail(f, l, KILN_ERR_ARG, t, "trace: expected a matrix, but got tensor with dim %d", t->ndim);
  ir_node *d = kiln_diagonal_at(f, l, t, 0, 0, 1);
  return fe_done(kiln_sum_at(f, l, d), 1, &d);
}

kiln_tensor *kiln_trace_at(const char *f, int l, kiln_tensor *t) { FE_AS("trace", trace(f, l, t)); }
