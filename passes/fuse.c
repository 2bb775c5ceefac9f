/* fuse.c: partitions the pending DAG into kernel groups.
 *
 * Policy (documented in docs/passes.md):
 * - A node is materialized (stored by some kernel) when it is a target, when
 *   a computing node is broadcast to more elements (recomputing it per output
 *   element would repeat its work), or when kernels of different shapes need
 *   it (it is computed once and loaded by each).
 * - Everything else is inlined into the one kernel that consumes it. Views
 *   (movement nodes) are index rewrites, so a view that is not a target is
 *   never stored: only EXPAND reads a computing source more than once.
 *   Sources (constants, arange, eye, random) are cheap and always inlined,
 *   into every kernel that reads them: no buffer exists for them.
 * - Kernels of the same shape that share an inlined node merge into one
 *   multi-output kernel, so the shared node is computed once.
 * With merge off (KILN_PASSES=-fuse) every computing node is its own kernel.
 * Invariant ensured: g->group_of and g->materialized as pass.h says; each
 * group's outputs share its shape and are its materialized nodes.
 */
#include "pass.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int *parent;          /* union-find over group ids */
  int *first_user;      /* consumer lists: topo index of the first user */
  int *next_user;       /* per (node, source slot) link: index 3*i + slot */
} fuse_ctx;

static int uf_find(int *parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

static bool inlined_source(const ir_node *n) { return ir_op_has(n->op, IR_SRC) && n->op != IR_BUFFER; }

static bool is_target(const pass_graph *g, const ir_node *n) {
  for (int t = 0; t < g->ntargets; t++)
    if (g->targets[t] == n) return true;
  return false;
}

static bool same_shape(const ir_node *a, const ir_node *b) {
  return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* First-pass materialization: targets, broadcast computing nodes, and with
 * merging off every computing node. */
static void mark_forced(pass_graph *g, bool merge, bool *mat) {
  for (int i = 0; i < g->n; i++) {
    ir_node *n = g->topo[i];
    if (n->op == IR_BUFFER) continue;
    if (is_target(g, n)) mat[i] = true;
    if (!merge && ir_op_has(n->op, IR_EW)) mat[i] = true;
    if (n->op == IR_EXPAND) {
      ir_node *s = n->src[0];
      if (s->op != IR_BUFFER && !inlined_source(s) && ir_numel(s->ndim, s->shape) < ir_numel(n->ndim, n->shape))
        mat[s->scratch] = true;
    }
  }
}

/* Group of a non-materialized node: the groups of its users, merged when
 * they have its users' common shape; materialized when they differ. */
static int place(pass_graph *g, fuse_ctx *c, int i, int *group, int *ngroups, bool *mat) {
  int root = -1;
  bool conflict = false;
  for (int u = c->first_user[i]; u >= 0; u = c->next_user[u]) {
    int r = uf_find(c->parent, group[u / 3]);
    if (root < 0) root = r;
    else if (r != root) {
      if (same_shape(g->groups[r].outs[0], g->groups[root].outs[0])) c->parent[r] = root;
      else conflict = true;
    }
  }
  if (root >= 0 && !conflict) return root;
  mat[i] = true;
  g->groups[*ngroups].outs = &g->topo[i];  /* representative until regrouping */
  c->parent[*ngroups] = *ngroups;
  return (*ngroups)++;
}

static void build_users(pass_graph *g, fuse_ctx *c) {
  for (int i = 0; i < g->n; i++) c->first_user[i] = -1;
  for (int i = 0; i < g->n; i++) {
    ir_node *n = g->topo[i];
    for (int s = 0; s < n->nsrc; s++) {
      int j = n->src[s]->scratch;
      c->next_user[3 * i + s] = c->first_user[j];
      c->first_user[j] = 3 * i + s;
    }
  }
}

/* Collects each root group's materialized nodes (topo order) as its outputs. */
static void regroup(pass_graph *g, fuse_ctx *c, int *group, int ngroups, bool *mat) {
  int *dense = ir_arena_alloc(g->arena, sizeof(int) * (size_t)(ngroups + 1));
  for (int r = 0; r < ngroups; r++) dense[r] = -1;
  pass_group *out = ir_arena_alloc(g->arena, sizeof(pass_group) * (size_t)(ngroups + 1));
  int nout = 0;
  for (int i = 0; i < g->n; i++) {
    if (!mat[i]) continue;
    int r = uf_find(c->parent, group[i]);
    if (dense[r] < 0) {
      dense[r] = nout++;
      pass_group *pg = &out[dense[r]];
      pg->outs = ir_arena_alloc(g->arena, sizeof(ir_node *) * (size_t)g->n);
      pg->ndim = g->topo[i]->ndim;
      memcpy(pg->shape, g->topo[i]->shape, sizeof pg->shape);
    }
    pass_group *pg = &out[dense[r]];
    pg->outs[pg->nout++] = g->topo[i];
  }
  g->group_of = ir_arena_alloc(g->arena, sizeof(int) * (size_t)(g->n + 1));
  g->materialized = ir_arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n + 1));
  for (int i = 0; i < g->n; i++) {
    g->group_of[i] = group[i] < 0 ? -1 : dense[uf_find(c->parent, group[i])];
    g->materialized[i] = mat[i];
  }
  g->groups = out;
  g->ngroups = nout;
}

void pass_fuse(pass_graph *g, bool merge) {
  int n = g->n;
  for (int i = 0; i < n; i++) g->topo[i]->scratch = i;
  bool *mat = calloc((size_t)n + 1, sizeof *mat);
  int *group = calloc((size_t)n + 1, sizeof *group);
  fuse_ctx c = {calloc((size_t)n + 1, sizeof(int)), calloc((size_t)n + 1, sizeof(int)),
                calloc(3 * (size_t)n + 3, sizeof(int))};
  g->groups = ir_arena_alloc(g->arena, sizeof(pass_group) * (size_t)(n + 1));
  IR_ASSERT(mat && group && c.parent && c.first_user && c.next_user);
  build_users(g, &c);
  mark_forced(g, merge, mat);
  int ngroups = 0;
  for (int i = n - 1; i >= 0; i--) {
    ir_node *nd = g->topo[i];
    group[i] = -1;
    if (nd->op == IR_BUFFER || (inlined_source(nd) && !mat[i])) continue;
    if (mat[i]) {
      g->groups[ngroups].outs = &g->topo[i];
      c.parent[ngroups] = ngroups;
      group[i] = ngroups++;
    } else {
      group[i] = place(g, &c, i, group, &ngroups, mat);
    }
  }
  regroup(g, &c, group, ngroups, mat);
  free(mat);
  free(group);
  free(c.parent);
  free(c.first_user);
  free(c.next_user);
}
