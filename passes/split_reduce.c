/* split_reduce.c: a graph pass for big reductions to few values. Lowered as
 * it is, sum(x) over 64M elements is one loop on one thread: its kernel has
 * no parallel range. A reduction whose reduced dims are the trailing ones,
 * with few kept elements and a large reduced count R, is split in two: its
 * source viewed as [kept..., P, R/P] is reduced over the last dim into P
 * partials per kept element (a row reduction: the threads split the P rows),
 * and the node itself then reduces the partials, [kept..., P, 1...], over
 * the same dims as before. fuse stores the partials (a reduction read by a
 * reduction with a small output is materialized), so it runs as one parallel
 * pass over the data and one over P values per kept element.
 *
 * Only for ops whose partials combine with the op itself (sum, prod, max,
 * min) and dtypes accumulated as stored (not f16/bf16, whose partials would
 * round). Needs verified nodes; keeps every node's value. The nodes it makes
 * are held in g->created until the realize ends. */
#include "pass.h"

enum {
  SPLIT_MIN = 1 << 20,  /* reduced elements worth a second kernel */
  KEPT_MAX = 16,        /* more kept elements give the threads enough rows already */
  PART_MIN = 4096,      /* elements per partial */
};

/* The partial count: the largest divisor of r in [16, 256] that leaves at
 * least PART_MIN elements per partial; 0 when there is none. */
int64_t pass_partials(int64_t r) {
  for (int64_t p = 256; p >= 16; p--)
    if (r % p == 0 && r / p >= PART_MIN) return p;
  return 0;
}

/* The first reduced dim of n when every dim from it on is reduced; -1 when
 * the reduced dims do not trail. */
static int trailing_from(const ir_node *n) {
  int q = 0;
  while (q < n->ndim && !(n->attr.axes >> q & 1)) q++;
  for (int d = q; d < n->ndim; d++)
    if (!(n->attr.axes >> d & 1)) return -1;
  return q < n->ndim ? q : -1;
}

static bool split_one(pass_graph *g, ir_node *n) {
  if (pass_target(g, n) != KILN_CPU) return false;  /* a GPU reduction spreads over blocks itself */
  if (n->op != IR_SUM && n->op != IR_PROD && n->op != IR_MAX && n->op != IR_MIN) return false;
  if (ir_compute_dtype(n->dtype) != n->dtype || n->attr.compute != n->dtype) return false;
  int q = trailing_from(n);
  ir_node *s = n->src[0];
  if (q < 0 || q + 2 > KILN_MAX_DIMS) return false;
  int64_t kept = ir_numel(q, s->shape), r = ir_numel(s->ndim - q, s->shape + q);
  int64_t p = pass_partials(r);
  if (r < SPLIT_MIN || kept > KEPT_MAX || p == 0) return false;
  int64_t vs[KILN_MAX_DIMS], ws[KILN_MAX_DIMS];
  for (int d = 0; d < q; d++) vs[d] = ws[d] = s->shape[d];
  vs[q] = p;
  vs[q + 1] = r / p;
  ir_node *v = ir_node_new(IR_RESHAPE, s->dtype, q + 2, vs, 1, &s, n->file, n->line);
  vs[q + 1] = 1;
  ir_node *part = v ? ir_node_new(n->op, n->dtype, q + 2, vs, 1, &v, n->file, n->line) : NULL;
  if (!part) {
    ir_node_release(v);
    g->oom = true;
    return false;
  }
  part->attr = n->attr;
  part->attr.axes = 1u << (q + 1);
  for (int d = q; d < n->ndim; d++) ws[d] = d == q ? p : 1;
  ir_node *w = ir_node_new(IR_RESHAPE, n->dtype, n->ndim, ws, 1, &part, n->file, n->line);
  pass_hold(g, v);
  pass_hold(g, part);
  if (!w) g->oom = true;
  else pass_hold(g, w);
  if (g->oom) return false;
  ir_node_set_src(n, 0, w);
  return true;
}

void pass_split_reduce(pass_graph *g) { pass_rewrite_each(g, split_one); }
