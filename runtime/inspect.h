/* inspect.h: the kernels a realize would run, without running them: for
 * back-end tests (the CUDA emitter and NVRTC checks run on machines without
 * a GPU) and tools that want to see the lowered kernel IR. */
#ifndef KILN_INSPECT_H
#define KILN_INSPECT_H

#include "ir/graph.h"
#include "ir/kernel.h"

/* One kernel of the plan, in launch order, with the nodes bound to its input
 * parameters (param order after the outputs; an args param binds k->args). */
typedef struct {
  kernel *k;
  int ninputs;
  ir_node **inputs;     /* borrowed: valid while the caller holds the roots */
} rt_planned;

/* Runs the graph passes and lowering (the kernel passes included) on the
 * pending graph of nodes, as kiln_realize would, and returns the kernels in
 * *out (free with rt_plan_free). Nothing is compiled or executed and the
 * nodes stay pending. Returns the number of kernels, or -1 with the last
 * error set when the graph is invalid. */
int rt_plan(int n, ir_node *const *nodes, rt_planned **out);
void rt_plan_free(rt_planned *plan, int nkernels);

#endif
