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

static const char *check_node(const ir_node *n) {
  if (!ir_dtype_valid(n->dtype)) return "invalid dtype";
  if (n->nsrc != ir_ops[n->op].arity) return "wrong number of sources";
  for (int i = 0; i < n->nsrc; i++) {
    if (n->src[i]->device.type != n->device.type || n->src[i]->device.index != n->device.index)
      return "source on another device";
    if (ir_op_has(n->op, IR_EW) && !same_shape(n, n->src[i])) return "source shape differs";
  }
  if (n->op == IR_EXPAND && !expand_ok(n)) return "expand of an incompatible shape";
  if (n->op == IR_BUFFER && !n->buf) return "buffer node without a buffer";
  return NULL;
}

kiln_status pass_verify(pass_graph *g) {
  for (int i = 0; i < g->n; i++) {
    const ir_node *n = g->topo[i];
    if (n->status != KILN_OK) {
      ir_error_set(n->msg);
      return n->status;
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
