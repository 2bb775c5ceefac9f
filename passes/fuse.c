/* fuse.c: partitions the pending DAG into kernel groups.
 *
 * Policy (documented in docs/passes.md):
 * - A node is materialized (stored by some kernel) when it is a target, when
 *   a computing node is broadcast along a dim that comes before one it keeps
 *   (recomputing it per output element would repeat its work; broadcasting
 *   only along trailing dims keeps it inlined, computed once per outer index:
 *   that is how softmax and layer_norm become one row-wise kernel), or when
 *   kernels of different shapes need it (computed once, loaded by each). An
 *   elementwise target stored for no other reason is one more output of its
 *   users' elementwise kernel of its shape (mark_outputs).
 * - Everything else is inlined into the one kernel that consumes it. Views
 *   (movement nodes) are index rewrites, never stored unless a target.
 *   Sources (constants, arange, eye, random) are cheap and always inlined,
 *   into every kernel that reads them: no buffer exists for them.
 * - Row reductions (reduced dims after the kept ones) are inlined like other
 *   computing nodes: the kernel runs their loop where their index is known
 *   (see lower.c). Column reductions are materialized: their kernel walks
 *   the reduced dims outermost and the kept ones vectorized inside. Column
 *   reductions over the same dims of same-shaped data that do not depend on
 *   each other share that kernel, which reads the data once.
 * - A matmul's operands are buffers read in place through a strided view
 *   (transposes, slices, broadcasts fold into the GEMM's strides); any other
 *   operand is materialized. On the CPU a convolution's window (UNFOLD) as
 *   B is packed by the GEMM from its input, which follows that rule. A
 *   kernel holds at most one matmul plus an elementwise epilogue, and no
 *   reduction; the epilogue may reshape the product (reshaped_epilogue).
 * - A scan (cumsum, cummax, ...) is inlined into the kernel of its
 *   elementwise consumers with its elementwise producers (cumsum(x*2)+1 is
 *   one kernel); it is materialized when any other op reads it (a view, a
 *   reduction, another scan). A kernel holds at most one scan and no
 *   reduction or matmul: its loop nest runs the scanned dim innermost.
 * - A sort or top-k is a kernel of its own (a row kernel) reading a buffer
 *   or a stored node; the values and positions of one sort share it.
 * - An attention (IR_ATTN) is a kernel of its own too; its q, k, v and mask
 *   are read in place through strided views, as a matmul's operands are.
 * - A transfer (TO, kiln_to) is a group of its own and its source is stored:
 *   realize runs it as a copy between devices.
 * - A gather is inlined like an elementwise node (its index is read at the
 *   consumer's index), but the table it reads at data-dependent places is
 *   stored (the first computing node under its views), never recomputed per
 *   element. A scatter is a kernel of its own that stores only itself: its
 *   sources are stored the same way, and its kernel merges with no other.
 * - A cheap elementwise node (no transcendental) that kernels of different
 *   shapes need, and that reads only buffers, stored nodes and other such
 *   nodes, belongs to no kernel: every kernel that reads it recomputes it
 *   (W6's x - mean feeds both the variance and the output, never stored).
 * - Kernels of the same shape that share an inlined node merge into one
 *   multi-output kernel, so the shared node is computed once.
 * - CUDA only: a big reduction to few values is stored by a kernel of its
 *   own, with no other reduction, when more than its epilogue reads it (see
 *   grid_reduce below), so that kernel can use the whole grid.
 * - A node at the end of a chain of FUSE_MAX_DEPTH inlined computing nodes
 *   is stored, so no kernel's expression is deeper than that (see mark_deep).
 * With merge off (KILN_PASSES=-fuse) every computing node is its own kernel.
 * Invariant ensured: g->group_of and g->materialized as pass.h says; each
 * group's outputs share its shape and are its materialized nodes.
 */
#include "pass.h"

#include <stdlib.h>
#include <string.h>

enum {
  HAS_REDUCE = 1,
  HAS_CONTRACT = 2,
  HAS_GRID = 4,    /* a stored grid reduction (below) */
  HAS_VIEW = 8,    /* a view of a computed node: it reads its source at other indices */
  HAS_SCATTER = 64, /* a scatter: its kernel writes through an index (lower.c's scatter_nest) */
  HAS_SCAN = 16,   /* a scan: its kernel's loop nest runs the scanned dim innermost, in order */
  HAS_SORT = 32,   /* a sort, top-k or attention: a kernel of its own */
  HAS_RESHAPE = 128, /* a reshape of a computed node: a view, but one that keeps the row-major order */
};
enum { ANY_VIEW = HAS_VIEW | HAS_RESHAPE };

typedef struct {
  int *parent;          /* union-find over group ids */
  unsigned char *kinds; /* per group root: HAS_REDUCE | HAS_CONTRACT */
  bool merge;           /* sibling groups may merge (FUSE_ALL) */
  int *first_user;      /* consumer lists: topo index of the first user */
  int *next_user;       /* per (node, source slot) link: index IR_MAX_SRC*i + slot */
  const int *group;     /* per placed node: its group (-1: none) */
} fuse_ctx;

static int uf_find(int *parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

static bool inlined_source(const ir_node *n) { return ir_op_has(n->op, IR_SRC) && n->op != IR_BUFFER; }

/* Sources and views of sources or buffers cost only index arithmetic: they
 * belong to no kernel and are emitted wherever they are read. */
static bool free_node(const ir_node *n) {
  while (ir_op_has(n->op, IR_MOVE)) n = n->src[0];
  return n->op == IR_BUFFER || inlined_source(n);
}

/* Ops cheap enough to recompute in every kernel that reads them. */
static bool cheap(ir_op op) { return ir_op_has(op, IR_EW) && !ir_op_has(op, IR_COSTLY); }

/* Nodes that may be recomputed by every kernel reading them, in topo order
 * (sources first): cheap elementwise nodes and views over buffers, stored
 * nodes (as far as mark_forced decided) and other such nodes. */
static void mark_recomputable(const pass_graph *g, const bool *mat, bool *ok) {
  for (int i = 0; i < g->n; i++) {
    const ir_node *n = g->topo[i];
    if (mat[i] || n->op == IR_BUFFER || (!ir_op_has(n->op, IR_MOVE) && !cheap(n->op) && !free_node(n))) continue;
    bool all = true;
    for (int s = 0; s < n->nsrc; s++) all = all && (n->src[s]->op == IR_BUFFER || mat[n->src[s]->scratch] || ok[n->src[s]->scratch]);
    ok[i] = all;
  }
}

static bool is_target(const pass_graph *g, const ir_node *n) {
  for (int t = 0; t < g->ntargets; t++)
    if (g->targets[t] == n) return true;
  return false;
}

static bool same_shape(const ir_node *a, const ir_node *b) {
  return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

static unsigned node_kind(const ir_node *n) {
  if (ir_op_has(n->op, IR_SORTING | IR_ATTN)) return HAS_SORT;
  if (ir_op_has(n->op, IR_SCAN)) return HAS_SCAN;
  return ir_op_has(n->op, IR_REDUCE) ? HAS_REDUCE : ir_op_has(n->op, IR_CONTRACT) ? HAS_CONTRACT : 0;
}

/* Kinds that never share a kernel with a scan: the scan's carried
 * accumulator needs the nest lower.c builds for it (one scan per kernel). */
enum { NOT_WITH_SCAN = HAS_SCAN | HAS_REDUCE | HAS_CONTRACT | HAS_GRID };

/* An EXPAND whose broadcast dims (added or size 1 -> n) all come after the
 * dims it keeps: its source's value depends on outer loop indices only. */
static bool trailing_broadcast(const ir_node *n) {
  const ir_node *s = n->src[0];
  int off = n->ndim - s->ndim;
  bool seen = false;
  for (int d = 0; d < n->ndim; d++) {
    bool b = d < off || (s->shape[d - off] == 1 && n->shape[d] != 1);
    if (b) seen = true;
    else if (seen && n->shape[d] != 1) return false;
  }
  return true;
}

/* Views a GEMM reads in place (view.c): the first node under them, or NULL
 * when a view in the chain is not a strided view of its source. With
 * `reshaped`, reshapes of a computing node (stored contiguously, so any
 * reshape of it is a strided view: an attention's heads split from its
 * projection) end the chain too. */
static ir_node *strided_leaf(ir_node *n, bool reshaped) {
  for (; ir_op_has(n->op, IR_MOVE); n = n->src[0]) {
    ir_node *s = n->src[0];
    while (reshaped && n->op == IR_RESHAPE && s->op == IR_RESHAPE) s = s->src[0];
    if (reshaped && n->op == IR_RESHAPE && !ir_op_has(s->op, IR_MOVE | IR_SRC)) return s;
    if (!pass_view_affine(n)) return NULL;
  }
  return n;
}

/* The first computing node under n's views is stored (gather tables and
 * scatter operands are read at other places than their consumer's index),
 * unless it is a gather: a gather of a gather composes two index loads,
 * and its own table follows this rule (x[i, j] is one kernel). */
static void store_under_views(const ir_node *n, bool *mat) {
  while (ir_op_has(n->op, IR_MOVE)) n = n->src[0];
  if (!free_node(n) && n->op != IR_GATHER) mat[n->scratch] = true;
}

/* Whether n is at most `*budget` nodes of cheap elementwise ops, views and
 * gathers over buffers and sources: a gather table that each read may
 * recompute (taps of an interpolation of relu(x) read x and apply relu
 * themselves; storing it would cost a kernel and a pass over the table). */
static bool cheap_tree(const ir_node *n, int *budget) {
  if (free_node(n)) return true;
  if (--*budget < 0 || !(cheap(n->op) || n->op == IR_GATHER || ir_op_has(n->op, IR_MOVE))) return false;
  for (int s = 0; s < n->nsrc; s++)
    if (!cheap_tree(n->src[s], budget)) return false;
  return true;
}

enum { CHEAP_TABLE_NODES = 64 };   /* cheap_tree's budget: bounds its recursion too */

static void mark_indexed(const ir_node *n, bool merge, bool *mat) {
  int budget = CHEAP_TABLE_NODES;
  if (n->op == IR_GATHER) {
    if (!cheap_tree(n->src[0], &budget)) store_under_views(n->src[0], mat);
    if (!merge) mat[n->scratch] = true;
  }
  if (!ir_op_is_scatter(n->op)) return;
  mat[n->scratch] = true;
  for (int s = 0; s < n->nsrc; s++) store_under_views(n->src[s], mat);
}

/* A reduction to fewer values than this gets no parallel range from its
 * own output: a reduction it reads is stored by a kernel of its own, whose
 * rows the threads split (split_reduce.c's partials), not rerun inside it. */
enum { SMALL_REDUCE = 64 };

/* ---- CUDA: reductions that can use the whole grid -------------------------
 * The CUDA back end spreads a reduction over the whole grid only when it and
 * its epilogue are all a kernel computes (codegen_cuda/emit.c's
 * grid_blocks). Anything more puts a kernel with few outputs on one block:
 * a second reduction (var's two sums, softmax's max then sum) or a pass over
 * the data that reads its value (x - x.mean(), softmax's output); a 1-D
 * softmax of 16M elements ran on 1 of 132 SMs. So on CUDA a big reduction to
 * fewer than SMALL_REDUCE values is stored by a kernel of its own when a
 * bigger node, or a node that also reads another such reduction, reads its
 * value (through small elementwise nodes and views), and such a kernel takes
 * no other reduction. mean(x) alone stays one grid kernel. */
enum { GRID_MIN = 1 << 16, MAX_REACHED = 8 };  /* reduced elements per value worth the grid */

static bool grid_reduce(const pass_graph *g, const ir_node *n) {
  if (pass_target(g, n) != KILN_CUDA || !ir_op_has(n->op, IR_REDUCE)) return false;
  int64_t out = ir_numel(n->ndim, n->shape);
  return out < SMALL_REDUCE && ir_numel(n->src[0]->ndim, n->src[0]->shape) >= GRID_MIN * (out > 0 ? out : 1);
}

/* The grid reductions (distinct, at most MAX_REACHED) whose values reach a
 * node's sources through small elementwise nodes and views. */
typedef struct { const ir_node *r[MAX_REACHED]; int k; } reached;

static void reach_add(reached *to, const ir_node *x) {
  for (int i = 0; i < to->k; i++)
    if (to->r[i] == x) return;
  if (to->k < MAX_REACHED) to->r[to->k++] = x;
}

/* In topological order, so each source's set is known: one visit per edge,
 * where walking down from every node was quadratic in a long chain. */
static void grid_sources(const pass_graph *g, reached *reach) {
  for (int i = 0; i < g->n; i++) {
    const ir_node *n = g->topo[i];
    reach[i].k = 0;
    for (int s = 0; s < n->nsrc; s++) {
      const ir_node *x = n->src[s];
      const reached *rx = &reach[x->scratch];
      if (grid_reduce(g, x)) reach_add(&reach[i], x);
      else if ((ir_op_has(x->op, IR_EW) || ir_op_has(x->op, IR_MOVE)) && ir_numel(x->ndim, x->shape) < SMALL_REDUCE)
        for (int j = 0; j < rx->k; j++) reach_add(&reach[i], rx->r[j]);
    }
  }
}

/* First-pass materialization: computing nodes broadcast along a leading
 * dim, matmul operands that are not strided views of a buffer, reductions
 * read by a small reduction, grid reductions (above) and with merging off
 * every computing node. Targets go in *target (mark_outputs). */
static bool mark_forced(pass_graph *g, bool merge, bool *mat, bool *target) {
  reached *reach = ir_malloc(sizeof *reach * (size_t)g->n);
  if (!reach) return false;
  grid_sources(g, reach);
  for (int i = 0; i < g->n; i++) {
    ir_node *n = g->topo[i];
    if (n->op == IR_BUFFER) continue;
    int nr = reach[i].k;
    if (nr > 1 || (nr == 1 && ir_numel(n->ndim, n->shape) >= SMALL_REDUCE))
      for (int j = 0; j < nr; j++) mat[reach[i].r[j]->scratch] = true;
    target[i] = is_target(g, n);
    if (!merge && (ir_op_has(n->op, IR_EW) || node_kind(n))) mat[i] = true;
    if (n->op == IR_EXPAND) {
      ir_node *s = n->src[0];
      if (!free_node(s) && !trailing_broadcast(n)) mat[s->scratch] = true;
    }
    mark_indexed(n, merge, mat);
    if (ir_op_has(n->op, IR_SORTING)) {   /* a row kernel of its own, reading a buffer */
      mat[i] = true;
      if (n->src[0]->op != IR_BUFFER) mat[n->src[0]->scratch] = true;
    }
    if (ir_op_has(n->op, IR_XFER)) {   /* a copy of a stored value, never a kernel */
      mat[i] = true;
      if (n->src[0]->op != IR_BUFFER) mat[n->src[0]->scratch] = true;
    }
    if (ir_op_has(n->op, IR_REDUCE) && ir_numel(n->ndim, n->shape) < SMALL_REDUCE) {
      ir_node *s = n->src[0];
      while (ir_op_has(s->op, IR_MOVE)) s = s->src[0];
      if (ir_op_has(s->op, IR_REDUCE)) mat[s->scratch] = true;
    }
    if (ir_op_has(n->op, IR_ATTN)) mat[i] = true;
    for (int k = 0; (n->op == IR_MATMUL && k < 2) || (ir_op_has(n->op, IR_ATTN) && k < n->nsrc); k++) {
      ir_node *operand = n->op == IR_MATMUL && k && pass_window_operand(g, n) ? n->src[k]->src[0] : n->src[k];
      ir_node *leaf = strided_leaf(operand, n->op != IR_MATMUL);
      ir_node *m = leaf ? leaf : operand;
      if (m->op != IR_BUFFER) mat[m->scratch] = true;
    }
  }
  free(reach);
  return true;
}

/* LLVM's passes recurse along a chain of instructions (Reassociate's ranks
 * overflowed an 8 MiB stack at 300,000 fused adds): a node whose chain of
 * inlined computing sources reaches FUSE_MAX_DEPTH is stored, and the
 * chain goes on from its load. That bounds every kernel's expression, for
 * LLVM and for every walk of the kernel IR; a 25,000-op chain becomes 7
 * kernels instead of 1, at the cost of a store and a load per 4096 ops. */
#define FUSE_MAX_DEPTH 4096

static bool mark_deep(const pass_graph *g, bool *mat) {
  int *depth = ir_calloc((size_t)g->n + 1, sizeof *depth);   /* inlined computing nodes ending here */
  if (!depth) return false;
  for (int i = 0; i < g->n; i++) {
    const ir_node *n = g->topo[i];
    if (n->op == IR_BUFFER) continue;
    for (int s = 0; s < n->nsrc; s++) {
      int j = n->src[s]->scratch;
      if (!mat[j] && depth[j] > depth[i]) depth[i] = depth[j];
    }
    if (++depth[i] >= FUSE_MAX_DEPTH) {
      mat[i] = true;
      depth[i] = 0;
    }
  }
  free(depth);
  return true;
}

/* Targets are stored. One that is elementwise and stored for no other
 * reason may join the kernel of its users (place), as one more output of
 * it: a gradient that another gradient reads (d relu = where(x > 0, g, 0),
 * d w = d relu * x) is then stored by the kernel that computes both, not
 * by a kernel of its own that the other reads back. *target keeps those. */
static void mark_outputs(const pass_graph *g, bool *mat, bool *target) {
  for (int i = 0; i < g->n; i++) {
    if (!target[i]) continue;
    target[i] = !mat[i] && ir_op_has(g->topo[i]->op, IR_EW);
    mat[i] = true;
  }
}

/* Whether matmul mm may join group r, whose only views are reshapes: its
 * value reaches the group's outputs through elementwise nodes and at most
 * one reshape on each path. A reshape keeps the row-major order, so the
 * epilogue still computes the outputs at the GEMM's own (i, j), each at the
 * same flat position (lower.c's reshaped_outputs): a convolution's bias and
 * activation after the reshape to (N, O, OH, OW). */
static bool reshaped_epilogue(pass_graph *g, fuse_ctx *c, int r, const ir_node *mm) {
  if (ir_numel(mm->ndim, mm->shape) != ir_numel(g->groups[r].outs[0]->ndim, g->groups[r].outs[0]->shape)) return false;
  int *stack = ir_malloc(sizeof *stack * ((size_t)g->n + 1));
  unsigned char *seen = ir_calloc((size_t)g->n + 1, 2);   /* per node: seen before / after the reshape */
  bool ok = stack && seen;
  int n = 0;
  if (ok) stack[n++] = mm->scratch;
  while (ok && n) {
    int x = stack[--n], i = x % g->n;
    bool after = x >= g->n;
    for (int u = c->first_user[i]; ok && u >= 0; u = c->next_user[u]) {
      int j = u / IR_MAX_SRC;
      if (c->group[j] < 0 || uf_find(c->parent, c->group[j]) != r) continue;
      bool reshape = g->topo[j]->op == IR_RESHAPE;
      ok = !(reshape && after) && (reshape || ir_op_has(g->topo[j]->op, IR_EW));
      int next = j + (after || reshape ? g->n : 0);
      if (ok && !seen[next]) {
        seen[next] = 1;
        stack[n++] = next;
      }
    }
  }
  free(stack);
  free(seen);
  return ok;
}

/* Whether a node of kind `kind` and shape `n` may join group r. A GEMM's
 * epilogue computes the group's outputs at the GEMM's own (i, j): no view
 * may sit between them, even one that keeps the shape (flip(relu(x @ w))),
 * but a reshape (above). */
static bool fits(pass_graph *g, fuse_ctx *c, int r, unsigned kind, const ir_node *n) {
  unsigned k = c->kinds[r];
  if (k & HAS_SCATTER) return (kind & ANY_VIEW) != 0;  /* its operands' views only */
  if ((k | kind) & HAS_SORT) return false;
  if (kind & HAS_SCAN) return !(k & NOT_WITH_SCAN) && same_shape(g->groups[r].outs[0], n);
  if ((k & HAS_SCAN) && (kind & NOT_WITH_SCAN)) return false;
  if (kind & HAS_CONTRACT) return !k ? same_shape(g->groups[r].outs[0], n) : k == HAS_RESHAPE && reshaped_epilogue(g, c, r, n);
  if (kind & HAS_REDUCE) return !(k & (HAS_CONTRACT | HAS_GRID));
  if (kind & ANY_VIEW) return !(k & HAS_CONTRACT);
  return true;
}

static bool mergeable(pass_graph *g, fuse_ctx *c, int r, int s) {
  unsigned a = c->kinds[r], b = c->kinds[s];
  bool kinds_ok = !((a & HAS_CONTRACT) && b) && !((b & HAS_CONTRACT) && a) && !((a | b) & HAS_SORT);
  kinds_ok = kinds_ok && !((a & HAS_GRID) && (b & HAS_REDUCE)) && !((b & HAS_GRID) && (a & HAS_REDUCE));
  kinds_ok = kinds_ok && !((a | b) & HAS_SCATTER);
  kinds_ok = kinds_ok && !((a & HAS_SCAN) && (b & NOT_WITH_SCAN)) && !((b & HAS_SCAN) && (a & NOT_WITH_SCAN));
  /* a scan is computed at its kernel's own index: a view there may read it
   * at another (a reshape of its value), which only its stored output has */
  kinds_ok = kinds_ok && !((a & HAS_SCAN) && (b & HAS_VIEW)) && !((b & HAS_SCAN) && (a & HAS_VIEW));
  return kinds_ok && same_shape(g->groups[r].outs[0], g->groups[s].outs[0]);
}

/* What node n brings to a group (node_kind, plus the flags above). */
static unsigned group_kind(const pass_graph *g, const ir_node *n) {
  unsigned view = n->op == IR_RESHAPE ? HAS_RESHAPE : ir_op_has(n->op, IR_MOVE) ? HAS_VIEW : 0;
  return node_kind(n) | view | (grid_reduce(g, n) ? HAS_GRID : 0) |
         (ir_op_is_scatter(n->op) ? HAS_SCATTER : 0);
}

static int new_group(pass_graph *g, fuse_ctx *c, int i, int *ngroups) {
  g->groups[*ngroups].outs = &g->topo[i];  /* representative until regrouping */
  c->parent[*ngroups] = *ngroups;
  c->kinds[*ngroups] = (unsigned char)group_kind(g, g->topo[i]);
  return (*ngroups)++;
}

/* Group of a non-materialized node: the groups of its users, merged when
 * they can share a kernel; materialized when they cannot or when the node
 * does not fit its users' kernel. */
static int place(pass_graph *g, fuse_ctx *c, int i, int *group, int *ngroups, bool *mat, const bool *recompute) {
  int root = -1;
  bool conflict = false;
  for (int u = c->first_user[i]; u >= 0; u = c->next_user[u]) {
    if (group[u / IR_MAX_SRC] < 0) continue;  /* a recomputed user belongs to no kernel */
    int r = uf_find(c->parent, group[u / IR_MAX_SRC]);
    if (root < 0) root = r;
    else if (r != root) {
      if (c->merge && mergeable(g, c, r, root)) {
        c->parent[r] = root;
        c->kinds[root] |= c->kinds[r];
      } else {
        conflict = true;
      }
    }
  }
  unsigned kind = group_kind(g, g->topo[i]);
  /* a GEMM's epilogue reads its value at the GEMM's own (i, j), and a
   * scan's consumers read it where its loop is: only elementwise users keep
   * that index */
  for (int u = c->first_user[i]; (kind & (HAS_CONTRACT | HAS_SCAN)) && u >= 0; u = c->next_user[u]) {
    ir_op op = g->topo[u / IR_MAX_SRC]->op;
    if (!ir_op_has(op, IR_EW) && !((kind & HAS_CONTRACT) && op == IR_RESHAPE)) conflict = true;
  }
  /* a column reduction is its own kernel, lowered with its loop outside */
  if ((kind & HAS_REDUCE) && !pass_reduce_trailing(g->topo[i])) conflict = true;
  /* a stored output joins only an elementwise kernel of its own shape (mark_outputs) */
  if (mat[i] && root >= 0)
    conflict |= (c->kinds[root] & (HAS_CONTRACT | HAS_SORT | HAS_SCATTER | HAS_SCAN | HAS_GRID)) ||
                !same_shape(g->groups[root].outs[0], g->topo[i]);
  if (root >= 0 && !conflict && fits(g, c, root, kind, g->topo[i])) {
    c->kinds[root] |= (unsigned char)kind;
    return root;
  }
  if (recompute[i]) return -1;  /* each kernel that reads it computes it */
  mat[i] = true;
  return new_group(g, c, i, ngroups);
}

static void build_users(pass_graph *g, fuse_ctx *c) {
  for (int i = 0; i < g->n; i++) c->first_user[i] = -1;
  for (int i = 0; i < g->n; i++) {
    ir_node *n = g->topo[i];
    for (int s = 0; s < n->nsrc; s++) {
      int j = n->src[s]->scratch;
      c->next_user[IR_MAX_SRC * i + s] = c->first_user[j];
      c->first_user[j] = IR_MAX_SRC * i + s;
    }
  }
}

/* Whether `from` depends on `to` (a path along sources), by a depth-first
 * search with an explicit stack (the path may be the whole graph). seen:
 * per node, visited by this search (cleared by the caller); stack: room
 * for g->n nodes. */
static bool reaches(const ir_node *from, const ir_node *to, unsigned char *seen, const ir_node **stack) {
  int n = 0;
  stack[n++] = from;
  seen[from->scratch] = 1;
  while (n) {
    const ir_node *x = stack[--n];
    if (x == to) return true;
    for (int s = x->nsrc - 1; s >= 0; s--)
      if (!seen[x->src[s]->scratch]) {
        seen[x->src[s]->scratch] = 1;
        stack[n++] = x->src[s];
      }
  }
  return false;
}

static bool column_reduce(const pass_graph *g, int i, const int *group) {
  return group[i] >= 0 && ir_op_has(g->topo[i]->op, IR_REDUCE) && !pass_reduce_trailing(g->topo[i]);
}

/* Column reductions over the same dims of same-shaped data, none depending
 * on another, share one kernel: it walks the data once (W6's mean and the
 * two sums of var). A later one joins an earlier one's kernel when it
 * depends on none of that kernel's reductions (earlier ones cannot depend
 * on it: topo order). */
static bool merge_columns(pass_graph *g, fuse_ctx *c, const int *group) {
  unsigned char *seen = ir_calloc((size_t)g->n + 1, 1);
  const ir_node **stack = ir_malloc(sizeof *stack * ((size_t)g->n + 1));
  if (!seen || !stack) {
    free(seen);
    free(stack);
    return false;
  }
  for (int j = 0; j < g->n; j++) {
    if (!column_reduce(g, j, group)) continue;
    for (int i = 0; i < j; i++) {
      if (!column_reduce(g, i, group) || !pass_column_sibling(g->topo[i], g->topo[j])) continue;
      int ri = uf_find(c->parent, group[i]), rj = uf_find(c->parent, group[j]);
      bool ok = ri != rj;
      for (int m = 0; ok && m < j; m++) {
        if (!column_reduce(g, m, group) || uf_find(c->parent, group[m]) != ri) continue;
        memset(seen, 0, (size_t)g->n + 1);
        ok = !reaches(g->topo[j], g->topo[m], seen, stack);
      }
      if (!ok) continue;
      c->parent[rj] = ri;
      c->kinds[ri] |= c->kinds[rj];
      break;
    }
  }
  free(seen);
  free(stack);
  return true;
}

/* A sort's values and its positions (sort and argsort, topk's two results)
 * of the same line share one kernel, which sorts once. */
static bool sort_siblings(const ir_node *a, const ir_node *b) {
  return ir_op_has(a->op, IR_SORTING) && ir_op_has(b->op, IR_SORTING) && a->op != b->op && a->src[0] == b->src[0] &&
         a->attr.axes == b->attr.axes && a->attr.sort_k == b->attr.sort_k && a->attr.descending == b->attr.descending;
}

static void merge_sorts(pass_graph *g, fuse_ctx *c, const int *group) {
  for (int j = 0; j < g->n; j++)
    for (int i = 0; i < j && group[j] >= 0 && ir_op_has(g->topo[j]->op, IR_SORTING); i++) {
      if (group[i] < 0 || !sort_siblings(g->topo[i], g->topo[j])) continue;
      int ri = uf_find(c->parent, group[i]), rj = uf_find(c->parent, group[j]);
      if (ri != rj) c->parent[rj] = ri;
    }
}

/* Collects each root group's materialized nodes (topo order) as its outputs;
 * false when out of memory. */
static bool regroup(pass_graph *g, fuse_ctx *c, int *group, int ngroups, bool *mat) {
  int *dense = ir_arena_alloc(g->arena, sizeof(int) * (size_t)(ngroups + 1));
  pass_group *out = ir_arena_alloc(g->arena, sizeof(pass_group) * (size_t)(ngroups + 1));
  g->group_of = ir_arena_alloc(g->arena, sizeof(int) * (size_t)(g->n + 1));
  g->materialized = ir_arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n + 1));
  if (!dense || !out || !g->group_of || !g->materialized) return false;
  for (int r = 0; r < ngroups; r++) dense[r] = -1;
  int nout = 0;
  for (int i = 0; i < g->n; i++) {
    if (!mat[i]) continue;
    int r = uf_find(c->parent, group[i]);
    if (dense[r] < 0) {
      dense[r] = nout++;
      pass_group *pg = &out[dense[r]];
      if (!(pg->outs = ir_arena_alloc(g->arena, sizeof(ir_node *) * (size_t)g->n))) return false;
      pg->ndim = g->topo[i]->ndim;
      memcpy(pg->shape, g->topo[i]->shape, sizeof pg->shape);
    }
    pass_group *pg = &out[dense[r]];
    pg->outs[pg->nout++] = g->topo[i];
  }
  for (int i = 0; i < g->n; i++) {
    g->group_of[i] = group[i] < 0 ? -1 : dense[uf_find(c->parent, group[i])];
    g->materialized[i] = mat[i];
  }
  g->groups = out;
  g->ngroups = nout;
  return true;
}

void pass_fuse(pass_graph *g, pass_fuse_mode mode) {
  int n = g->n;
  bool merge = mode != FUSE_OFF, siblings = mode == FUSE_ALL;
  for (int i = 0; i < n; i++) g->topo[i]->scratch = i;
  bool *mat = ir_calloc((size_t)n + 1, sizeof *mat);
  int *group = ir_calloc((size_t)n + 1, sizeof *group);
  fuse_ctx c = {ir_calloc((size_t)n + 1, sizeof(int)), ir_calloc((size_t)n + 1, 1), siblings,
                ir_calloc((size_t)n + 1, sizeof(int)), ir_calloc(IR_MAX_SRC * ((size_t)n + 1), sizeof(int)), group};
  bool *recompute = ir_calloc((size_t)n + 1, sizeof *recompute), *output = ir_calloc((size_t)n + 1, sizeof *output);
  g->groups = ir_arena_alloc(g->arena, sizeof(pass_group) * (size_t)(n + 1));
  g->oom = !(mat && group && c.parent && c.kinds && c.first_user && c.next_user && recompute && output && g->groups);
  if (!g->oom) build_users(g, &c);
  g->oom = g->oom || !mark_forced(g, merge, mat, output);
  g->oom = g->oom || !mark_deep(g, mat);
  if (!g->oom) mark_outputs(g, mat, output);
  if (merge && !g->oom) mark_recomputable(g, mat, recompute);
  int ngroups = 0;
  for (int i = g->oom ? -1 : n - 1; i >= 0; i--) {
    ir_node *nd = g->topo[i];
    group[i] = -1;
    if (nd->op == IR_BUFFER || (free_node(nd) && !mat[i])) continue;
    if (mat[i] && !(merge && output[i])) {
      group[i] = new_group(g, &c, i, &ngroups);
    } else {
      group[i] = place(g, &c, i, group, &ngroups, mat, recompute);
    }
  }
  g->oom = g->oom || (siblings && !merge_columns(g, &c, group));
  if (siblings && !g->oom) merge_sorts(g, &c, group);
  g->oom = g->oom || !regroup(g, &c, group, ngroups, mat);
  free(recompute);
  free(output);
  free(mat);
  free(group);
  free(c.parent);
  free(c.kinds);
  free(c.first_user);
  free(c.next_user);
}
