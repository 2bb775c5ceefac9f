/* split_scan.c: a graph pass for long scans. A scan's lines run in order,
 * each on one thread: cumsum of 16M elements is one serial chain. A scan
 * along the last dim with few lines of a large length L is split in two
 * passes over P blocks of L/P (a reduce, then a scan):
 *   tot     = op's reduction of each block  ([kept..., P, 1]: threads split the blocks)
 *   offsets = the scan of tot shifted one block on, the identity first
 *   n       = the scan within each block, starting from its block's offset
 *             (a segmented scan, src[1] the offsets: threads split the blocks)
 * so tot's kernel reads the source once, the tiny scan of P totals runs
 * alone, and n's kernel rescans each block from the sum (product, max, min,
 * logsumexp) of the blocks before it, fused with n's producers and
 * consumers as before. The blocks follow the shape only, so the result is
 * the same on every run and thread count; a float sum, product or
 * logsumexp differs from the serial order by rounding. On CUDA, where a
 * line is one thread, a line of 2^14 or more (at most 256 lines) splits
 * into about sqrt(L) blocks: a block-wide reduction per block, one thread
 * scanning the totals, a thread per block rescanning it.
 *
 * Every scan but those of bool splits: cumsum and cumprod (identity 0, 1),
 * cummax and cummin (the dtype's lowest or highest), logcumsumexp (each
 * block's logsumexp, max-shifted, in f64; identity -inf) and the
 * positions of cummax and cummin, whose scan starts from the best value
 * before its block (src[1]) and that value's position (src[2]): each
 * block's best and its latest position, chosen across blocks by the serial
 * scan's rule (the latest of ties, the latest nan). Needs verified nodes
 * (after it, such a scan has two sources, three for positions); keeps
 * every node's value. The nodes it makes are held in g->created until the
 * realize ends. */
#include "pass.h"

#include <math.h>
#include <string.h>

enum {
  SPLIT_MIN = 1 << 20,  /* scanned elements per line worth two more kernels */
  LINES_MAX = 16,       /* more lines give the threads enough of them already */
  GPU_SPLIT_MIN = 1 << 14,   /* a GPU thread's serial line of 2^14 (~100 us) outlasts three launches */
  GPU_LINES_MAX = 256,       /* more lines give the GPU's threads enough of them */
};

/* Blocks per line of len: on the CPU split_reduce's partials (a few per
 * thread); on a GPU (a thread per block, then one thread scanning the
 * totals) the largest divisor up to sqrt(len), which balances the two
 * serial chains; 0: none fits. */
static int64_t blocks_per_line(bool gpu, int64_t len) {
  if (!gpu) return pass_partials(len);
  int64_t p = (int64_t)sqrt((double)len);
  while (p >= 16 && (len % p || p * p > len)) p--;
  return p >= 16 ? p : 0;
}

typedef struct {
  pass_graph *g;
  ir_node *n;           /* the scan being split, along its last dim q */
  int q;
  int64_t p, seg;       /* blocks per line, elements per block */
} splitter;

/* The value a max-like (lowest) or min-like fold starts from in dtype t
 * (int64's highest is 2^63 as a double, which pass_arg_bits saturates). */
static double extreme(kiln_dtype t, bool lowest) {
  if (ir_is_float(t)) return lowest ? -INFINITY : INFINITY;
  int bits = 8 * (int)ir_dtypes[t].size;
  if (!ir_dtypes[t].is_signed) return lowest ? 0 : ldexp(1, bits) - 1;
  return lowest ? -ldexp(1, bits - 1) : ldexp(1, bits - 1) - 1;
}

/* A new node of n's location and device computing op (dtype dt, computed
 * in dt) on src, held by g; NULL (g->oom) when out of memory. */
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
  m->device = n->device;
  m->attr.compute = dt;
  pass_hold(g, m);
  return g->oom ? NULL : m;
}

/* A node of shape [kept..., P, last] (ndim q + 2) or [kept..., P] (q + 1). */
static ir_node *blocks(const splitter *s, ir_op op, kiln_dtype dt, int ndim, int64_t last, int nsrc,
                       ir_node *const *src) {
  int64_t shape[KILN_MAX_DIMS];
  memcpy(shape, s->n->shape, sizeof *shape * (size_t)s->q);
  shape[s->q] = s->p;
  shape[s->q + 1] = last;
  return make(s->g, s->n, op, dt, ndim, shape, nsrc, src);
}

/* A node of a's shape; NULL when a is. */
static ir_node *like(const splitter *s, ir_op op, kiln_dtype dt, ir_node *a, ir_node *b) {
  ir_node *src[2] = {a, b};
  return a ? make(s->g, s->n, op, dt, a->ndim, a->shape, b ? 2 : 1, src) : NULL;
}

/* op over each block of v ([kept..., P, seg]), folded in compute. */
static ir_node *fold(const splitter *s, ir_op op, kiln_dtype dt, kiln_dtype compute, ir_node *v) {
  ir_node *r = blocks(s, op, dt, s->q + 2, 1, 1, &v);
  if (r) r->attr.axes = 1u << (s->q + 1), r->attr.compute = compute;
  return r;
}

/* The scan op of the block totals tot across the blocks. */
static ir_node *across(const splitter *s, ir_op op, kiln_dtype dt, kiln_dtype compute, ir_node *tot) {
  ir_node *r = blocks(s, op, dt, s->q + 2, 1, 1, &tot);
  if (r) r->attr.axes = 1u << s->q, r->attr.compute = compute;
  return r;
}

/* inc's element for block b - 1 at block b, identity at block 0: each
 * block's offset ([kept..., P]). */
static ir_node *offsets(const splitter *s, kiln_dtype dt, ir_node *inc, double identity) {
  ir_node *ex = blocks(s, IR_PAD, dt, s->q + 2, 1, 1, &inc);
  if (!ex) return NULL;
  ex->attr.pad[s->q][0] = 1;
  ex->attr.pad[s->q][1] = -1;
  ex->attr.value = identity;
  return blocks(s, IR_RESHAPE, dt, s->q + 1, 0, 1, &ex);
}

static ir_node *block_const(const splitter *s, kiln_dtype dt, double value) {
  ir_node *r = blocks(s, IR_CONST, dt, s->q + 2, 1, 0, NULL);
  if (r) r->attr.value = value;
  return r;
}

/* log(sum(exp(x - m))) + m over each block of v in float dtype t, m the
 * block's max, 0 where it is infinite: a block of -inf totals -inf, one
 * holding +inf +inf, one holding a nan nan (as the serial scan's fold). */
static ir_node *block_logsumexp(const splitter *s, ir_node *v, kiln_dtype t) {
  ir_node *x = v->dtype == t ? v : like(s, IR_CAST, t, v, NULL);
  if (x && x != v) x->attr.to = t;
  ir_node *m = fold(s, IR_MAX, t, t, x);
  ir_node *inf = like(s, IR_EQ, KILN_BOOL, like(s, IR_ABS, t, m, NULL), block_const(s, t, INFINITY));
  if (inf) inf->attr.compute = t;
  ir_node *sel[3] = {inf, block_const(s, t, 0), m};
  ir_node *shift = m ? make(s->g, s->n, IR_WHERE, t, m->ndim, m->shape, 3, sel) : NULL;
  ir_node *wide = blocks(s, IR_EXPAND, t, s->q + 2, s->seg, 1, &shift);
  ir_node *e = like(s, IR_EXP, t, like(s, IR_SUB, t, x, wide), NULL);
  return like(s, IR_ADD, t, like(s, IR_LOG, t, fold(s, IR_SUM, t, t, e), NULL), shift);
}

/* cumsum, cumprod, cummax, cummin, logcumsumexp of the blocks v: src[1]. */
static ir_node *value_offsets(const splitter *s, ir_node *v) {
  kiln_dtype c = s->n->attr.compute;
  switch (s->n->op) {
  case IR_CUMSUM: return offsets(s, c, across(s, IR_CUMSUM, c, c, fold(s, IR_SUM, c, c, v)), 0);
  case IR_CUMPROD: return offsets(s, c, across(s, IR_CUMPROD, c, c, fold(s, IR_PROD, c, c, v)), 1);
  case IR_CUMMAX: return offsets(s, c, across(s, IR_CUMMAX, c, c, fold(s, IR_MAX, c, c, v)), extreme(c, true));
  case IR_CUMMIN: return offsets(s, c, across(s, IR_CUMMIN, c, c, fold(s, IR_MIN, c, c, v)), extreme(c, false));
  default: return offsets(s, c, across(s, IR_LOGCUMSUMEXP, c, c, block_logsumexp(s, v, c)), -INFINITY);
  }
}

/* The positions of cummax (max) or cummin of the blocks v: the best value
 * before each block (src[1]) and its position (src[2]). A block's latest
 * best is the first of the flipped block (arg-reductions pick the first,
 * nan counting as best): at b * seg + seg - 1 - that; the scan of the
 * block bests picks the latest best block (w), whose best and position
 * each block starts from. */
static bool position_offsets(const splitter *s, ir_node *v, bool max) {
  kiln_dtype c = s->n->attr.compute;
  int q = s->q;
  ir_node *best = fold(s, max ? IR_MAX : IR_MIN, c, c, v);
  ir_node *flip = like(s, IR_FLIP, v->dtype, v, NULL);
  if (flip) flip->attr.flip_mask = 1u << (q + 1);
  ir_node *from_end = fold(s, max ? IR_ARGMAX : IR_ARGMIN, KILN_I64, c, flip);
  ir_node *last = make(s->g, s->n, IR_ARANGE, KILN_I64, 2, (const int64_t[]){s->p, 1}, 0, NULL);
  if (last) last->attr.start = (double)(s->seg - 1), last->attr.step = (double)s->seg;
  if (q) last = blocks(s, IR_EXPAND, KILN_I64, q + 2, 1, 1, &last);
  ir_node *pos = like(s, IR_SUB, KILN_I64, last, from_end);
  ir_node *w = across(s, max ? IR_CUMARGMAX : IR_CUMARGMIN, KILN_I64, c, best);
  ir_node *start[2];
  for (int i = 0; i < 2; i++) {   /* the best through block b - 1, its position */
    kiln_dtype dt = i ? KILN_I64 : c;
    ir_node *src[2] = {i ? pos : best, w};
    ir_node *at = w ? make(s->g, s->n, IR_GATHER, dt, w->ndim, w->shape, 2, src) : NULL;
    if (at) at->attr.dim = q;
    start[i] = offsets(s, dt, at, i ? 0 : extreme(c, max));
  }
  if (!start[0] || !start[1]) return false;
  s->n->nsrc = 3;
  ir_node_set_src(s->n, 1, start[0]);
  ir_node_set_src(s->n, 2, start[1]);
  return true;
}

static bool split_one(pass_graph *g, ir_node *n) {
  int q = n->ndim - 1;
  bool gpu = pass_target(g, n) != KILN_CPU;
  if (!ir_op_has(n->op, IR_SCAN) || n->attr.segment || n->attr.compute == KILN_BOOL || q < 0 ||
      !(n->attr.axes >> q & 1) || n->shape[q] < (gpu ? GPU_SPLIT_MIN : SPLIT_MIN) ||
      ir_numel(q, n->shape) > (gpu ? GPU_LINES_MAX : LINES_MAX) || q + 2 > KILN_MAX_DIMS)
    return false;   /* (a segmented scan was split by an earlier plan of its graph) */
  splitter s = {g, n, q, blocks_per_line(gpu, n->shape[q]), 0};
  if (s.p == 0) return false;
  s.seg = n->shape[q] / s.p;
  ir_node *v = blocks(&s, IR_RESHAPE, n->src[0]->dtype, q + 2, s.seg, 1, &n->src[0]);
  if (!v) return false;
  if (n->op == IR_CUMARGMAX || n->op == IR_CUMARGMIN) {
    if (!position_offsets(&s, v, n->op == IR_CUMARGMAX)) return false;
  } else {
    ir_node *start = value_offsets(&s, v);
    if (!start) return false;
    n->nsrc = 2;   /* each block's scan starts from the offset of its block */
    ir_node_set_src(n, 1, start);
  }
  n->attr.segment = s.seg;
  return true;
}

void pass_split_scan(pass_graph *g) { pass_rewrite_each(g, split_one); }
