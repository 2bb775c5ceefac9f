/* matmul.c: the matrix products (matmul, mm, dot, linear) with PyTorch's
 * rules. Each becomes one MATMUL node [...,M,K] x [...,K,N] with equal batch
 * dims; 1-D promotion and batch broadcasting are zero-copy movement ops
 * around it, so transposed or expanded operands are read in place. */
#include "frontend/frontend.h"

#include <stdio.h>
#include <string.h>

/* ---- checks ------------------------------------------------------------- */
/* One dtype for both operands, floating or integer (bool has no product in
 * PyTorch either). */
static ir_node *check_dtypes(const char *f, int l, const char *name, const ir_node *a, const ir_node *b) {
  if (a->dtype != b->dtype)
    return fe_error(KILN_ERR_DTYPE, f, l, "%s: expected m1 and m2 to have the same dtype, but got: %s != %s", name,
                    ir_dtypes[a->dtype].name, ir_dtypes[b->dtype].name);
  if (a->dtype != KILN_BOOL) return NULL;
  ir_str s = {0};
  fe_describe(&s, a);
  ir_str_printf(&s, " and ");
  fe_describe(&s, b);
  ir_node *e = fe_error(KILN_ERR_DTYPE, f, l, "%s: bool tensors cannot be multiplied, got %s", name, s.s);
  ir_str_free(&s);
  return e;
}

/* NULL operands, sticky errors, devices, then dtypes. */
static ir_node *check_operands(const char *f, int l, const char *name, ir_node *a, ir_node *b) {
  ir_node *e = fe_check_args(f, l, name, 2, (ir_node *[]){a, b});
  return e ? e : check_dtypes(f, l, name, a, b);
}

/* "name: shapes (3,2) and (3,2) <why>", the operands as the user passed them. */
static ir_node *shape_error(const char *f, int l, const char *name, const ir_node *a, const ir_node *b,
                            const char *why) {
  ir_str s = {0};
  ir_str_shape(&s, a->ndim, a->shape);
  ir_str_printf(&s, " and ");
  ir_str_shape(&s, b->ndim, b->shape);
  ir_node *e = fe_error(KILN_ERR_SHAPE, f, l, "%s: shapes %s %s", name, s.s, why);
  ir_str_free(&s);
  return e;
}

/* ---- building ----------------------------------------------------------- */
/* Drops an intermediate handle and returns the next one (t = step(t, ...)). */
static ir_node *replace(ir_node *old, ir_node *next) {
  fe_drop(old);
  return next;
}

/* An integer product, a [...,M,1,K] * b^T [...,1,N,K] summed over K: one
 * fused multiply-reduce row kernel (the M*N*K products are never stored; K
 * innermost keeps the cast back in the same kernel). The sum runs in int64
 * and is cast back, which wraps as PyTorch's integer matmul does. */
static ir_node *integer_product(const char *f, int l, ir_node *a, ir_node *b) {
  ir_node *bt = kiln_transpose_at(f, l, b, -1, -2);
  ir_node *ua = kiln_unsqueeze_at(f, l, a, -2), *ub = kiln_unsqueeze_at(f, l, bt, -3);
  fe_drop(bt);
  ir_node *p = kiln_mul_at(f, l, ua, ub);
  fe_drop(ua);
  fe_drop(ub);
  ir_node *s = replace(p, kiln_sum_dims_at(f, l, p, 1, (int64_t[]){-1}, 0));
  return replace(s, kiln_cast_at(f, l, s, a->dtype));
}

/* The MATMUL node of a [...,M,K] and b [...,K,N] with equal batch dims. */
static ir_node *matmul_node(const char *f, int l, ir_node *a, ir_node *b) {
  if (!ir_is_float(a->dtype)) return integer_product(f, l, a, b);
  int nd = a->ndim;
  int64_t shape[KILN_MAX_DIMS];
  memcpy(shape, a->shape, (size_t)nd * sizeof *shape);
  shape[nd - 1] = b->shape[nd - 1];
  ir_node *n = ir_node_new(IR_MATMUL, a->dtype, nd, shape, 2, (ir_node *[]){a, b}, f, l);
  if (!n) return fe_nomem();
  n->attr.compute = a->dtype;
  return fe_finish(n);
}

/* True when dims 0..ndim-2 of t merge into one (a zero-copy reshape), so a
 * batch of matrices times one matrix is one big product, as in PyTorch. */
static bool rows_merge(const ir_node *t) {
  for (int d = 0; d + 2 < t->ndim; d++)
    if (t->shape[d] != 1 && t->strides[d] != t->strides[d + 1] * t->shape[d + 1]) return false;
  return true;
}

/* a [...,M,K] x b [K,N]: one 2-D product of the merged rows, reshaped back. */
static ir_node *folded(const char *f, int l, ir_node *a, ir_node *b) {
  int64_t k = a->shape[a->ndim - 1], shape[KILN_MAX_DIMS];
  ir_node *a2 = kiln_reshape_at(f, l, a, 2, (int64_t[]){ir_numel(a->ndim - 1, a->shape), k});
  ir_node *r = matmul_node(f, l, a2, b);
  fe_drop(a2);
  memcpy(shape, a->shape, (size_t)a->ndim * sizeof *shape);
  shape[a->ndim - 1] = b->shape[1];
  return replace(r, kiln_reshape_at(f, l, r, a->ndim, shape));
}

/* Batch dims of a [...,M,K] and b [...,K,N] broadcast (NumPy rules). */
static bool batch_shape(const ir_node *a, const ir_node *b, int *nb, int64_t *shape) {
  int na = a->ndim - 2, nbb = b->ndim - 2;
  *nb = na > nbb ? na : nbb;
  for (int d = 0; d < *nb; d++) {
    int i = d - (*nb - na), j = d - (*nb - nbb);
    int64_t x = i >= 0 ? a->shape[i] : 1, y = j >= 0 ? b->shape[j] : 1;
    if (x != y && x != 1 && y != 1) return false;
    shape[d] = x == 1 ? y : x;
  }
  return true;
}

/* t [..., R, C] expanded to batch + [R, C]. */
static ir_node *expand_batch(const char *f, int l, ir_node *t, int nb, const int64_t *batch) {
  int64_t shape[KILN_MAX_DIMS];
  memcpy(shape, batch, (size_t)nb * sizeof *shape);
  shape[nb] = t->shape[t->ndim - 2];
  shape[nb + 1] = t->shape[t->ndim - 1];
  return kiln_expand_at(f, l, t, nb + 2, shape);
}

/* a' [...,M,K] x b' [...,K,N], both at least 2-D with matching K; the
 * product's shape, batch + [M, N], and each expanded operand's must have
 * an element count int64 can hold. */
static ir_node *batched(const char *f, int l, const char *name, ir_node *a, ir_node *b) {
  int nb;
  int64_t batch[KILN_MAX_DIMS];
  batch_shape(a, b, &nb, batch);
  ir_node *e;
  for (int i = 0; i < 3; i++) {
    batch[nb] = i == 1 ? b->shape[b->ndim - 2] : a->shape[a->ndim - 2];
    batch[nb + 1] = i == 0 ? a->shape[a->ndim - 1] : b->shape[b->ndim - 1];
    if ((e = fe_check_numel(f, l, name, nb + 2, batch))) return e;
  }
  if (b->ndim == 2 && a->ndim > 2 && rows_merge(a)) return folded(f, l, a, b);
  ir_node *ea = expand_batch(f, l, a, nb, batch), *eb = expand_batch(f, l, b, nb, batch);
  ir_node *r = matmul_node(f, l, ea, eb);
  fe_drop(ea);
  fe_drop(eb);
  return r;
}

/* matmul's rules on checked operands; name is the op the user called. */
static ir_node *product(const char *f, int l, const char *name, ir_node *a, ir_node *b) {
  if (a->ndim == 0 || b->ndim == 0)
    return shape_error(f, l, name, a, b, "cannot be multiplied (both arguments need at least 1 dim)");
  int64_t ka = a->shape[a->ndim - 1], kb = b->shape[b->ndim == 1 ? 0 : b->ndim - 2];
  if (ka != kb) {
    char why[96];
    snprintf(why, sizeof why, "cannot be multiplied (%lld != %lld)", (long long)ka, (long long)kb);
    return shape_error(f, l, name, a, b, why);
  }
  ir_node *a2 = a->ndim == 1 ? kiln_unsqueeze_at(f, l, a, 0) : fe_same(a);
  ir_node *b2 = b->ndim == 1 ? kiln_unsqueeze_at(f, l, b, 1) : fe_same(b);
  int nb;
  int64_t batch[KILN_MAX_DIMS];
  ir_node *r = batch_shape(a2, b2, &nb, batch)
                   ? batched(f, l, name, a2, b2)
                   : shape_error(f, l, name, a, b, "cannot be multiplied (batch dims do not broadcast)");
  fe_drop(a2);
  fe_drop(b2);
  /* The dims a 1-D operand added go again: N first (last), then M. */
  if (r->status == KILN_OK && b->ndim == 1) r = replace(r, kiln_squeeze_dim_at(f, l, r, -1));
  if (r->status == KILN_OK && a->ndim == 1) r = replace(r, kiln_squeeze_dim_at(f, l, r, -1 - (b->ndim > 1)));
  return r;
}

/* ---- the public functions ----------------------------------------------- */
static ir_node *matmul(const char *f, int l, ir_node *a, ir_node *b) {
  ir_node *e = check_operands(f, l, "matmul", a, b);
  return e ? e : product(f, l, "matmul", a, b);
}

static ir_node *mm(const char *f, int l, ir_node *a, ir_node *b) {
  ir_node *e = check_operands(f, l, "mm", a, b);
  if (e) return e;
  if (a->ndim != 2 || b->ndim != 2) return shape_error(f, l, "mm", a, b, "cannot be multiplied (mm needs 2-D tensors)");
  return product(f, l, "mm", a, b);
}

static ir_node *dot(const char *f, int l, ir_node *a, ir_node *b) {
  ir_node *e = check_operands(f, l, "dot", a, b);
  if (e) return e;
  if (a->ndim != 1 || b->ndim != 1) return shape_error(f, l, "dot", a, b, "cannot be multiplied (dot needs 1-D tensors)");
  return product(f, l, "dot", a, b);
}

/* bias must broadcast to the output features (PyTorch: (out,) or a scalar). */
static ir_node *check_bias(const char *f, int l, ir_node *x, ir_node *w, ir_node *bias) {
  ir_node *e = fe_check_args(f, l, "linear", 3, (ir_node *[]){x, w, bias});
  if (e || (e = check_dtypes(f, l, "linear", x, bias))) return e;
  int64_t out = w->ndim == 2 ? w->shape[0] : 1;
  if (bias->ndim == 0 || (bias->ndim == 1 && (bias->shape[0] == out || bias->shape[0] == 1))) return NULL;
  ir_str s = {0};
  ir_str_shape(&s, bias->ndim, bias->shape);
  e = fe_error(KILN_ERR_SHAPE, f, l, "linear: bias of shape %s does not match %lld output features", s.s,
               (long long)out);
  ir_str_free(&s);
  return e;
}

/* x @ W^T + b: the product is reported with the operands it multiplies,
 * x and W^T, as PyTorch does. */
static ir_node *linear(const char *f, int l, ir_node *x, ir_node *w, ir_node *b) {
  ir_node *e = check_operands(f, l, "linear", x, w);
  if (e || (b && (e = check_bias(f, l, x, w, b)))) return e;
  if (w->ndim != 1 && w->ndim != 2)
    return shape_error(f, l, "linear", x, w, "cannot be multiplied (the weight must be 1-D or 2-D)");
  ir_node *wt = w->ndim == 2 ? kiln_transpose_at(f, l, w, 0, 1) : fe_same(w);
  ir_node *r = product(f, l, "linear", x, wt);
  fe_drop(wt);
  if (b && r->status == KILN_OK) r = replace(r, kiln_add_at(f, l, r, b));
  return r;
}

/* Each is made of views around one MATMUL: errors name the product asked for. */
kiln_tensor *kiln_matmul_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b) { FE_AS("matmul", matmul(f, l, a, b)); }
kiln_tensor *kiln_mm_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b) { FE_AS("mm", mm(f, l, a, b)); }
kiln_tensor *kiln_dot_at(const char *f, int l, kiln_tensor *a, kiln_tensor *b) { FE_AS("dot", dot(f, l, a, b)); }
kiln_tensor *kiln_linear_at(const char *f, int l, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b) {
  FE_AS("linear", linear(f, l, x, w, b));
}
