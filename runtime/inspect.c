/* inspect.c: realize()'s path up to the kernel IR (collect -> graph passes
 * -> lower each group in launch order) and no further. */
#include "runtime/inspect.h"
#include "runtime/rt.h"

#include <stdlib.h>
#include <string.h>

/* The kernel is named by its key, as realize names it on its way to the
 * cache, so a plan's names match what KILN_DEBUG=1 prints. A transfer is a
 * copy that realize runs without a kernel: nothing to lower. Out of memory
 * inputs is NULL. */
static rt_planned plan_group(pass_graph *g, int gi, const pass_config *cfg) {
  rt_planned p = {.inputs = ir_malloc(sizeof(ir_node *) * ((size_t)g->n + 1))};
  if (!p.inputs || ir_op_has(g->groups[gi].outs[0]->op, IR_XFER)) return p;
  p.k = pass_run_kernel(g, gi, p.inputs, &p.ninputs, cfg);
  ir_str key = {0};
  if (p.k) k_key(p.k, &key);
  if (!p.k || key.failed) {
    k_free(p.k);
    free(p.inputs);
    p = (rt_planned){0};
  }
  ir_str_free(&key);
  return p;
}

/* Holds every node as realize does: a rewrite that drops a node's last user
 * must not free it while the pass arrays still point at it. */
kiln_status rt_plan_graph(int target, int n, ir_node *const *nodes, rt_graph_plan *p) {
  memset(p, 0, sizeof *p);
  p->nheld = ir_graph_collect(n, nodes, &p->held);
  if (p->nheld < 0) {
    p->nheld = 0;
    return ir_error_oom(nodes[0]);
  }
  for (int i = 0; i < p->nheld; i++) ir_node_retain(p->held[i]);
  p->g = (pass_graph){.ntargets = n, .targets = nodes, .arena = ir_arena_new(), .n = p->nheld,
                      .topo = ir_malloc(sizeof(ir_node *) * ((size_t)p->nheld + 1))};
  if (!p->g.topo || !p->g.arena) return ir_error_oom(nodes[0]);
  memcpy(p->g.topo, p->held, sizeof(ir_node *) * (size_t)p->nheld);
  /* KILN_DYNAMIC=1 (kiln_set_dynamic): the shape-generic kernels, as a realize would run them */
  bool generic = __atomic_load_n(&rt_opts()->dynamic, __ATOMIC_RELAXED) == KILN_DYNAMIC_ON;
  pass_config cfg = {.off = rt_opts()->passes, .debug = rt_opts()->debug, .target = target, .generic = generic};
  kiln_status st = pass_run_graph(&p->g, &cfg);
  if (st != KILN_OK) return st;
  p->kernels = ir_calloc((size_t)p->g.ngroups + 1, sizeof *p->kernels);
  if (!p->kernels) return ir_error_oom(nodes[0]);
  for (int i = 0; i < p->g.ngroups; i++)
    if (!(p->kernels[i] = plan_group(&p->g, p->g.order[i], &cfg)).inputs) return ir_error_oom(nodes[0]);
  return KILN_OK;
}

void rt_graph_plan_free(rt_graph_plan *p) {
  if (p->kernels) rt_plan_free(p->kernels, p->g.ngroups);
  pass_graph_release(&p->g);
  for (int i = 0; i < p->nheld; i++) ir_node_release(p->held[i]);
  free(p->held);
  free(p->g.topo);
  ir_arena_free(p->g.arena);
  memset(p, 0, sizeof *p);
}

static int plan(int target, int n, ir_node *const *nodes, rt_planned **out) {
  rt_graph_plan p;
  int count = -1;
  *out = NULL;
  if (rt_plan_graph(target, n, nodes, &p) == KILN_OK) {
    count = p.g.ngroups;
    *out = p.kernels;
    p.kernels = NULL;   /* the caller owns them now */
  }
  rt_graph_plan_free(&p);
  return count;
}

int rt_plan(int n, ir_node *const *nodes, rt_planned **out) { return plan(-1, n, nodes, out); }
int rt_plan_for(kiln_device_type target, int n, ir_node *const *nodes, rt_planned **out) {
  return plan((int)target, n, nodes, out);
}

void rt_plan_free(rt_planned *plan, int nkernels) {
  for (int i = 0; i < nkernels; i++) {
    k_free(plan[i].k);
    free(plan[i].inputs);
  }
  free(plan);
}
