/* cse.c: common subexpressions: nodes with the same op, dtype, shape,
 * attributes and sources (or the same view of the same buffer) are one
 * node; consumers are pointed at the first. Sources are visited first, so
 * equal subtrees collapse bottom-up in one sweep. Random nodes with equal
 * seed and offset are equal values, so they merge too. Needs verified nodes;
 * keeps every node's value. */
#include "pass.h"

#include <stdlib.h>
#include <string.h>

static uint64_t node_hash(const ir_node *n) {
  uint64_t h = ir_hash_bytes(&n->op, sizeof n->op, n->dtype);
  h = ir_hash_bytes(n->shape, sizeof(int64_t) * (size_t)n->ndim, h ^ (uint64_t)n->ndim);
  h = ir_hash_bytes(n->src, sizeof(ir_node *) * (size_t)n->nsrc, h);
  if (n->op == IR_BUFFER) return ir_hash_bytes(&n->buf, sizeof n->buf, h ^ (uint64_t)n->offset);
  return ir_hash_bytes(&n->attr, sizeof n->attr, h);
}

static bool same_node(const ir_node *a, const ir_node *b) {
  if (a->op != b->op || a->dtype != b->dtype || a->ndim != b->ndim || a->nsrc != b->nsrc) return false;
  if (memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim)) return false;
  if (memcmp(a->src, b->src, sizeof(ir_node *) * (size_t)a->nsrc)) return false;
  if (a->device.type != b->device.type || a->device.index != b->device.index) return false;
  if (a->op == IR_BUFFER)
    return a->buf == b->buf && a->offset == b->offset && !memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->ndim);
  return !memcmp(&a->attr, &b->attr, sizeof a->attr);
}

void pass_cse(pass_graph *g) {
  size_t cap = 16;
  while (cap < 2 * (size_t)g->n) cap *= 2;
  ir_node **table = ir_calloc(cap, sizeof *table);
  ir_node **canon = ir_calloc((size_t)g->n + 1, sizeof *canon);  /* by topo index */
  if (!table || !canon) {
    free(table);
    free(canon);
    g->oom = true;
    return;
  }
  for (int i = 0; i < g->n; i++) g->topo[i]->scratch = i;
  for (int i = 0; i < g->n; i++) {
    ir_node *n = g->topo[i];
    for (int s = 0; s < n->nsrc; s++)
      if (canon[n->src[s]->scratch] != n->src[s]) ir_node_set_src(n, s, canon[n->src[s]->scratch]);
    size_t j = node_hash(n) & (cap - 1);
    while (table[j] && !same_node(table[j], n)) j = (j + 1) & (cap - 1);
    if (!table[j]) table[j] = n;
    else pass_pin_value(g, n), pass_pin_value(g, table[j]);   /* merged because their values are equal */
    canon[i] = table[j];
  }
  free(table);
  free(canon);
}
