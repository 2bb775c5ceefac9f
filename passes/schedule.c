/* schedule.c: orders kernel groups so that each runs after the groups whose
 * outputs it loads (Kahn's algorithm over the group dependency graph), and
 * computes when each intermediate is read for the last time, so the runtime
 * can hand its buffer back to the allocator for the next kernels' outputs.
 * Needs fuse's group_of/materialized; ensures g->order is a launch order and
 * g->last_use, or returns false when merged groups wait on each other. */
#include "pass.h"

#include <stdlib.h>

/* An edge src -> user crosses groups exactly when src is materialized in a
 * group other than the one computing user: then user's group waits on it. */
static int cross_edge(pass_graph *g, int i, int s) {
  int u = g->group_of[i];
  int j = g->topo[i]->src[s]->scratch;
  int h = g->group_of[j];
  return u >= 0 && g->materialized[j] && h != u ? h : -1;
}

/* Liveness of materialized intermediates: the last launch that reads each. */
static void last_uses(pass_graph *g) {
  int *pos = calloc((size_t)g->ngroups + 1, sizeof(int));
  IR_ASSERT(pos);
  for (int k = 0; k < g->ngroups; k++) pos[g->order[k]] = k;
  g->last_use = ir_arena_alloc(g->arena, sizeof(int) * (size_t)(g->n + 1));
  for (int i = 0; i < g->n; i++) g->last_use[i] = -1;
  for (int i = 0; i < g->n; i++)
    for (int s = 0; s < g->topo[i]->nsrc; s++) {
      int h = cross_edge(g, i, s), j = g->topo[i]->src[s]->scratch;
      if (h >= 0 && pos[g->group_of[i]] > g->last_use[j]) g->last_use[j] = pos[g->group_of[i]];
    }
  free(pos);
}

bool pass_schedule(pass_graph *g) {
  int ng = g->ngroups;
  int *indeg = calloc((size_t)ng + 1, sizeof(int));
  int *start = calloc((size_t)ng + 2, sizeof(int));   /* CSR: waiters of each group */
  int *waiter = calloc(3 * (size_t)g->n + 1, sizeof(int));
  int *queue = calloc((size_t)ng + 1, sizeof(int));
  IR_ASSERT(indeg && start && waiter && queue);
  for (int i = 0; i < g->n; i++)
    for (int s = 0; s < g->topo[i]->nsrc; s++) {
      int h = cross_edge(g, i, s);
      if (h >= 0) start[h + 1]++, indeg[g->group_of[i]]++;
    }
  for (int h = 0; h < ng; h++) start[h + 1] += start[h];
  int *fill = calloc((size_t)ng + 1, sizeof(int));
  IR_ASSERT(fill);
  for (int i = 0; i < g->n; i++)
    for (int s = 0; s < g->topo[i]->nsrc; s++) {
      int h = cross_edge(g, i, s);
      if (h >= 0) waiter[start[h] + fill[h]++] = g->group_of[i];
    }
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
    last_uses(g);
  }
  free(indeg);
  free(start);
  free(waiter);
  free(queue);
  free(fill);
  return acyclic;
}
