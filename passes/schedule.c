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
typedef struct { dep *v; size_t n, cap; } dep_list;

static void dep_add(dep_list *d, int u, int h, int j) {
  if (d->n == d->cap) {
    d->cap = d->cap ? 2 * d->cap : 64;
    d->v = realloc(d->v, d->cap * sizeof *d->v);
    IR_ASSERT(d->v);
  }
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
  free(stack.v);
  return d;
}

/* Liveness of materialized intermediates: the last launch that reads each. */
static void last_uses(pass_graph *g, const dep_list *d) {
  int *pos = calloc((size_t)g->ngroups + 1, sizeof(int));
  IR_ASSERT(pos);
  for (int k = 0; k < g->ngroups; k++) pos[g->order[k]] = k;
  g->last_use = ir_arena_alloc(g->arena, sizeof(int) * (size_t)(g->n + 1));
  for (int i = 0; i < g->n; i++) g->last_use[i] = -1;
  for (size_t e = 0; e < d->n; e++)
    if (pos[d->v[e].u] > g->last_use[d->v[e].j]) g->last_use[d->v[e].j] = pos[d->v[e].u];
  free(pos);
}

bool pass_schedule(pass_graph *g) {
  int ng = g->ngroups;
  dep_list d = all_deps(g);
  int *indeg = calloc((size_t)ng + 1, sizeof(int));
  int *start = calloc((size_t)ng + 2, sizeof(int));   /* CSR: waiters of each group */
  int *waiter = calloc(d.n + 1, sizeof(int));
  int *queue = calloc((size_t)ng + 1, sizeof(int));
  int *fill = calloc((size_t)ng + 1, sizeof(int));
  IR_ASSERT(indeg && start && waiter && queue && fill);
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
  if (acyclic) {
    g->order = ir_arena_alloc(g->arena, sizeof(int) * (size_t)(ng + 1));
    for (int k = 0; k < ng; k++) g->order[k] = queue[k];
    last_uses(g, &d);
  }
  free(d.v);
  free(indeg);
  free(start);
  free(waiter);
  free(queue);
  free(fill);
  return acyclic;
}
