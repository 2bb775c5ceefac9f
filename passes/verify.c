/* verify.c: checks the pending DAG before it is compiled. User errors were
 * caught when ops were built and sit in error nodes: the first one found is
 * reported. Everything else checked here (shapes, dtypes, devices agree
 * between a node and its sources) is an invariant the frontend ensures, so a
 * failure names the node and is reported as a compile error. */
#include "pass.h"

#include <string.h>

static bool same_shape(const ir_node *a, const ir_node *b) {
  return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* An EXPAND source aligns right; each of its dims is 1 or the node's size. */
static bool expand_ok(const ir_node *n) {
  const ir_node *s = n->src[0];
  int off = n->ndim - s->ndim;
  if (off < 0) return false;
  for (int d = 0; d < s->ndim; d++)
    if (s->shape[d] != 1 && s->shape[d] != n->shape[d + off]) return false;
  return true;
}

/* n's dims equal s's, except dim skip (-1: none). */
static bool same_except(const ir_node *n, const ir_node *s, int skip) {
  if (n->ndim != s->ndim) return false;
  for (int d = 0; d < n->ndim; d++)
    if (d != skip && n->shape[d] != s->shape[d]) return false;
  return true;
}

static bool permute_ok(const ir_node *n, const ir_node *s) {
  unsigned seen = 0;
  for (int d = 0; d < n->ndim; d++) {
    int p = n->attr.perm[d];
    if (p < 0 || p >= s->ndim || (seen >> p & 1) || n->shape[d] != s->shape[p]) return false;
    seen |= 1u << p;
  }
  return n->ndim == s->ndim;
}

/* Every element a SLICE, SELECT or PAD reads lies inside its source. */
static bool reads_in_range(const ir_node *n, const ir_node *s) {
  const ir_attr *a = &n->attr;
  if (n->op == IR_PAD) {
    for (int d = 0; d < n->ndim; d++)
      if (n->shape[d] != s->shape[d] + a->pad[d][0] + a->pad[d][1]) return false;
    return n->ndim == s->ndim;
  }
  if (a->dim < 0 || a->dim >= s->ndim || a->index < 0) return false;
  if (n->op == IR_SELECT) return n->ndim == s->ndim - 1 && a->index < s->shape[a->dim];
  int64_t len = n->shape[a->dim];
  return same_except(n, s, a->dim) && a->stride > 0 && (len == 0 || a->index + (len - 1) * a->stride < s->shape[a->dim]);
}

static bool cat_ok(const ir_node *n) {
  int d = n->attr.dim;
  const ir_node *a = n->src[0], *b = n->src[1];
  return d >= 0 && d < n->ndim && same_except(n, a, d) && same_except(n, b, d) &&
         n->shape[d] == a->shape[d] + b->shape[d];
}

/* UNFOLD: the window geometry is valid and gives the node's shape. */
static bool unfold_ok(const ir_node *n, const ir_node *s) {
  const ir_attr *a = &n->attr;
  if (n->ndim != 4 || s->ndim != 4 || n->shape[0] != s->shape[0] || n->shape[1] < 1 || s->shape[1] % n->shape[1])
    return false;
  for (int i = 0; i < 2; i++)
    if (a->win.k[i] < 1 || a->win.s[i] < 1 || a->win.d[i] < 1 || a->win.u[i] < 1 || a->win.out[i] < 1)
      return false;
  return n->shape[2] == s->shape[1] / n->shape[1] * a->win.k[0] * a->win.k[1] &&
         n->shape[3] == a->win.out[0] * a->win.out[1];
}

/* Movement nodes read their sources where ops.def says, and nowhere else. */
static bool movement_ok(const ir_node *n) {
  const ir_node *s = n->src[0];
  switch (n->op) {
  case IR_EXPAND: return expand_ok(n);
  case IR_RESHAPE: return ir_numel(n->ndim, n->shape) == ir_numel(s->ndim, s->shape);
  case IR_PERMUTE: return permute_ok(n, s);
  case IR_FLIP: return same_except(n, s, -1);
  case IR_CAT: return cat_ok(n);
  case IR_UNFOLD: return unfold_ok(n, s);
  default: return reads_in_range(n, s);
  }
}

/* GATHER and SCATTER*: an integer index of the table's rank that fits the
 * table along every dim but the indexed one; a scatter's values have the
 * index's shape and its result the table's. */
static bool indexed_ok(const ir_node *n) {
  const ir_node *t = n->src[0], *ix = n->src[1];
  int dim = n->attr.dim;
  if (ir_is_float(ix->dtype) || ix->dtype == KILN_BOOL || ix->ndim != t->ndim || dim < 0 || dim >= t->ndim) return false;
  for (int d = 0; d < t->ndim; d++)
    if (d != dim && ix->shape[d] > t->shape[d]) return false;
  if (n->op == IR_GATHER) return same_shape(n, ix) && n->dtype == t->dtype;
  return same_shape(n, t) && same_shape(ix, n->src[2]) && n->dtype == t->dtype;
}

/* A segmented scan reads its blocks' offsets too (split_scan.c): a graph
 * an earlier plan split, as rt_plan_graph plans the nodes themselves. */
static int sources_of(const ir_node *n) {
  if (!ir_op_has(n->op, IR_SCAN) || !n->attr.segment) return ir_ops[n->op].arity;
  return n->op == IR_CUMARGMAX || n->op == IR_CUMARGMIN ? 3 : 2;
}

static const char *check_node(const ir_node *n) {
  if (!ir_dtype_valid(n->dtype)) return "invalid dtype";
  if (n->nsrc != sources_of(n)) return "wrong number of sources";
  for (int i = 0; i < n->nsrc; i++) {
    bool xfer = ir_op_has(n->op, IR_XFER);   /* a transfer reads another device, by definition */
    if (!xfer && (n->src[i]->device.type != n->device.type || n->src[i]->device.index != n->device.index))
      return "source on another device";
    if ((ir_op_has(n->op, IR_EW) || xfer) && !same_shape(n, n->src[i])) return "source shape differs";
  }
  if (ir_op_has(n->op, IR_MOVE) && !movement_ok(n)) return "movement op of an incompatible shape";
  if (ir_op_is_indexed(n->op) && !indexed_ok(n)) return "index of an incompatible shape or dtype";
  if (n->op == IR_BUFFER && !n->buf) return "buffer node without a buffer";
  return NULL;
}

kiln_status pass_verify(pass_graph *g) {
  for (int i = 0; i < g->n; i++) {
    const ir_node *n = g->topo[i];
    if (n->status != KILN_OK) {
      ir_error_set(ir_node_msg(n));
      return n->status;
    }
    if (n->symbolic && n->op == IR_BUFFER && !g->symbolic_ok) {
      ir_error_setf("%s:%d: placeholder: has no data: a graph that reads a placeholder runs only through "
                    "kiln_compile and kiln_fn_run", n->file ? n->file : "?", n->line);
      return KILN_ERR_ARG;
    }
    const char *why = check_node(n);
    if (why) {
      ir_str s = {0};
      ir_str_shape(&s, n->ndim, n->shape);
      ir_error_setf("%s:%d: %s: internal error: %s (node %s %s)", n->file ? n->file : "?", n->line,
                    ir_ops[n->op].name, why, ir_dtypes[n->dtype].name, s.s);
      ir_str_free(&s);
      return KILN_ERR_COMPILE;
    }
  }
  return KILN_OK;
}
