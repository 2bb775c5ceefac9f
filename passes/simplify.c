/* simplify.c: algebraic identities and constant folding, IEEE-safe (no
 * x*0 -> 0, no x+0 -> x for floats: -0 + 0 is +0). A consumer's source that
 * is an identity of x reads x directly; an op over constants becomes a
 * constant. One rule per row; looks through the EXPAND of wrapped scalars.
 * Needs verified nodes; keeps every node's value (dead nodes are dropped by
 * the re-collection that follows in the pipeline). */
#include "pass.h"

#include <math.h>

static bool is_const(const ir_node *n, double want) {
  double v;
  return pass_const_of(n, &v) && v == want && !signbit(v);
}

typedef struct {
  ir_op op;
  int keep;             /* the source that survives */
  int other;            /* the source that must be the constant */
  double value;
  bool ints_only;       /* IEEE makes the identity false for floats */
} identity;

static const identity identities[] = {
  {IR_MUL, 0, 1, 1, false},  /* x * 1 -> x */
  {IR_MUL, 1, 0, 1, false},  /* 1 * x -> x */
  {IR_DIV, 0, 1, 1, false},  /* x / 1 -> x */
  {IR_SUB, 0, 1, 0, false},  /* x - 0 -> x (-0 - 0 is -0) */
  {IR_ADD, 0, 1, 0, true},   /* x + 0 -> x */
  {IR_ADD, 1, 0, 0, true},   /* 0 + x -> x */
  {IR_POW, 0, 1, 1, false},  /* x ** 1 -> x */
};

/* x when n computes x unchanged (same dtype), else NULL; the constant
 * that made it an identity is pinned. */
static ir_node *identity_of(pass_graph *g, const ir_node *n) {
  if (n->op == IR_NEG && n->src[0]->op == IR_NEG && n->src[0]->src[0]->dtype == n->dtype)
    return n->src[0]->src[0];  /* -(-x) -> x */
  for (size_t r = 0; r < sizeof identities / sizeof *identities; r++) {
    const identity *id = &identities[r];
    if (n->op != id->op || !is_const(n->src[id->other], id->value)) continue;
    ir_node *x = n->src[id->keep];
    if (x->dtype != n->dtype || n->attr.compute != n->dtype || (id->ints_only && ir_is_float(n->dtype))) continue;
    pass_pin_value(g, n->src[id->other]);
    return x;
  }
  return NULL;
}

/* Ops over constants whose f64 result rounds once to the node's float dtype
 * exactly as the kernel computes it. */
static bool fold_const(pass_graph *g, ir_node *n) {
  double a, b = 0, v;
  bool foldable = n->op == IR_ADD || n->op == IR_SUB || n->op == IR_MUL || n->op == IR_DIV || n->op == IR_NEG;
  if (!foldable || (n->dtype != KILN_F32 && n->dtype != KILN_F64) || n->attr.compute != n->dtype) return false;
  if (!pass_const_of(n->src[0], &a) || (n->nsrc > 1 && !pass_const_of(n->src[1], &b))) return false;
  switch (n->op) {
  case IR_ADD: v = a + b; break;
  case IR_SUB: v = a - b; break;
  case IR_MUL: v = a * b; break;
  case IR_DIV: v = a / b; break;
  default: v = -a;
  }
  for (int s = 0; s < n->nsrc; s++) pass_pin_value(g, n->src[s]);
  ir_node_set_const(n, n->dtype == KILN_F32 ? (double)(float)v : v);
  return true;
}

void pass_simplify(pass_graph *g) {
  for (int i = 0; i < g->n; i++) {
    ir_node *n = g->topo[i];
    if (n->op == IR_BUFFER || ir_op_has(n->op, IR_SRC)) continue;
    for (int s = 0; s < n->nsrc; s++) {
      ir_node *x;
      while ((x = identity_of(g, n->src[s])) && x->ndim == n->src[s]->ndim) ir_node_set_src(n, s, x);
    }
    fold_const(g, n);
  }
}
