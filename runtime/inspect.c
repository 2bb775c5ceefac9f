/* inspect.c: rt_plan, realize()'s path up to the kernel IR (collect ->
 * graph passes -> lower each group in launch order) and no further. */
#include "runtime/inspect.h"
#include "passes/pass.h"
#include "runtime/rt.h"

#include <stdlib.h>

static rt_planned plan_group(pass_graph *g, int gi, const pass_config *cfg) {
  rt_planned p = {.inputs = malloc(sizeof(ir_node *) * ((size_t)g->n + 1))};
  IR_ASSERT(p.inputs);
  p.k = pass_run_kernel(g, gi, p.inputs, &p.ninputs, cfg);
  return p;
}

int rt_plan(int n, ir_node *const *nodes, rt_planned **out) {
  pass_graph g = {.ntargets = n, .targets = nodes, .arena = ir_arena_new()};
  g.n = ir_graph_collect(n, nodes, &g.topo);
  pass_config cfg = {rt_opts()->passes, rt_opts()->debug};
  int count = -1;
  *out = NULL;
  if (pass_run_graph(&g, &cfg) == KILN_OK) {
    *out = calloc((size_t)g.ngroups + 1, sizeof **out);
    IR_ASSERT(*out);
    for (count = 0; count < g.ngroups; count++) (*out)[count] = plan_group(&g, g.order[count], &cfg);
  }
  free(g.topo);
  ir_arena_free(g.arena);
  return count;
}

void rt_plan_free(rt_planned *plan, int nkernels) {
  for (int i = 0; i < nkernels; i++) {
    k_free(plan[i].k);
    free(plan[i].inputs);
  }
  free(plan);
}
