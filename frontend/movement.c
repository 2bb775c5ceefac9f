/* movement.c: the movement ops (reshape, view, permute, expand, squeeze,
 * slice, select, flip, pad, cat, ...). Each checks its arguments with
 * PyTorch's rules and builds a zero-copy node: lowering turns it into index
 * arithmetic inside whichever kernel reads it, so no op here runs a kernel. */
#include "frontend/frontend.h"
#include "runtime/rt.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors and dims ---------------------------------------------------- */
ir_node *fe_vfail(const char *f, int l, kiln_status st, const ir_node *t, const ir_node *ix, const char *fmt,
                  va_list ap) {
  ir_str b = {0};
  ir_str_vprintf(&b, fmt, ap);
  ir_str_printf(&b, " (input: ");
  fe_describe(&b, t);
  if (ix) {
    ir_str_printf(&b, ", index: ");
    fe_describe(&b, ix);
  }
  ir_node *e = fe_error(st, f, l, "%s)", b.s);
  ir_str_free(&b);
  return e;
}

ir_node *fe_fail(const char *f, int l, kiln_status st, const ir_node *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ir_node *e = fe_vfail(f, l, st, t, NULL, fmt, ap);
  va_end(ap);
  return e;
}

ir_node *fe_wrap_dim(const char *f, int l, const char *op, const ir_node *t, int ndim, int64_t dim, int *out) {
  int n = ndim > 0 ? ndim : 1;
  if (dim >= -n && dim < n) {
    *out = (int)(dim < 0 ? dim + n : dim);
    return NULL;
  }
  return fe_fail(f, l, KILN_ERR_ARG, t, "%s: Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
              op, -n, n - 1, (long long)dim);
}

static ir_node *check_ndim(const char *f, int l, const char *op, const ir_node *t, int ndim) {
  if (ndim >= 0 && ndim <= KILN_MAX_DIMS) return NULL;
  return fe_fail(f, l, KILN_ERR_ARG, t, "%s: %d dims is outside 0..KILN_MAX_DIMS (%d)", op, ndim, KILN_MAX_DIMS);
}

static bool same_shape(const ir_node *t, int ndim, const int64_t *shape) {
  return t->ndim == ndim && (!ndim || !memcmp(t->shape, shape, (size_t)ndim * sizeof *shape));
}

/* ---- building ----------------------------------------------------------- */
/* An unregistered movement node over src; the caller fills in attributes and
 * the strides PyTorch's view would have (ir_node_new starts contiguous). */
static ir_node *move_new(const char *f, int l, ir_op op, ir_node *src, int ndim, const int64_t *shape) {
  ir_node *n = ir_node_new(op, src->dtype, ndim, shape, 1, &src, f, l);
  if (!n) return NULL;
  n->device = src->device;
  n->attr.compute = src->dtype;
  return n;
}

/* A view launches no kernel, even in eager mode; only bounded laziness (the
 * pending chain growing past KILN_MAX_PENDING) realizes it. */
static ir_node *finish(ir_node *n) {
  rt_options *o = rt_opts();
  if (!n) return fe_nomem();
  if (kiln_get_eager() && n->pending <= o->max_pending) return fe_register(n);
  return fe_finish(n);
}

ir_node *fe_finish_view(ir_node *n) { return finish(n); }

/* Tensors are immutable, so an op that changes nothing returns its input. */
static ir_node *same(ir_node *t) {
  ir_node_retain(t);
  return t;
}

/* PyTorch's computeStride: the strides that view t's elements as the new
 * shape without copying, or false when a new dim would span two chunks of t
 * that are not contiguous with each other. */
static bool view_strides(const ir_node *t, int ndim, const int64_t *shape, int64_t *out) {
  if (t->ndim == 0 || ir_numel(t->ndim, t->shape) == 0) {
    ir_contiguous_strides(ndim, shape, out);
    return true;
  }
  int vd = ndim - 1;
  int64_t chunk = t->strides[t->ndim - 1], tnumel = 1, vnumel = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    tnumel *= t->shape[d];
    if (d > 0 && (t->shape[d - 1] == 1 || t->strides[d - 1] == tnumel * chunk)) continue;
    while (vd >= 0 && (vnumel < tnumel || shape[vd] == 1)) {
      out[vd] = vnumel * chunk;
      vnumel *= shape[vd--];
    }
    if (vnumel != tnumel) return false;
    if (d > 0) {
      chunk = t->strides[d - 1];
      tnumel = vnumel = 1;
    }
  }
  return vd == -1;
}

/* A RESHAPE to a shape of the same numel. Its strides are the view's when
 * one exists, else contiguous (PyTorch's reshape copies then). */
static ir_node *reshape_node(const char *f, int l, ir_node *t, int ndim, const int64_t *shape) {
  if (same_shape(t, ndim, shape)) return same(t);
  ir_node *n = move_new(f, l, IR_RESHAPE, t, ndim, shape);
  int64_t st[KILN_MAX_DIMS];
  if (n && view_strides(t, ndim, shape, st)) memcpy(n->strides, st, (size_t)ndim * sizeof *st);
  return n;
}

static ir_node *permute_node(const char *f, int l, ir_node *t, const int *perm) {
  if (t->op == IR_PERMUTE) {   /* a permute of a permute is one permute of the first's source */
    int composed[KILN_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) composed[d] = t->attr.perm[perm[d]];
    return permute_node(f, l, t->src[0], composed);
  }
  int64_t shape[KILN_MAX_DIMS];
  bool identity = true;
  for (int d = 0; d < t->ndim; d++) {
    shape[d] = t->shape[perm[d]];
    identity = identity && perm[d] == d;
  }
  if (identity) return same(t);
  ir_node *n = move_new(f, l, IR_PERMUTE, t, t->ndim, shape);
  for (int d = 0; n && d < t->ndim; d++) {
    n->attr.perm[d] = perm[d];
    n->strides[d] = t->strides[perm[d]];
  }
  return n;
}

/* ---- reshape and view --------------------------------------------------- */
/* shape with its one -1 resolved into out; NULL or the error node. */
static ir_node *infer_shape(const char *f, int l, const char *op, ir_node *t, int ndim, const int64_t *shape,
                            int64_t *out) {
  ir_node *e = check_ndim(f, l, op, t, ndim);
  if (e) return e;
  if (ndim && !shape) return fe_fail(f, l, KILN_ERR_ARG, t, "%s: shape is NULL", op);
  int infer = -1;
  for (int d = 0; d < ndim; d++) {
    out[d] = shape[d] == -1 ? 1 : shape[d];
    if (shape[d] == -1 && infer >= 0) return fe_fail(f, l, KILN_ERR_ARG, t, "%s: only one dimension can be inferred", op);
    if (shape[d] == -1) infer = d;
    else if (shape[d] < 0) return fe_fail(f, l, KILN_ERR_ARG, t, "%s: invalid shape dimension %lld", op, (long long)shape[d]);
  }
  int64_t have = ir_numel(t->ndim, t->shape), known = ir_numel(ndim, out);
  ir_str s = {0};
  ir_str_shape(&s, ndim, shape);
  if (infer >= 0 && known == 0 && have == 0)
    e = fe_fail(f, l, KILN_ERR_SHAPE, t, "%s: cannot reshape tensor of 0 elements into shape %s because the "
             "unspecified dimension size -1 can be any value and is ambiguous", op, s.s);
  else if (infer >= 0 && known > 0 && have % known == 0)
    out[infer] = have / known;
  else if (infer >= 0 || known != have)
    e = fe_fail(f, l, KILN_ERR_SHAPE, t, "%s: shape %s is invalid for input of size %lld", op, s.s, (long long)have);
  ir_str_free(&s);
  return e;
}

kiln_tensor *kiln_reshape_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *shape) {
  int64_t s[KILN_MAX_DIMS];
  ir_node *e = fe_check_arg(f, l, "reshape", t, 1);
  if (e || (e = infer_shape(f, l, "reshape", t, ndim, shape, s))) return e;
  return finish(reshape_node(f, l, t, ndim, s));
}

kiln_tensor *kiln_view_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *shape) {
  int64_t s[KILN_MAX_DIMS], st[KILN_MAX_DIMS];
  ir_node *e = fe_check_arg(f, l, "view", t, 1);
  if (e || (e = infer_shape(f, l, "view", t, ndim, shape, s))) return e;
  if (!view_strides(t, ndim, s, st)) {
    ir_str b = {0};
    ir_str_shape(&b, ndim, s);
    e = fe_fail(f, l, KILN_ERR_SHAPE, t, "view: view size %s is not compatible with input tensor's size and stride "
             "(at least one dimension spans across two contiguous subspaces). Use reshape(...) instead.", b.s);
    ir_str_free(&b);
    return e;
  }
  return finish(reshape_node(f, l, t, ndim, s));
}

/* ---- permute, transpose, T ---------------------------------------------- */
kiln_tensor *kiln_permute_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *dims) {
  ir_node *e = fe_check_arg(f, l, "permute", t, 1);
  if (e) return e;
  if ((e = fe_check_list(f, l, "permute", "dims", ndim, dims))) return e;
  if (ndim != t->ndim)
    return fe_fail(f, l, KILN_ERR_ARG, t, "permute: number of dims don't match (the input has %d, %d were given)",
                t->ndim, ndim);
  int perm[KILN_MAX_DIMS];
  unsigned seen = 0;
  for (int d = 0; d < ndim; d++) {
    if ((e = fe_wrap_dim(f, l, "permute", t, t->ndim, dims[d], &perm[d]))) return e;
    if (seen >> perm[d] & 1) return fe_fail(f, l, KILN_ERR_ARG, t, "permute: duplicate dims are not allowed (dim %d)", perm[d]);
    seen |= 1u << perm[d];
  }
  return finish(permute_node(f, l, t, perm));
}

kiln_tensor *kiln_transpose_at(const char *f, int l, kiln_tensor *t, int d0, int d1) {
  int a = 0, b = 0, perm[KILN_MAX_DIMS];
  ir_node *e = fe_check_arg(f, l, "transpose", t, 1);
  if (e || (e = fe_wrap_dim(f, l, "transpose", t, t->ndim, d0, &a)) || (e = fe_wrap_dim(f, l, "transpose", t, t->ndim, d1, &b)))
    return e;
  if (t->ndim == 0) return fe_register(same(t));
  for (int d = 0; d < t->ndim; d++) perm[d] = d;
  perm[a] = b;
  perm[b] = a;
  return finish(permute_node(f, l, t, perm));
}

kiln_tensor *kiln_T_at(const char *f, int l, kiln_tensor *t) {
  ir_node *e = fe_check_arg(f, l, "T", t, 1);
  if (e) return e;
  if (t->ndim != 2) return fe_fail(f, l, KILN_ERR_ARG, t, "T: expected a 2-D tensor; use permute or transpose for other ranks");
  return finish(permute_node(f, l, t, (const int[]){1, 0}));
}

/* ---- expand --------------------------------------------------------------- */
/* Size of output dim d of an expand to shape; NULL or the error node. */
static ir_node *expand_dim(const char *f, int l, ir_node *t, int ndim, const int64_t *shape, int d, int64_t *out) {
  int j = d - (ndim - t->ndim);
  if (j < 0 && shape[d] == -1)
    return fe_fail(f, l, KILN_ERR_ARG, t, "expand: the expanded size of the tensor (-1) isn't allowed in a leading, "
                "non-existing dimension %d", d);
  *out = shape[d] == -1 ? t->shape[j] : shape[d];
  if (*out < 0) return fe_fail(f, l, KILN_ERR_ARG, t, "expand: invalid size %lld at dimension %d", (long long)*out, d);
  if (j < 0 || t->shape[j] == 1 || t->shape[j] == *out) return NULL;
  ir_str s = {0};
  ir_str_shape(&s, ndim, shape);
  ir_node *e = fe_fail(f, l, KILN_ERR_SHAPE, t, "expand: the expanded size of the tensor (%lld) must match the existing "
                    "size (%lld) at non-singleton dimension %d; target sizes %s", (long long)*out,
                    (long long)t->shape[j], d, s.s);
  ir_str_free(&s);
  return e;
}

kiln_tensor *kiln_expand_at(const char *f, int l, kiln_tensor *t, int ndim, const int64_t *shape) {
  ir_node *e = fe_check_arg(f, l, "expand", t, 1);
  if (e || (e = check_ndim(f, l, "expand", t, ndim))) return e;
  if (ndim && !shape) return fe_fail(f, l, KILN_ERR_ARG, t, "expand: shape is NULL");
  if (ndim < t->ndim)
    return fe_fail(f, l, KILN_ERR_ARG, t, "expand: the number of sizes provided (%d) must be greater or equal to the "
                "number of dimensions in the tensor (%d)", ndim, t->ndim);
  int64_t s[KILN_MAX_DIMS];
  for (int d = 0; d < ndim; d++)
    if ((e = expand_dim(f, l, t, ndim, shape, d, &s[d]))) return e;
  if (ir_numel(ndim, s) < 0) return fe_fail(f, l, KILN_ERR_SHAPE, t, "expand: the result has more elements than int64 can count");
  if (same_shape(t, ndim, s)) return fe_register(same(t));
  ir_node *n = move_new(f, l, IR_EXPAND, t, ndim, s);
  if (!n) return fe_nomem();
  int off = ndim - t->ndim;
  for (int d = 0; d < ndim; d++)
    n->strides[d] = d < off || t->shape[d - off] != s[d] ? 0 : t->strides[d - off];
  return finish(n);
}

/* ---- squeeze, unsqueeze, flatten (reshapes) ------------------------------ */
kiln_tensor *kiln_squeeze_at(const char *f, int l, kiln_tensor *t) {
  ir_node *e = fe_check_arg(f, l, "squeeze", t, 1);
  if (e) return e;
  int64_t s[KILN_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] != 1) s[n++] = t->shape[d];
  return finish(reshape_node(f, l, t, n, s));
}

kiln_tensor *kiln_squeeze_dim_at(const char *f, int l, kiln_tensor *t, int dim) {
  int d = 0;
  ir_node *e = fe_check_arg(f, l, "squeeze", t, 1);
  if (e || (e = fe_wrap_dim(f, l, "squeeze", t, t->ndim, dim, &d))) return e;
  if (t->ndim == 0 || t->shape[d] != 1) return fe_register(same(t));
  int64_t s[KILN_MAX_DIMS];
  memcpy(s, t->shape, sizeof s);
  memmove(s + d, s + d + 1, (size_t)(t->ndim - d - 1) * sizeof *s);
  return finish(reshape_node(f, l, t, t->ndim - 1, s));
}

kiln_tensor *kiln_unsqueeze_at(const char *f, int l, kiln_tensor *t, int dim) {
  int d = 0;
  ir_node *e = fe_check_arg(f, l, "unsqueeze", t, 1);
  if (e || (e = check_ndim(f, l, "unsqueeze", t, t->ndim + 1)) ||
      (e = fe_wrap_dim(f, l, "unsqueeze", t, t->ndim + 1, dim, &d)))
    return e;
  int64_t s[KILN_MAX_DIMS];
  memcpy(s, t->shape, (size_t)d * sizeof *s);
  s[d] = 1;
  memcpy(s + d + 1, t->shape + d, (size_t)(t->ndim - d) * sizeof *s);
  return finish(reshape_node(f, l, t, t->ndim + 1, s));
}

kiln_tensor *kiln_flatten_dims_at(const char *f, int l, kiln_tensor *t, int start, int end) {
  int a = 0, b = 0;
  ir_node *e = fe_check_arg(f, l, "flatten", t, 1);
  if (e || (e = fe_wrap_dim(f, l, "flatten", t, t->ndim, start, &a)) || (e = fe_wrap_dim(f, l, "flatten", t, t->ndim, end, &b)))
    return e;
  if (a > b) return fe_fail(f, l, KILN_ERR_ARG, t, "flatten: start_dim (%d) cannot come after end_dim (%d)", start, end);
  if (t->ndim == 0) return finish(reshape_node(f, l, t, 1, (const int64_t[]){1}));
  int64_t s[KILN_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (d <= a || d > b) s[n++] = t->shape[d];
    else s[n - 1] *= t->shape[d];
  }
  return finish(reshape_node(f, l, t, n, s));
}

kiln_tensor *kiln_flatten_at(const char *f, int l, kiln_tensor *t) { return kiln_flatten_dims_at(f, l, t, 0, -1); }

/* ---- slice and select --------------------------------------------------- */
/* Python's rule: negative counts from the end, then clamp into [0, size]. */
static int64_t clamp_bound(int64_t v, int64_t size) {
  if (v < 0) v = v < -size ? 0 : v + size;
  return v > size ? size : v;
}

kiln_tensor *kiln_slice_at(const char *f, int l, kiln_tensor *t, int dim, int64_t start, int64_t stop, int64_t step) {
  int d = 0;
  ir_node *e = fe_check_arg(f, l, "slice", t, 1);
  if (e) return e;
  if (t->ndim == 0) return fe_fail(f, l, KILN_ERR_ARG, t, "slice: cannot be applied to a 0-dim tensor");
  if ((e = fe_wrap_dim(f, l, "slice", t, t->ndim, dim, &d))) return e;
  if (step <= 0) return fe_fail(f, l, KILN_ERR_ARG, t, "slice: step must be positive, got %lld", (long long)step);
  int64_t size = t->shape[d], lo = clamp_bound(start, size), hi = clamp_bound(stop, size);
  int64_t s[KILN_MAX_DIMS];
  memcpy(s, t->shape, sizeof s);
  s[d] = hi > lo ? (hi - lo - 1) / step + 1 : 0;
  if (s[d] == size) return fe_register(same(t));
  ir_node *n = move_new(f, l, IR_SLICE, t, t->ndim, s);
  if (!n) return fe_nomem();
  n->attr.dim = d;
  n->attr.index = lo;
  n->attr.stride = step;
  memcpy(n->strides, t->strides, sizeof n->strides);
  if (s[d] > 1) n->strides[d] *= step;   /* a step past the end never scales anything */
  return finish(n);
}

kiln_tensor *kiln_select_at(const char *f, int l, kiln_tensor *t, int dim, int64_t index) {
  int d = 0;
  ir_node *e = fe_check_arg(f, l, "select", t, 1);
  if (e) return e;
  if (t->ndim == 0) return fe_fail(f, l, KILN_ERR_ARG, t, "select: cannot be applied to a 0-dim tensor");
  if ((e = fe_wrap_dim(f, l, "select", t, t->ndim, dim, &d))) return e;
  int64_t size = t->shape[d];
  if (index < -size || index >= size)
    return fe_fail(f, l, KILN_ERR_ARG, t, "select: index %lld out of range for dimension %d of size %lld",
                (long long)index, d, (long long)size);
  int64_t s[KILN_MAX_DIMS], st[KILN_MAX_DIMS];
  for (int i = 0, j = 0; i < t->ndim; i++)
    if (i != d) s[j] = t->shape[i], st[j++] = t->strides[i];
  ir_node *n = move_new(f, l, IR_SELECT, t, t->ndim - 1, s);
  if (!n) return fe_nomem();
  n->attr.dim = d;
  n->attr.index = index < 0 ? index + size : index;
  memcpy(n->strides, st, sizeof st);
  return finish(n);
}

/* ---- flip and pad (copies in PyTorch: their strides stay contiguous) ---- */
kiln_tensor *kiln_flip_at(const char *f, int l, kiln_tensor *t, int ndims, const int64_t *dims) {
  ir_node *e = fe_check_arg(f, l, "flip", t, 1);
  if (e) return e;
  if ((e = fe_check_list(f, l, "flip", "dims", ndims, dims))) return e;
  if (ndims < 0) return fe_fail(f, l, KILN_ERR_ARG, t, "flip: bad list of %d dims", ndims);
  unsigned mask = 0;
  for (int i = 0; i < ndims; i++) {
    int d = 0;
    if ((e = fe_wrap_dim(f, l, "flip", t, t->ndim, dims[i], &d))) return e;
    if (mask >> d & 1) return fe_fail(f, l, KILN_ERR_ARG, t, "flip: dim %d appears multiple times in the list of dims", d);
    mask |= 1u << d;
  }
  for (int d = 0; d < t->ndim; d++)   /* reversing a dim of size 0 or 1 changes nothing */
    if (t->shape[d] <= 1) mask &= ~(1u << d);
  if (t->ndim == 0 || !mask) return fe_register(same(t));
  ir_node *n = move_new(f, l, IR_FLIP, t, t->ndim, t->shape);
  if (!n) return fe_nomem();
  n->attr.flip_mask = mask;
  return finish(n);
}

kiln_tensor *kiln_pad_at(const char *f, int l, kiln_tensor *t, int npads, const int64_t *pads, double value) {
  ir_node *e = fe_check_arg(f, l, "pad", t, 1);
  if (e) return e;
  if ((e = fe_check_list(f, l, "pad", "pads", npads, pads))) return e;
  if (npads < 0 || npads % 2)
    return fe_fail(f, l, KILN_ERR_ARG, t, "pad: padding length must be divisible by 2, got %d", npads);
  if (npads / 2 > t->ndim)
    return fe_fail(f, l, KILN_ERR_ARG, t, "pad: padding length too large (%d pairs for %d dims)", npads / 2, t->ndim);
  int64_t s[KILN_MAX_DIMS], pad[KILN_MAX_DIMS][2] = {{0}};
  bool any = false;
  for (int p = 0; p < npads / 2; p++) {
    int d = t->ndim - 1 - p;
    pad[d][0] = pads[2 * p];
    pad[d][1] = pads[2 * p + 1];
    any = any || pad[d][0] || pad[d][1];
  }
  for (int d = 0; d < t->ndim; d++) {
    if (__builtin_add_overflow(t->shape[d], pad[d][0], &s[d]) || __builtin_add_overflow(s[d], pad[d][1], &s[d]) || s[d] < 0)
      return fe_fail(f, l, KILN_ERR_SHAPE, t, "pad: the input size %lld, plus padding %lld and %lld resulted in an invalid "
                  "output size at dimension %d", (long long)t->shape[d], (long long)pad[d][0], (long long)pad[d][1], d);
  }
  if (ir_numel(t->ndim, s) < 0) return fe_fail(f, l, KILN_ERR_SHAPE, t, "pad: the result has more elements than int64 can count");
  if (!any) return fe_register(same(t));
  ir_node *n = move_new(f, l, IR_PAD, t, t->ndim, s);
  if (!n) return fe_nomem();
  memcpy(n->attr.pad, pad, sizeof pad);
  n->attr.value = value;
  return finish(n);
}

/* ---- cat and stack ------------------------------------------------------ */
/* PyTorch still skips 1-D empty tensors in cat, whatever the others' shapes. */
static bool legacy_empty(const ir_node *t) { return t->ndim == 1 && t->shape[0] == 0; }

/* NULL/error/device checks of a list of tensors. */
static ir_node *check_list(const char *f, int l, const char *op, int n, kiln_tensor *const *ts) {
  ir_node *e = fe_check_list(f, l, op, "the list of tensors", n, ts);
  if (e) return e;
  if (n < 1) return fe_error(KILN_ERR_ARG, f, l, "%s: expected a non-empty list of tensors", op);
  return fe_check_args(f, l, op, n, ts);
}

/* Tensor i matches ref in every dim but d. */
static ir_node *check_cat_shape(const char *f, int l, const char *op, ir_node *ref, ir_node *t, int i, int d) {
  if (t->ndim == 0) return fe_fail(f, l, KILN_ERR_ARG, t, "%s: zero-dimensional tensor (at position %d) cannot be concatenated", op, i);
  for (int j = 0; j < ref->ndim; j++) {
    if (t->ndim == ref->ndim && (j == d || t->shape[j] == ref->shape[j])) continue;
    ir_str a = {0}, b = {0};
    ir_str_shape(&a, ref->ndim, ref->shape);
    ir_str_shape(&b, t->ndim, t->shape);
    ir_node *e = fe_error(KILN_ERR_SHAPE, f, l, "%s: sizes of tensors must match except in dimension %d; expected %s "
                          "but got %s for tensor number %d in the list", op, d, a.s, b.s, i);
    ir_str_free(&a);
    ir_str_free(&b);
    return e;
  }
  return NULL;
}

/* A left-leaning chain of binary CATs over the tensors that are not legacy
 * empties; each link has the promoted dtype of the tensors so far. */
static ir_node *cat_chain(const char *f, int l, int n, ir_node *const *ts, int d) {
  ir_node *acc = NULL;
  for (int i = 0; i < n; i++) {
    if (legacy_empty(ts[i]) && !(i == n - 1 && !acc)) continue;
    if (!acc) {
      acc = same(ts[i]);
      continue;
    }
    int64_t s[KILN_MAX_DIMS];
    memcpy(s, acc->shape, sizeof s);
    s[d] += ts[i]->shape[d];
    ir_node *src[2] = {acc, ts[i]};
    ir_node *c = ir_node_new(IR_CAT, ir_promote(acc->dtype, ts[i]->dtype), acc->ndim, s, 2, src, f, l);
    if (!c) {
      ir_node_release(acc);
      return NULL;
    }
    c->device = acc->device;
    c->attr.compute = c->dtype;
    c->attr.dim = d;
    ir_node_release(acc);
    acc = c;
  }
  return acc;
}

kiln_tensor *kiln_cat_at(const char *f, int l, int n, kiln_tensor *const *ts, int dim) {
  ir_node *e = check_list(f, l, "cat", n, ts), *ref = NULL;
  if (e) return e;
  int first = 0;
  while (first < n - 1 && legacy_empty(ts[first])) first++;
  ref = ts[first];
  int d = 0;
  if (ref->ndim == 0) return fe_fail(f, l, KILN_ERR_ARG, ref, "cat: zero-dimensional tensor (at position %d) cannot be concatenated", first);
  if ((e = fe_wrap_dim(f, l, "cat", ref, ref->ndim, dim, &d))) return e;
  int64_t total = 0;
  for (int i = first; i < n; i++) {
    if (legacy_empty(ts[i])) continue;
    if ((e = check_cat_shape(f, l, "cat", ref, ts[i], i, d))) return e;
    if (__builtin_add_overflow(total, ts[i]->shape[d], &total))
      return fe_error(KILN_ERR_SHAPE, f, l, "cat: the result has more elements than int64 can count");
  }
  int64_t s[KILN_MAX_DIMS];
  memcpy(s, ref->shape, sizeof s);
  s[d] = total;
  if ((e = fe_check_numel(f, l, "cat", ref->ndim, s))) return e;
  return finish(cat_chain(f, l, n, ts, d));
}

kiln_tensor *kiln_stack_at(const char *f, int l, int n, kiln_tensor *const *ts, int dim) {
  ir_node *e = check_list(f, l, "stack", n, ts);
  if (e) return e;
  int d = 0;
  if ((e = check_ndim(f, l, "stack", ts[0], ts[0]->ndim + 1)) || (e = fe_wrap_dim(f, l, "stack", ts[0], ts[0]->ndim + 1, dim, &d)))
    return e;
  for (int i = 1; i < n; i++) {
    if (same_shape(ts[i], ts[0]->ndim, ts[0]->shape)) continue;
    ir_str a = {0}, b = {0};
    ir_str_shape(&a, ts[0]->ndim, ts[0]->shape);
    ir_str_shape(&b, ts[i]->ndim, ts[i]->shape);
    e = fe_error(KILN_ERR_SHAPE, f, l, "stack: expects each tensor to be equal size, but got %s at entry 0 and %s at entry %d",
                 a.s, b.s, i);
    ir_str_free(&a);
    ir_str_free(&b);
    return e;
  }
  int64_t s[KILN_MAX_DIMS];
  memcpy(s, ts[0]->shape, (size_t)d * sizeof *s);
  s[d] = n;
  memcpy(s + d + 1, ts[0]->shape + d, (size_t)(ts[0]->ndim - d) * sizeof *s);
  if ((e = fe_check_numel(f, l, "stack", ts[0]->ndim + 1, s))) return e;
  ir_node **u = ir_calloc((size_t)n, sizeof *u);
  if (!u) return fe_error(KILN_ERR_MEMORY, f, l, "stack: out of memory");
  s[d] = 1;
  memcpy(s + d + 1, ts[0]->shape + d, (size_t)(ts[0]->ndim - d) * sizeof *s);
  bool built = true;
  for (int i = 0; i < n; i++) built &= (u[i] = reshape_node(f, l, ts[i], ts[0]->ndim + 1, s)) != NULL;
  ir_node *r = built ? cat_chain(f, l, n, u, d) : NULL;
  for (int i = 0; i < n; i++) ir_node_release(u[i]);
  free(u);
  return finish(r);
}
