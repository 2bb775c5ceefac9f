/* schedule.c: orders kernel groups so that each runs after the groups whose
 * outputs it loads (Kahn's algorithm over the group dependency graph), and
 * computes when each intermediate is read for the last time, so the runtime
 * can hand its buffer back to the allocator for the next kernels' outputs.
 * Needs fuse's group_of/materialized; ensures g->order is a launch order and
 * g->last_use, or returns false when merged groups wait on each other. */
#include "pass.h"

#include <stdlib.h>

/* A dependency: group u loads node j, an output of group h. */
typedef struct { int u, h, j; } dep;
typedef struct { dep *v; size_t n, cap; bool oom; } dep_list;

static void dep_add(dep_list *d, int u, int h, int j) {
  if (d->n == d->cap && !d->oom) {
    dep *v = ir_realloc(d->v, 2 * (d->cap ? d->cap : 32) * sizeof *d->v);
    if (v) d->v = v, d->cap = 2 * (d->cap ? d->cap : 32);
    else d->oom = true;
  }
  if (d->oom) return;
  d->v[d->n++] = (dep){u, h, j};
}

/* What group u reads through its source node j: j itself when it is stored
 * by another group; through a node it recomputes (no group, or inlined in
 * another group's kernel, reached from a recomputed one) the nodes that
 * reads in turn. Nodes of u itself are visited on their own. An explicit
 * stack (sources in order, as a recursive walk takes them): fusion bounds
 * a recomputed chain, but nothing here needs to rely on it. */
static void deps_through(const pass_graph *g, int u, int j, dep_list *d, dep_list *stack) {
  stack->n = 0;
  dep_add(stack, 0, 0, j);
  while (stack->n) {
    j = stack->v[--stack->n].j;
    const ir_node *n = g->topo[j];
    if (g->materialized[j]) {
      if (g->group_of[j] != u) dep_add(d, u, g->group_of[j], j);
      continue;
    }
    if (g->group_of[j] == u || n->op == IR_BUFFER) continue;
    for (int s = n->nsrc - 1; s >= 0; s--) dep_add(stack, 0, 0, n->src[s]->scratch);
  }
}

static dep_list all_deps(const pass_graph *g) {
  dep_list d = {0}, stack = {0};
  for (int i = 0; i < g->n; i++)
    for (int s = 0; g->group_of[i] >= 0 && s < g->topo[i]->nsrc; s++)
      deps_through(g, g->group_of[i], g->topo[i]->src[s]->scratch, &d, &stack);
  d.oom = d.oom || stack.oom;   /* a walk that lost its stack missed dependencies */
  free(stack.v);
  return d;
}

/* Liveness of materialized intermediates: the last launch that reads each. */
static void last_uses(pass_graph *g, const dep_list *d) {
  int *pos = ir_calloc((size_t)g->ngroups + 1, sizeof(int));
  if (!pos) {
    g->oom = true;
    return;
  }
  for (int k = 0; k < g->ngroups; k++) pos[g->order[k]] = k;
  g->last_use = ir_arena_alloc(g->arena, sizeof(int) * (size_t)(g->n + 1));
  if (!g->last_use) g->oom = true;
  for (int i = 0; g->last_use && i < g->n; i++) g->last_use[i] = -1;
  for (size_t e = 0; g->last_use && e < d->n; e++)
    if (pos[d->v[e].u] > g->last_use[d->v[e].j]) g->last_use[d->v[e].j] = pos[d->v[e].u];
  free(pos);
}

bool pass_schedule(pass_graph *g) {
  int ng = g->ngroups;
  dep_list d = all_deps(g);
  int *indeg = ir_calloc((size_t)ng + 1, sizeof(int));
  int *start = ir_calloc((size_t)ng + 2, sizeof(int));   /* CSR: waiters of each group */
  int *waiter = ir_calloc(d.n + 1, sizeof(int));
  int *queue = ir_calloc((size_t)ng + 1, sizeof(int));
  int *fill = ir_calloc((size_t)ng + 1, sizeof(int));
  g->oom = d.oom || !(indeg && start && waiter && queue && fill);
  if (g->oom) d.n = 0, ng = 0;   /* nothing to order: the graph is dropped */
  for (size_t e = 0; e < d.n; e++) start[d.v[e].h + 1]++, indeg[d.v[e].u]++;
  for (int h = 0; h < ng; h++) start[h + 1] += start[h];
  for (size_t e = 0; e < d.n; e++) waiter[start[d.v[e].h] + fill[d.v[e].h]++] = d.v[e].u;
  int head = 0, tail = 0;
  for (int h = 0; h < ng; h++)
    if (indeg[h] == 0) queue[tail++] = h;
  while (head < tail) {
    int h = queue[head++];
    for (int e = start[h]; e < start[h + 1]; e++)
      if (--indeg[waiter[e]] == 0) queue[tail++] = waiter[e];
  }
  bool acyclic = tail == ng;
  if (acyclic && !g->oom) {
    g->order = ir_arena_alloc(g->arena, sizeof(int) * (size_t)(ng + 1));
    g->oom = !g->order;
    for (int k = 0; g->order && k < ng; k++) g->order[k] = queue[k];
    if (g->order) last_uses(g, &d);
  }
  free(d.v);
  free(indeg);
  free(start);
  free(waiter);
  free(queue);
  free(fill);
  return acyclic;
}
