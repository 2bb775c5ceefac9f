/* fold_views.c: a movement node whose source is a buffer becomes a buffer
 * node itself, sharing the storage with composed strides and offset (a
 * zero-copy view): chains of views over data collapse into one strided load,
 * and realizing x.T launches no kernel at all. Runs sources first, so a
 * whole chain folds in one sweep. Needs nothing; keeps every node's value. */
#include "pass.h"

void pass_fold_views(pass_graph *g) {
  for (int i = 0; i < g->n; i++) {
    ir_node *n = g->topo[i];
    if (!ir_op_has(n->op, IR_MOVE) || n->src[0]->op != IR_BUFFER || !n->src[0]->buf) continue;
    const ir_node *s = n->src[0];
    int64_t st[KILN_MAX_DIMS], off = s->offset;
    if (pass_view_strides(n, s->strides, st, &off)) ir_node_set_view(n, s, st, off);
  }
}
