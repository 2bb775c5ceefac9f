/* split_scan.c: a graph pass for long scans on the CPU. A scan's lines run
 * in order, each on one thread: cumsum of 16M elements is one serial chain.
 * A scan along the last dim with few lines of a large length L is split in
 * two passes over P blocks of L/P (a reduce, then a scan):
 *   tot     = op's reduction of each block  ([kept..., P, 1]: threads split the blocks)
 *   offsets = the scan of tot shifted one block on, the identity first
 *   n       = the scan within each block, starting from its block's offset
 *             (a segmented scan, src[1] the offsets: threads split the blocks)
 * so tot's kernel reads the source once, the tiny scan of P totals runs
 * alone, and n's kernel rescans each block from the sum (product, max, min)
 * of the blocks before it, fused with n's producers and consumers as
 * before. The blocks follow the shape only, so the result is the same on
 * every run and thread count; a float sum or product differs from the
 * serial order by rounding (in the scan's accumulation dtype, f64 for f32).
 *
 * For cumsum and cumprod (any dtype but bool) and cummax and cummin of
 * floats (the identity is an infinity); logcumsumexp and the positions of
 * cummax and cummin stay serial. Needs verified nodes (after it, such a scan
 * has two sources); keeps every node's value. The nodes it makes are held
 * in g->created until the realize ends. */
#include "pass.h"

#include <math.h>

enum {
  SPLIT_MIN = 1 << 20,  /* scanned elements per line worth two more kernels */
  LINES_MAX = 16,       /* more lines give the threads enough of them already */
};

typedef struct {
  ir_op total;          /* the reduction of a block */
  double identity;      /* the offset of the first block */
} scan_split;

static bool split_of(const ir_node *n, scan_split *s) {
  kiln_dtype c = n->attr.compute;
  bool fl = ir_is_float(c);
  switch (n->op) {
  case IR_CUMSUM: *s = (scan_split){IR_SUM, 0}; return c != KILN_BOOL;
  case IR_CUMPROD: *s = (scan_split){IR_PROD, 1}; return c != KILN_BOOL;
  case IR_CUMMAX: *s = (scan_split){IR_MAX, -INFINITY}; return fl;
  case IR_CUMMIN: *s = (scan_split){IR_MIN, INFINITY}; return fl;
  default: return false;
  }
}

/* A new node of n's location computing op (dtype dt, computed in dt) on
 * src, held by g; NULL (g->oom) when out of memory. */
static ir_node *make(pass_graph *g, const ir_node *n, ir_op op, kiln_dtype dt, int ndim, const int64_t *shape,
                     int nsrc, ir_node *const *src) {
  for (int i = 0; i < nsrc; i++)
    if (!src[i]) return NULL;
  ir_node *m = ir_node_new(op, dt, ndim, shape, nsrc, src, n->file, n->line);
  if (!m) {
    g->oom = true;
    return NULL;
  }
  m->api = n->api;
  m->attr.compute = dt;
  pass_hold(g, m);
  return g->oom ? NULL : m;
}

static bool split_one(pass_graph *g, ir_node *n) {
  scan_split sp;
  int q = n->ndim - 1;
  if (pass_target(g, n) != KILN_CPU || q < 0 || !(n->attr.axes >> q & 1) || !split_of(n, &sp)) return false;
  int64_t len = n->shape[q], lines = ir_numel(q, n->shape), p = pass_partials(len);
  if (len < SPLIT_MIN || lines > LINES_MAX || p == 0 || q + 2 > KILN_MAX_DIMS) return false;
  kiln_dtype c = n->attr.compute;
  int64_t vs[KILN_MAX_DIMS], ts[KILN_MAX_DIMS];
  for (int d = 0; d < q; d++) vs[d] = ts[d] = n->shape[d];
  vs[q] = ts[q] = p;
  vs[q + 1] = len / p;
  ts[q + 1] = 1;
  ir_node *v = make(g, n, IR_RESHAPE, n->src[0]->dtype, q + 2, vs, 1, &n->src[0]);
  ir_node *tot = make(g, n, sp.total, c, q + 2, ts, 1, &v);
  if (tot) tot->attr.axes = 1u << (q + 1);
  ir_node *inc = make(g, n, n->op, c, q + 2, ts, 1, &tot);
  if (inc) inc->attr.axes = 1u << q;
  ir_node *ex = make(g, n, IR_PAD, c, q + 2, ts, 1, &inc);
  if (ex) {
    ex->attr.pad[q][0] = 1;    /* block b reads the total through block b - 1 */
    ex->attr.pad[q][1] = -1;
    ex->attr.value = sp.identity;
  }
  ir_node *offsets = make(g, n, IR_RESHAPE, c, q + 1, ts, 1, &ex);
  if (!offsets) return false;
  n->nsrc = 2;   /* each block's scan starts from the offset of its block */
  ir_node_set_src(n, 1, offsets);
  n->attr.segment = len / p;
  return true;
}

void pass_split_scan(pass_graph *g) { pass_rewrite_each(g, split_one); }
