/* inspect.h: the kernels a realize would run, without running them: for
 * back-end tests (the CUDA emitter and NVRTC checks run on machines without
 * a GPU) and tools that want to see the lowered kernel IR or the partition
 * of the graph into kernels (kiln_dump_graph). */
#ifndef KILN_INSPECT_H
#define KILN_INSPECT_H

#include "ir/graph.h"
#include "ir/kernel.h"
#include "passes/pass.h"

/* One kernel of the plan, in launch order, with the nodes bound to its input
 * parameters (param order after the outputs; an args param binds k->args). */
typedef struct {
  kernel *k;            /* NULL for a transfer (kiln_to): a copy, no kernel */
  int ninputs;
  ir_node **inputs;     /* borrowed: valid while the caller holds the roots */
} rt_planned;

/* The whole plan: the graph after the passes and its lowered kernels. */
typedef struct {
  pass_graph g;         /* topo, group_of, materialized, groups, order (pass.h) */
  rt_planned *kernels;  /* g.ngroups, in launch order: kernels[i] lowers group g.order[i] */
  int nheld;
  ir_node **held;       /* the nodes before the passes, retained: their rewrites may drop some */
} rt_graph_plan;

/* Runs the graph passes and lowering (the kernel passes included) on the
 * pending graph of nodes, as kiln_realize would. Nothing is compiled or
 * executed and the nodes stay pending (the passes' rewrites keep every
 * node's value). Under KILN_DYNAMIC=1 the kernels are the shape-generic
 * variants where a group has one. KILN_OK, or the status with the last error set when the
 * graph is invalid. Free *p with rt_graph_plan_free in both cases. target:
 * a kiln_device_type as for rt_plan_for, or -1 for each node's own device. */
kiln_status rt_plan_graph(int target, int n, ir_node *const *nodes, rt_graph_plan *p);
void rt_graph_plan_free(rt_graph_plan *p);

/* The kernels alone, in *out (free with rt_plan_free). Returns their
 * number, or -1 with the last error set when the graph is invalid. */
int rt_plan(int n, ir_node *const *nodes, rt_planned **out);
/* The kernels as target's back end would get them, whatever device the
 * nodes are on (the CUDA back end's tests plan graphs built on the host:
 * CPU-only kernel passes such as stash stay off). */
int rt_plan_for(kiln_device_type target, int n, ir_node *const *nodes, rt_planned **out);
void rt_plan_free(rt_planned *plan, int nkernels);

#endif
