/* scan.c: the scans (cumsum cumprod logcumsumexp cummax cummin). Each is one
 * IR_SCAN node along one dim, with the source's shape; cummax and cummin
 * build two (the values and the positions), which the fuser may put in one
 * kernel. A 0-dim tensor scans as one element. */
#include "frontend/frontend.h"

#include <string.h>

/* PyTorch's result dtype: integer and bool sums and products become int64. */
static kiln_dtype scan_dtype(ir_op op, kiln_dtype in) {
  if (op == IR_CUMARGMAX || op == IR_CUMARGMIN) return KILN_I64;
  if ((op == IR_CUMSUM || op == IR_CUMPROD) && !ir_is_float(in)) return KILN_I64;
  return in;
}

/* NULL, or the error node for a bad dim or a dtype the op refuses. */
static ir_node *scan_check(const char *f, int l, const char *name, ir_op op, ir_node *t, int64_t dim) {
  ir_node *e = fe_check_arg(f, l, name, t, 1);
  int d;
  if (e || (e = fe_wrap_dim(f, l, name, t, t->ndim, dim, &d))) return e;
  if (op != IR_LOGCUMSUMEXP || ir_is_float(t->dtype)) return NULL;
  ir_str b = {0};
  fe_describe(&b, t);
  e = fe_error(KILN_ERR_DTYPE, f, l, "%s: not implemented for %s (input: %s); it needs a floating dtype", name,
               ir_dtypes[t->dtype].name, b.s);
  ir_str_free(&b);
  return e;
}

/* The scan node of t (checked) along dim (in range). */
static ir_node *scan_node(const char *f, int l, ir_op op, ir_node *t, int64_t dim) {
  if (t->ndim == 0) {   /* one element: scanned as shape (1,), then viewed back */
    ir_node *one = kiln_reshape_at(f, l, t, 1, (const int64_t[]){1});
    ir_node *s = scan_node(f, l, op, one, 0);
    ir_node *r = kiln_reshape_at(f, l, s, 0, NULL);
    fe_drop(one);
    fe_drop(s);
    return r;
  }
  int d = (int)(dim < 0 ? dim + t->ndim : dim);
  ir_node *n = ir_node_new(op, scan_dtype(op, t->dtype), t->ndim, t->shape, 1, &t, f, l);
  if (!n) return fe_nomem();
  n->attr.axes = 1u << d;
  /* the fold's dtype: sums, products and logcumsumexp of floats run in f64,
   * as PyTorch's CPU kernels do (a long f32 cumsum drifts otherwise, and a
   * long f32 logcumsumexp, whose steps add a few ulps each, by 3e-5 in 10^4
   * steps); integers in int64 */
  bool wide = op == IR_CUMSUM || op == IR_CUMPROD || op == IR_LOGCUMSUMEXP;
  n->attr.compute = !wide ? t->dtype : ir_is_float(t->dtype) ? KILN_F64 : KILN_I64;
  return fe_finish(n);
}

static ir_node *scan(const char *f, int l, ir_op op, ir_node *t, int64_t dim) {
  ir_node *e = scan_check(f, l, ir_ops[op].name, op, t, dim);
  return e ? e : scan_node(f, l, op, t, dim);
}

kiln_tensor *kiln_cumsum_at(const char *f, int l, kiln_tensor *t, int64_t dim) { return scan(f, l, IR_CUMSUM, t, dim); }
kiln_tensor *kiln_cumprod_at(const char *f, int l, kiln_tensor *t, int64_t dim) {
  return scan(f, l, IR_CUMPROD, t, dim);
}
kiln_tensor *kiln_logcumsumexp_at(const char *f, int l, kiln_tensor *t, int64_t dim) {
  return scan(f, l, IR_LOGCUMSUMEXP, t, dim);
}

/* The values and the positions (either pointer may be NULL: not built);
 * on an error both are that error. */
static void scan_pair(const char *f, int l, ir_op vop, ir_op iop, ir_node *t, int64_t dim, kiln_tensor **values,
                      kiln_tensor **indices) {
  ir_node *e = scan_check(f, l, ir_ops[vop].name, vop, t, dim);
  if (e) {
    if (values) *values = e;
    if (indices) *indices = values ? fe_same(e) : e;
    if (!values && !indices) fe_drop(e);
    return;
  }
  const char *prev = ir_api_push(ir_ops[vop].name);
  if (values) *values = scan_node(f, l, vop, t, dim);
  if (indices) *indices = scan_node(f, l, iop, t, dim);
  ir_api_pop(prev);
}

void kiln_cummax_at(const char *f, int l, kiln_tensor *t, int64_t dim, kiln_tensor **values, kiln_tensor **indices) {
  scan_pair(f, l, IR_CUMMAX, IR_CUMARGMAX, t, dim, values, indices);
}
void kiln_cummin_at(const char *f, int l, kiln_tensor *t, int64_t dim, kiln_tensor **values, kiln_tensor **indices) {
  scan_pair(f, l, IR_CUMMIN, IR_CUMARGMIN, t, dim, values, indices);
}
