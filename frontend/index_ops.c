/* index_ops.c: indexing with index tensors (gather, take, index_select,
 * embedding, x[i0, i1, ...]) built on GATHER nodes, which fuse into their
 * consumer; scatters on SCATTER* nodes (a kernel each); and the two ops whose
 * shape depends on data (nonzero, masked_select), which realize what decides it. */
#include "frontend/frontend.h"

#include <math.h>

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- checks ------------------------------------------------------------- */
/* "op: <why> (input: float32 (2,3), index: int64 (4,))". */
static ir_node *fail(const char *f, int l, kiln_status st, const ir_node *t, const ir_node *ix, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static ir_node *fail(const char *f, int l, kiln_status st, const ir_node *t, const ir_node *ix, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_node *e = fe_vfail(f, l, st, t, ix, fmt, ap);
  va_end(ap);
  return e;
}

/* The input and the index: usable, on one device, an int64 or int32 index
 * (what torch accepts). NULL, or the error node to return. */
static ir_node *check_index(const char *f, int l, const char *op, ir_node *t, ir_node *ix) {
  ir_node *both[2] = {t, ix};
  ir_node *e = fe_check_args(f, l, op, 2, both);
  if (e || ix->dtype == KILN_I64 || ix->dtype == KILN_I32) return e;
  return fail(f, l, KILN_ERR_DTYPE, t, ix, "%s: expected an int64 or int32 index, got %s", op, ir_dtypes[ix->dtype].name);
}

/* PyTorch's maybe_wrap_dim (a 0-dim tensor takes -1 and 0). */
static ir_node *wrap_dim(const char *f, int l, const char *op, const ir_node *t, int dim, int *out) {
  int n = t->ndim > 0 ? t->ndim : 1;
  if (dim >= -n && dim < n) {
    *out = dim < 0 ? dim + n : dim;
    return NULL;
  }
  return fail(f, l, KILN_ERR_ARG, t, NULL, "%s: Dimension out of range (expected to be in range of [%d, %d], but got %d)",
              op, -n, n - 1, dim);
}

/* No index into an empty dim is in range: known before anything runs. */
static ir_node *check_nonempty(const char *f, int l, const char *op, const ir_node *t, const ir_node *ix, int dim) {
  if (t->shape[dim] != 0 || ir_numel(ix->ndim, ix->shape) == 0) return NULL;
  return fail(f, l, KILN_ERR_ARG, t, ix, "%s: index out of range: dim %d of the input has size 0", op, dim);
}

/* ---- compositions -------------------------------------------------------- */
/* The intermediate handles of a composition, released when it is done. */
typedef struct {
  ir_node *t[64];
  int n;
} temps;

static ir_node *keep(temps *s, ir_node *n) {
  IR_ASSERT(s->n < 64);
  return s->t[s->n++] = n;
}

static ir_node *finish(temps *s, ir_node *result) {
  for (int i = 0; i < s->n; i++) fe_drop(s->t[i]);
  return result;
}

static ir_node *reshape(const char *f, int l, ir_node *t, int ndim, const int64_t *shape) {
  return kiln_reshape_at(f, l, t, ndim, shape);
}

/* A 0-dim operand as a 1-element 1-D one (PyTorch's ensure_nonempty_dim);
 * out of memory an error node, which the caller checks (fe_check_args)
 * before it reads the shape. */
static ir_node *as_1d(const char *f, int l, temps *s, ir_node *t) {
  return keep(s, t->ndim ? fe_same(t) : reshape(f, l, t, 1, (int64_t[]){1}));
}

/* r (kept) reshaped to the 0-dim result an op on 0-dim operands gives
 * (ndim == 0); r itself otherwise. */
static ir_node *unwrap(const char *f, int l, temps *s, ir_node *r, int ndim, const int64_t *shape) {
  return ndim ? fe_same(keep(s, r)) : reshape(f, l, keep(s, r), ndim, shape);
}

/* ---- gather ------------------------------------------------------------- */
/* The GATHER node (shapes checked by the caller). */
static ir_node *gather_node(const char *f, int l, ir_node *t, int dim, ir_node *ix) {
  ir_node *src[2] = {t, ix};
  ir_node *e = fe_check_args(f, l, "gather", 2, src);   /* a failed step of the composition */
  if (e) return e;
  ir_node *n = ir_node_new(IR_GATHER, t->dtype, ix->ndim, ix->shape, 2, src, f, l);
  if (!n) return fe_nomem();
  n->device = t->device;
  n->attr.dim = dim;
  n->attr.compute = t->dtype;
  return fe_finish(n);
}

/* torch.gather's shape rule: the same rank, the index within t along every
 * dim but dim. */
static ir_node *gather_fits(const char *f, int l, const char *op, const ir_node *t, int dim, const ir_node *ix) {
  if (ix->ndim != t->ndim)
    return fail(f, l, KILN_ERR_SHAPE, t, ix, "%s: Index tensor must have the same number of dimensions as input tensor", op);
  for (int d = 0; d < t->ndim; d++)
    if (d != dim && ix->shape[d] > t->shape[d])
      return fail(f, l, KILN_ERR_SHAPE, t, ix, "%s: Size does not match at dimension %d: expected index no larger than "
                  "the input apart from dimension %d", op, d, dim);
  return check_nonempty(f, l, op, t, ix, dim);
}

static ir_node *gather(const char *f, int l, ir_node *t, int dim, ir_node *ix) {
  int d = 0;
  ir_node *e = check_index(f, l, "gather", t, ix);
  if (!e) e = wrap_dim(f, l, "gather", t, dim, &d);
  if (e) return e;
  temps s = {0};
  ir_node *t1 = as_1d(f, l, &s, t), *i1 = as_1d(f, l, &s, ix);
  if ((e = fe_check_args(f, l, "gather", 2, (ir_node *[]){t1, i1})) || (e = gather_fits(f, l, "gather", t1, d, i1)))
    return finish(&s, e);
  return finish(&s, unwrap(f, l, &s, gather_node(f, l, t1, d, i1), ix->ndim, ix->shape));
}

kiln_tensor *kiln_gather_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index) {
  FE_AS("gather", gather(f, l, t, dim, index));
}

/* t and ix broadcast against each other along every dim but dim, then gathered. */
static ir_node *take_along_dim(const char *f, int l, ir_node *t, ir_node *ix, int dim) {
  int d = 0;
  ir_node *e = check_index(f, l, "take_along_dim", t, ix);
  if (!e && ix->ndim != t->ndim)
    e = fail(f, l, KILN_ERR_SHAPE, t, ix, "take_along_dim: input and indices should have the same number of dimensions");
  if (!e) e = wrap_dim(f, l, "take_along_dim", t, dim, &d);
  if (e) return e;
  temps s = {0};
  ir_node *t1 = as_1d(f, l, &s, t), *i1 = as_1d(f, l, &s, ix);
  if ((e = fe_check_args(f, l, "take_along_dim", 2, (ir_node *[]){t1, i1}))) return finish(&s, e);
  int64_t ts[KILN_MAX_DIMS], is[KILN_MAX_DIMS];
  for (int i = 0; i < t1->ndim; i++) {
    int64_t a = t1->shape[i], b = i1->shape[i];
    if (i != d && a != b && a != 1 && b != 1)
      return finish(&s, fail(f, l, KILN_ERR_SHAPE, t, ix, "take_along_dim: shapes cannot broadcast at dimension %d "
                             "(%lld and %lld)", i, (long long)a, (long long)b));
    ts[i] = i == d ? a : a == 1 ? b : a;
    is[i] = i == d ? b : a == 1 ? b : a;
  }
  t1 = keep(&s, kiln_expand_at(f, l, t1, t1->ndim, ts));
  i1 = keep(&s, kiln_expand_at(f, l, i1, i1->ndim, is));
  if ((e = check_nonempty(f, l, "take_along_dim", t1, i1, d))) return finish(&s, e);
  return finish(&s, unwrap(f, l, &s, gather_node(f, l, t1, d, i1), ix->ndim, ix->shape));
}

kiln_tensor *kiln_take_along_dim_at(const char *f, int l, kiln_tensor *t, kiln_tensor *indices, int dim) {
  FE_AS("take_along_dim", take_along_dim(f, l, t, indices, dim));
}

/* The 1-D index laid along dim and broadcast over t's other dims. */
static ir_node *index_select(const char *f, int l, ir_node *t, int dim, ir_node *ix) {
  int d = 0;
  ir_node *e = check_index(f, l, "index_select", t, ix);
  if (!e && ix->ndim > 1) e = fail(f, l, KILN_ERR_SHAPE, t, ix, "index_select: Index is supposed to be a vector");
  if (!e) e = wrap_dim(f, l, "index_select", t, dim, &d);
  if (e) return e;
  temps s = {0};
  ir_node *t1 = as_1d(f, l, &s, t), *i1 = as_1d(f, l, &s, ix);
  if ((e = fe_check_args(f, l, "index_select", 2, (ir_node *[]){t1, i1})) ||
      (e = check_nonempty(f, l, "index_select", t1, i1, d)))
    return finish(&s, e);
  int64_t n = i1->shape[0], along[KILN_MAX_DIMS], out[KILN_MAX_DIMS];
  for (int i = 0; i < t1->ndim; i++) {
    along[i] = i == d ? n : 1;
    out[i] = i == d ? n : t1->shape[i];
  }
  i1 = keep(&s, reshape(f, l, i1, t1->ndim, along));
  i1 = keep(&s, kiln_expand_at(f, l, i1, t1->ndim, out));
  return finish(&s, unwrap(f, l, &s, gather_node(f, l, t1, d, i1), t->ndim, t->shape));
}

kiln_tensor *kiln_index_select_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index) {
  FE_AS("index_select", index_select(f, l, t, dim, index));
}

/* out[k..., r...] = tab[ix[k...], r...]: the table (rows on dim 0) broadcast
 * over the index's leading dims, gathered along the index's last dim. One
 * GATHER whose index is ix itself, broadcast over the row: take, embedding. */
static ir_node *gather_rows(const char *f, int l, const char *op, temps *s, ir_node *tab, ir_node *ix) {
  ir_node *i1 = as_1d(f, l, s, ix), *e = fe_check_arg(f, l, op, i1, 2);
  if (e) return e;
  int k = i1->ndim, r = tab->ndim - 1, nd = k + r;
  if (nd > KILN_MAX_DIMS)
    return fail(f, l, KILN_ERR_SHAPE, tab, ix, "%s: the result would have %d dims (at most KILN_MAX_DIMS, %d)", op, nd, KILN_MAX_DIMS);
  if (tab->shape[0] == 0 && ir_numel(ix->ndim, ix->shape) != 0)
    return fail(f, l, KILN_ERR_ARG, tab, ix, "%s: index out of range in self (the input has no rows)", op);
  int64_t ts[KILN_MAX_DIMS], te[KILN_MAX_DIMS], is[KILN_MAX_DIMS], ie[KILN_MAX_DIMS];
  for (int d = 0; d < nd; d++) {
    ts[d] = d < k - 1 ? 1 : tab->shape[d - k + 1];
    te[d] = d < k - 1 ? i1->shape[d] : ts[d];
    is[d] = d < k ? i1->shape[d] : 1;
    ie[d] = d < k ? i1->shape[d] : tab->shape[d - k + 1];
  }
  ir_node *t1 = keep(s, kiln_expand_at(f, l, keep(s, reshape(f, l, tab, nd, ts)), nd, te));
  ir_node *x1 = keep(s, kiln_expand_at(f, l, keep(s, reshape(f, l, i1, nd, is)), nd, ie));
  ir_node *g = keep(s, gather_node(f, l, t1, k - 1, x1));
  if (ix->ndim) return fe_same(g);
  return reshape(f, l, g, r, tab->shape + 1);   /* a 0-dim index drops its dim */
}

static ir_node *take(const char *f, int l, ir_node *t, ir_node *ix) {
  ir_node *e = check_index(f, l, "take", t, ix);
  if (e) return e;
  temps s = {0};
  return finish(&s, gather_rows(f, l, "take", &s, keep(&s, kiln_flatten_at(f, l, t)), ix));
}

kiln_tensor *kiln_take_at(const char *f, int l, kiln_tensor *t, kiln_tensor *index) {
  FE_AS("take", take(f, l, t, index));
}

static ir_node *embedding(const char *f, int l, ir_node *ix, ir_node *w) {
  ir_node *e = check_index(f, l, "embedding", w, ix);
  if (!e && w->ndim != 2) e = fail(f, l, KILN_ERR_SHAPE, w, ix, "embedding: 'weight' must be 2-D");
  if (e) return e;
  temps s = {0};
  return finish(&s, gather_rows(f, l, "embedding", &s, w, ix));
}

kiln_tensor *kiln_embedding_at(const char *f, int l, kiln_tensor *indices, kiln_tensor *weight) {
  FE_AS("embedding", embedding(f, l, indices, weight));
}

/* ---- x[i0, i1, ...] ------------------------------------------------------- */
/* The index tensors' broadcast shape (NumPy rules), or false. */
static bool broadcast_all(int m, ir_node *const *ix, int *nb, int64_t *bs) {
  *nb = 0;
  for (int j = 0; j < m; j++)
    if (ix[j]->ndim > *nb) *nb = ix[j]->ndim;
  for (int d = 0; d < *nb; d++) bs[d] = 1;
  for (int j = 0; j < m; j++)
    for (int d = 0, off = *nb - ix[j]->ndim; d < ix[j]->ndim; d++) {
      int64_t v = ix[j]->shape[d], *b = &bs[d + off];
      if (v != *b && v != 1 && *b != 1) return false;
      if (*b == 1) *b = v;
    }
  return true;
}

/* A bool mask over t's dims d.. as the index tensors of its true positions
 * (torch: x[mask] is x[mask.nonzero().unbind(1)]); realizes the mask. */
static ir_node *mask_indices(const char *f, int l, temps *s, ir_node *t, ir_node *mask, int d, int *pos, ir_node **use,
                             int *m) {
  if (d + mask->ndim > t->ndim || memcmp(mask->shape, t->shape + d, sizeof(int64_t) * (size_t)mask->ndim))
    return fail(f, l, KILN_ERR_SHAPE, t, mask, "index_tensors: the shape of the mask does not match the indexed dims from %d", d);
  ir_node *nz = keep(s, kiln_nonzero_at(f, l, mask));
  if (nz->status != KILN_OK) return fe_same(nz);
  for (int c = 0; c < mask->ndim; c++) {
    pos[*m] = d + c;
    use[(*m)++] = keep(s, kiln_select_at(f, l, nz, 1, c));
  }
  return NULL;
}

/* The indexed dims (pos[0..m)) and their index tensors (a bool mask covers
 * as many dims as it has); NULL or the error. */
static ir_node *collect_indices(const char *f, int l, temps *s, ir_node *t, int n, kiln_tensor *const *ixs, int *pos,
                                ir_node **use, int *m) {
  ir_node *e = fe_check_arg(f, l, "index_tensors", t, 1);
  if (e || (e = fe_check_list(f, l, "index_tensors", "indices", n, ixs))) return e;
  if (n < 0 || n > t->ndim)
    return fail(f, l, KILN_ERR_ARG, t, NULL, "index_tensors: %d indices for a tensor of dimension %d", n, t->ndim);
  *m = 0;
  for (int i = 0, d = 0; i < n; i++, d++) {
    if (d >= t->ndim)
      return fail(f, l, KILN_ERR_ARG, t, NULL, "index_tensors: too many indices for a tensor of dimension %d", t->ndim);
    if (!ixs[i]) continue;
    if ((e = fe_check_args(f, l, "index_tensors", 2, (ir_node *[]){t, ixs[i]}))) return e;
    bool mask = ixs[i]->dtype == KILN_BOOL;
    if (mask) e = mask_indices(f, l, s, t, ixs[i], d, pos, use, m);
    else if (!(e = check_index(f, l, "index_tensors", t, ixs[i]))) pos[*m] = d, use[(*m)++] = ixs[i];
    if (e) return e;
    if (mask) d += ixs[i]->ndim - 1;
  }
  return NULL;
}

/* PyTorch's advanced indexing: the index tensors broadcast to B; adjacent
 * indexed dims are replaced by B in place, separated ones go first. Built as
 * t with B's dims inserted before the indexed ones (a broadcast), then one
 * GATHER per indexed dim, each collapsing that dim to 1: all of them inline
 * into one index expression. */
static ir_node *index_tensors(const char *f, int l, ir_node *t, int n, kiln_tensor *const *ixs) {
  int pos[KILN_MAX_DIMS], m = 0, nb;
  ir_node *use[KILN_MAX_DIMS];
  int64_t bs[KILN_MAX_DIMS];
  temps s = {0};
  ir_node *e = collect_indices(f, l, &s, t, n, ixs, pos, use, &m);
  if (e || !m) return finish(&s, e ? e : fe_same(t));
  if (!broadcast_all(m, use, &nb, bs))
    return finish(&s, fail(f, l, KILN_ERR_SHAPE, t, use[0],
                           "index_tensors: shape mismatch: indexing tensors could not be broadcast together"));
  int nd = t->ndim + nb;
  if (nd > KILN_MAX_DIMS)
    return finish(&s, fail(f, l, KILN_ERR_SHAPE, t, use[0], "index_tensors: %d dims at most (KILN_MAX_DIMS) while indexing",
                           KILN_MAX_DIMS));
  ir_node *w = t;
  int p = pos[0];
  if (pos[m - 1] - pos[0] != m - 1) {   /* separated: the indexed dims first */
    int64_t perm[KILN_MAX_DIMS];
    int q = 0;
    for (int j = 0; j < m; j++) perm[q++] = pos[j];
    for (int d = 0, j = 0; d < t->ndim; d++)
      if (j < m && pos[j] == d) j++;
      else perm[q++] = d;
    w = keep(&s, kiln_permute_at(f, l, t, t->ndim, perm));
    p = 0;
  }
  int64_t ones[KILN_MAX_DIMS], full[KILN_MAX_DIMS], is[KILN_MAX_DIMS];
  for (int d = 0; d < nd; d++) {
    bool b = d >= p && d < p + nb;
    ones[d] = b ? 1 : w->shape[d < p ? d : d - nb];
    full[d] = b ? bs[d - p] : ones[d];
    is[d] = b ? bs[d - p] : 1;
  }
  w = keep(&s, kiln_expand_at(f, l, keep(&s, reshape(f, l, w, nd, ones)), nd, full));
  for (int j = 0; j < m; j++) {
    int gd = p + nb + j;
    int64_t cur[KILN_MAX_DIMS];
    memcpy(cur, w->shape, sizeof cur);
    cur[gd] = 1;
    ir_node *x = keep(&s, kiln_expand_at(f, l, use[j], nb, bs));
    x = keep(&s, kiln_expand_at(f, l, keep(&s, reshape(f, l, x, nd, is)), nd, cur));
    if ((e = check_nonempty(f, l, "index_tensors", w, x, gd))) return finish(&s, e);
    w = keep(&s, gather_node(f, l, w, gd, x));
  }
  int64_t out[KILN_MAX_DIMS];
  int no = 0;
  for (int d = 0; d < nd; d++)
    if (d < p + nb || d >= p + nb + m) out[no++] = w->shape[d];
  return finish(&s, reshape(f, l, w, no, out));
}

kiln_tensor *kiln_index_tensors_at(const char *f, int l, kiln_tensor *t, int n, kiln_tensor *const *indices) {
  FE_AS("index_tensors", index_tensors(f, l, t, n, indices));
}

/* ---- scatter --------------------------------------------------------------- */
static ir_node *scatter_node(const char *f, int l, ir_op op, ir_node *t, int dim, ir_node *ix, ir_node *src) {
  ir_node *in[3] = {t, ix, src};
  ir_node *e = fe_check_args(f, l, ir_ops[op].name, 3, in);   /* a failed step of the composition */
  if (e) return e;
  ir_node *n = ir_node_new(op, t->dtype, t->ndim, t->shape, 3, in, f, l);
  if (!n) return fe_nomem();
  n->device = t->device;
  n->attr.dim = dim;
  n->attr.compute = t->dtype;
  return fe_finish(n);
}

/* torch.scatter's rules on (1-D or more) operands: one rank; the index no
 * larger than src anywhere, nor than t but along dim; src of t's dtype. */
static ir_node *scatter_fits(const char *f, int l, const char *op, const ir_node *t, int dim, const ir_node *ix,
                             const ir_node *src) {
  if (ix->ndim != t->ndim || (src && src->ndim != t->ndim))
    return fail(f, l, KILN_ERR_SHAPE, t, ix, "%s: Index tensor must have the same number of dimensions as self and src tensors", op);
  for (int d = 0; d < t->ndim; d++)
    if ((d != dim && ix->shape[d] > t->shape[d]) || (src && ix->shape[d] > src->shape[d]))
      return fail(f, l, KILN_ERR_SHAPE, t, ix, "%s: Size does not match at dimension %d: expected index no larger than "
                  "self apart from dimension %d and no larger than src", op, d, dim);
  if (src && src->dtype != t->dtype)
    return fail(f, l, KILN_ERR_DTYPE, t, ix, "%s: Expected self.dtype to be equal to src.dtype (%s and %s)", op,
                ir_dtypes[t->dtype].name, ir_dtypes[src->dtype].name);
  return check_nonempty(f, l, op, t, ix, dim);
}

/* The operands of a scatter, checked, as 1-D or more; src (or a constant
 * value when src is NULL) cut to the index's shape. NULL, or the error. */
typedef struct {
  ir_node *t, *ix, *src;
  int dim;
} scatter_args;

static ir_node *scatter_prepare(const char *f, int l, const char *op, temps *s, ir_node *t, int dim, ir_node *ix,
                                ir_node *src, double value, scatter_args *a) {
  ir_node *e = check_index(f, l, op, t, ix);
  if (!e && src) e = fe_check_args(f, l, op, 2, (ir_node *[]){t, src});
  if (!e) e = wrap_dim(f, l, op, t, dim, &a->dim);
  if (e) return e;
  a->t = as_1d(f, l, s, t);
  a->ix = as_1d(f, l, s, ix);
  a->src = src ? as_1d(f, l, s, src) : NULL;
  if ((e = fe_check_args(f, l, op, src ? 3 : 2, (ir_node *[]){a->t, a->ix, a->src}))) return e;
  if ((e = scatter_fits(f, l, op, a->t, a->dim, a->ix, a->src))) return e;
  if (!src) {
    a->src = keep(s, fe_const_on(f, l, op, a->ix->ndim, a->ix->shape, value, t->dtype, t->device));
    return NULL;
  }
  for (int d = 0; d < a->ix->ndim; d++)
    if (a->src->shape[d] != a->ix->shape[d]) a->src = keep(s, kiln_slice_at(f, l, a->src, d, 0, a->ix->shape[d], 1));
  return NULL;
}

static ir_node *scatter(const char *f, int l, const char *op, ir_op kind, ir_node *t, int dim, ir_node *ix, ir_node *src,
                        double value) {
  temps s = {0};
  scatter_args a;
  ir_node *e = scatter_prepare(f, l, op, &s, t, dim, ix, src, value, &a);
  if (e) return finish(&s, e);
  return finish(&s, unwrap(f, l, &s, scatter_node(f, l, kind, a.t, a.dim, a.ix, a.src), t->ndim, t->shape));
}

kiln_tensor *kiln_scatter_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src) {
  ir_node *e = fe_check_arg(f, l, "scatter", src, 4);
  if (e) return e;
  FE_AS("scatter", scatter(f, l, "scatter", IR_SCATTER, t, dim, index, src, 0));
}
kiln_tensor *kiln_scatters_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index, double value) {
  FE_AS("scatter", scatter(f, l, "scatter", IR_SCATTER, t, dim, index, NULL, value));
}
kiln_tensor *kiln_scatter_add_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src) {
  ir_node *e = fe_check_arg(f, l, "scatter_add", src, 4);
  if (e) return e;
  FE_AS("scatter_add", scatter(f, l, "scatter_add", IR_SCATTER_ADD, t, dim, index, src, 0));
}

/* ---- scatter_reduce ---------------------------------------------------------- */
/* Without include_self, the touched elements first forget t: sum and prod
 * start from 0 and 1, float amax and amin from -inf and inf; integer amax
 * and amin from one of their own values (src scattered), which the
 * reduction then meets again. (A float value met twice would take a share
 * of the gradient twice: kiln_grad splits a maximum among its ties.) */
static ir_node *reduce_into(const char *f, int l, temps *s, ir_op kind, const scatter_args *a, bool include_self) {
  ir_node *base = a->t;
  if (!include_self) {
    ir_node *start = a->src;
    bool extreme = kind == IR_SCATTER_MAX || kind == IR_SCATTER_MIN;
    double identity = !extreme ? kind == IR_SCATTER_MUL : kind == IR_SCATTER_MAX ? -INFINITY : INFINITY;
    if (!extreme || ir_is_float(a->t->dtype))
      start = keep(s, fe_const_on(f, l, "scatter_reduce", a->ix->ndim, a->ix->shape, identity, a->t->dtype, a->t->device));
    base = keep(s, scatter_node(f, l, IR_SCATTER, a->t, a->dim, a->ix, start));
  }
  return scatter_node(f, l, kind, base, a->dim, a->ix, a->src);
}

/* mean = the sum over the count of values (t counting once with
 * include_self); integers divide with floor, as torch does; an element no
 * value reaches keeps t. */
static ir_node *scatter_mean(const char *f, int l, temps *s, const scatter_args *a, bool include_self) {
  ir_node *t = a->t, *sum = keep(s, reduce_into(f, l, s, IR_SCATTER_ADD, a, include_self));
  ir_node *one = keep(s, fe_const_on(f, l, "scatter_reduce", a->ix->ndim, a->ix->shape, 1, KILN_I64, t->device));
  ir_node *base = keep(s, fe_const_on(f, l, "scatter_reduce", t->ndim, t->shape, include_self, KILN_I64, t->device));
  ir_node *cnt = keep(s, scatter_node(f, l, IR_SCATTER_ADD, base, a->dim, a->ix, one)), *q;
  /* at least 1: where no value comes, t is kept and the quotient unused,
   * but its gradient must not be 0 / 0 */
  ir_node *divisor = include_self ? cnt : keep(s, kiln_maximums_at(f, l, cnt, 1));
  if (ir_is_float(t->dtype)) {
    q = keep(s, kiln_cast_at(f, l, keep(s, kiln_div_at(f, l, sum, divisor)), t->dtype));
  } else {
    ir_node *x = keep(s, kiln_cast_at(f, l, sum, KILN_F64)), *y = keep(s, kiln_cast_at(f, l, divisor, KILN_F64));
    q = keep(s, kiln_cast_at(f, l, keep(s, kiln_floor_at(f, l, keep(s, kiln_div_at(f, l, x, y)))), t->dtype));
  }
  if (include_self) return fe_same(q);
  return kiln_where_at(f, l, keep(s, kiln_eqs_at(f, l, cnt, 0)), t, q);
}

static const struct {
  const char *name;
  ir_op kind;       /* IR_SCATTER: mean */
} reductions[] = {{"sum", IR_SCATTER_ADD}, {"prod", IR_SCATTER_MUL}, {"mean", IR_SCATTER}, {"amax", IR_SCATTER_MAX},
                  {"amin", IR_SCATTER_MIN}};

static ir_node *scatter_reduce(const char *f, int l, ir_node *t, int dim, ir_node *ix, ir_node *src, const char *reduce,
                               bool include_self) {
  int r = 0, nr = (int)(sizeof reductions / sizeof *reductions);
  while (r < nr && !(reduce && !strcmp(reduce, reductions[r].name))) r++;
  if (r == nr)
    return fe_error(KILN_ERR_ARG, f, l, "scatter_reduce: reduce argument must be either sum, prod, mean, amax or amin, got %s",
                    reduce ? reduce : "NULL");
  ir_node *e = fe_check_arg(f, l, "scatter_reduce", src, 4);
  if (e) return e;
  temps s = {0};
  scatter_args a;
  if ((e = scatter_prepare(f, l, "scatter_reduce", &s, t, dim, ix, src, 0, &a))) return finish(&s, e);
  ir_node *out = reductions[r].kind == IR_SCATTER ? scatter_mean(f, l, &s, &a, include_self)
                                                  : reduce_into(f, l, &s, reductions[r].kind, &a, include_self);
  return finish(&s, unwrap(f, l, &s, out, t->ndim, t->shape));
}

kiln_tensor *kiln_scatter_reduce_at(const char *f, int l, kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src,
                                    const char *reduce, int include_self) {
  FE_AS("scatter_reduce", scatter_reduce(f, l, t, dim, index, src, reduce, include_self != 0));
}

/* ---- data-dependent shapes -------------------------------------------------- */
/* t realized, on the host and dense (a CUDA tensor is copied); *host holds
 * the handle to release. */
static kiln_status host_copy(const char *f, int l, const char *op, ir_node *t, ir_node **host, const void **data) {
  *host = t->device.type == KILN_CPU ? fe_same(t) : kiln_cpu_at(f, l, t);
  return fe_host_data(f, l, op, *host, data);
}

/* Flat positions of t's nonzero elements (NaN counts), in order; *count of
 * them. NULL with the last error set when memory runs out. */
static int64_t *nonzero_positions(const void *data, kiln_dtype dt, int64_t numel, int64_t *count) {
  int64_t *pos = ir_malloc(sizeof *pos * (size_t)(numel > 0 ? numel : 1));
  if (!pos) return NULL;
  size_t es = ir_dtypes[dt].size;
  *count = 0;
  for (int64_t k = 0; k < numel; k++) {
    const char *p = (const char *)data + (size_t)k * es;
    if (ir_is_float(dt) ? ir_load_f64(p, dt) != 0 : ir_load_i64(p, dt) != 0) pos[(*count)++] = k;
  }
  return pos;
}

/* A host array as a tensor on dev. */
static ir_node *upload(const char *f, int l, temps *s, const int64_t *v, int ndim, const int64_t *shape, kiln_device dev) {
  ir_node *h = kiln_from_data_at(f, l, v, KILN_I64, ndim, shape);
  return dev.type == KILN_CPU ? h : kiln_to_at(f, l, keep(s, h), dev);
}

/* The positions where t is nonzero, or the error node. */
static ir_node *positions(const char *f, int l, const char *op, temps *s, ir_node *t, int64_t **pos, int64_t *count) {
  ir_node *host;
  const void *data;
  kiln_status st = host_copy(f, l, op, t, &host, &data);
  keep(s, host);
  if (st != KILN_OK) return fe_error(st, f, l, "%s", kiln_last_error());
  *pos = nonzero_positions(data, t->dtype, ir_numel(t->ndim, t->shape), count);
  return *pos ? NULL : fe_error(KILN_ERR_MEMORY, f, l, "%s: out of memory", op);
}

static ir_node *nonzero(const char *f, int l, ir_node *t) {
  ir_node *e = fe_check_arg(f, l, "nonzero", t, 1);
  if (e) return e;
  temps s = {0};
  int64_t *pos, count;
  if ((e = positions(f, l, "nonzero", &s, t, &pos, &count))) return finish(&s, e);
  int64_t *rows = ir_malloc(sizeof *rows * (size_t)(count * t->ndim > 0 ? count * t->ndim : 1));
  if (!rows) {
    free(pos);
    return finish(&s, fe_error(KILN_ERR_MEMORY, f, l, "nonzero: out of memory"));
  }
  for (int64_t c = 0; c < count; c++) {
    int64_t k = pos[c];
    for (int d = t->ndim - 1; d >= 0; d--) {
      rows[c * t->ndim + d] = k % t->shape[d];
      k /= t->shape[d];
    }
  }
  free(pos);
  ir_node *out = upload(f, l, &s, rows, 2, (int64_t[]){count, t->ndim}, t->device);
  free(rows);
  return finish(&s, out);
}

kiln_tensor *kiln_nonzero_at(const char *f, int l, kiln_tensor *t) { FE_AS("nonzero", nonzero(f, l, t)); }

/* The mask broadcast with t, realized; then a take of t's elements at its
 * nonzero positions, which fuses into what reads the result. */
static ir_node *masked_select(const char *f, int l, ir_node *t, ir_node *mask) {
  ir_node *e = fe_check_args(f, l, "masked_select", 2, (ir_node *[]){t, mask});
  if (!e && mask->dtype != KILN_BOOL)
    e = fail(f, l, KILN_ERR_DTYPE, t, mask, "masked_select: expected BoolTensor for mask, got %s", ir_dtypes[mask->dtype].name);
  if (e) return e;
  int nb;
  int64_t bs[KILN_MAX_DIMS];
  if (!broadcast_all(2, (ir_node *[]){t, mask}, &nb, bs))
    return fail(f, l, KILN_ERR_SHAPE, t, mask, "masked_select: the mask cannot broadcast to the input");
  temps s = {0};
  ir_node *tb = keep(&s, kiln_expand_at(f, l, t, nb, bs));
  ir_node *mb = keep(&s, kiln_expand_at(f, l, mask, nb, bs));
  int64_t *pos, count;
  if ((e = positions(f, l, "masked_select", &s, mb, &pos, &count))) return finish(&s, e);
  ir_node *at = keep(&s, upload(f, l, &s, pos, 1, &count, t->device));
  free(pos);
  return finish(&s, gather_rows(f, l, "masked_select", &s, keep(&s, kiln_flatten_at(f, l, tb)), at));
}

kiln_tensor *kiln_masked_select_at(const char *f, int l, kiln_tensor *t, kiln_tensor *mask) {
  FE_AS("masked_select", masked_select(f, l, t, mask));
}
